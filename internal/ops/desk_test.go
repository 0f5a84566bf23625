package ops_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// fakeBlocks is an ops.BlockIndex over a slice, most recent first.
type fakeBlocks struct {
	blocks    []ops.BlockedNumber
	err       error
	unblocked []string
	counters  []limit.Key
}

func (f *fakeBlocks) NoteBlock(context.Context, guard.Block) error { return nil }

func (f *fakeBlocks) EndBlock(context.Context, string, problem.Code) error { return nil }

func (f *fakeBlocks) ListBlocks(_ context.Context, match func(string) bool, n int) ([]ops.BlockedNumber, int, error) {
	if f.err != nil {
		return nil, 0, f.err
	}
	var out []ops.BlockedNumber
	total := 0
	for _, b := range f.blocks {
		if match == nil || match(b.Phone) {
			total++
			if len(out) < n {
				out = append(out, b)
			}
		}
	}
	return out, total, nil
}

func (f *fakeBlocks) Unblock(_ context.Context, phone string, counters []limit.Key, _ ...string) error {
	if f.err != nil {
		return f.err
	}
	f.unblocked = append(f.unblocked, phone)
	f.counters = counters
	return nil
}

// eventRecorder is a guard.EventSink that keeps what it is given.
type eventRecorder struct{ events []guard.Event }

func (r *eventRecorder) Record(e guard.Event) { r.events = append(r.events, e) }

type deskFixture struct {
	desk   *ops.Desk
	blocks *fakeBlocks
	deny   *fakeDenyList
	audit  *fakeAudit
	queued *eventRecorder
	now    time.Time
}

func newDesk(t *testing.T, entries []guard.DenyEntry) *deskFixture {
	t.Helper()
	d := &deskFixture{blocks: &fakeBlocks{}, deny: &fakeDenyList{}, audit: &fakeAudit{}, queued: &eventRecorder{},
		now: time.Date(2026, 3, 1, 12, 30, 30, 0, time.UTC)}
	d.deny.set(entries, nil)
	cache := ops.NewDenyCache(d.deny, ops.DenyCacheOptions{})
	if err := cache.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.desk = ops.NewDesk(ops.DeskOptions{Blocks: d.blocks, DenyList: d.deny, Deny: cache, Audit: d.audit,
		Events: d.queued, Now: func() time.Time { return d.now }})
	return d
}

func wantDeskCode(t *testing.T, err error, want problem.Code) {
	t.Helper()
	if got := problem.CodeOf(err); got != want {
		t.Fatalf("error code: got %q (%v), want %q", got, err, want)
	}
}

// TestUnblockClearsTheNumbersCounters: unblock clears exactly the number's
// own counters of /otp/send, and the code.
func TestUnblockClearsTheNumbersCounters(t *testing.T) {
	d := newDesk(t, nil)
	res, err := d.desk.Unblock(context.Background(), "+91 98000 00000", "ops:abcd")
	if err != nil {
		t.Fatal(err)
	}
	if res.Phone.E164 != "+919800000000" || res.DeniedBy != nil {
		t.Errorf("result: %+v", res)
	}
	want := []limit.Key{{Space: "otp", ID: "+919800000000", Name: "cooldown"}, {Space: "otp", ID: "+919800000000", Name: "sends"},
		{Space: "otp", ID: "+919800000000", Name: "whatsapp_sends"}, {Space: "otp", ID: "+919800000000", Name: "call_sends"}}
	if diff := cmp.Diff(want, d.blocks.counters); diff != "" {
		t.Errorf("counters cleared (-want +got):\n%s", diff)
	}
	w, _ := d.audit.snapshot()
	if len(w) != 1 || w[0].Action != ops.ActionUnblock || w[0].Actor != "ops:abcd" || w[0].Phone != "+919800000000" {
		t.Errorf("audit: %+v", w)
	}
}

func TestUnblockRefusals(t *testing.T) {
	d := newDesk(t, []guard.DenyEntry{{ID: 3, Pattern: "+9198"}})
	_, err := d.desk.Unblock(context.Background(), "12345", "ops:abcd")
	wantDeskCode(t, err, problem.CodeInvalidPhone)

	res, err := d.desk.Unblock(context.Background(), "+919800000000", "ops:abcd")
	if err != nil || res.DeniedBy == nil || res.DeniedBy.ID != 3 {
		t.Errorf("unblocking a deny-listed number: %+v, %v; want DeniedBy entry 3", res, err)
	}

	d.blocks.err = errors.New("redis down")
	_, err = d.desk.Unblock(context.Background(), "+919800000000", "ops:abcd")
	wantDeskCode(t, err, problem.CodeStoreUnavailable)
}

// TestDeskAuditFallsBackToQueue: an ops action is written at once, and
// queued when the database fails, never lost.
func TestDeskAuditFallsBackToQueue(t *testing.T) {
	d := newDesk(t, nil)
	d.audit.setDown(true)
	if _, err := d.desk.Unblock(context.Background(), "+919800000000", "ops:abcd"); err != nil {
		t.Fatal(err)
	}
	if len(d.queued.events) != 1 || d.queued.events[0].Action != ops.ActionUnblock {
		t.Errorf("queued: %+v, want the unblock event", d.queued.events)
	}
}

func TestDeskBlockedMergesDenyEntries(t *testing.T) {
	at := func(min int) time.Time { return time.Date(2026, 3, 1, 12, min, 0, 0, time.UTC) }
	later := at(59)
	d := newDesk(t, []guard.DenyEntry{
		{ID: 1, Pattern: "+88213", CreatedAt: at(5), Reason: "fraud"},
		{ID: 2, Pattern: "+91", CreatedAt: at(25), ExpiresAt: &later},
		{ID: 3, Pattern: "+447400123456", CreatedAt: at(15)},
	})
	block := func(phone, country string, min int) ops.BlockedNumber {
		return ops.BlockedNumber{Block: guard.Block{Phone: phone, Country: country, Reason: problem.CodeCooldown, Until: at(31)}, Since: at(min)}
	}
	d.blocks.blocks = []ops.BlockedNumber{
		block("+919800000001", "IN", 20),
		block("+14155550100", "US", 10),
		block("+919800000002", "IN", 1),
	}
	phones := func(p ops.BlockPage) []string {
		var out []string
		for _, b := range p.Blocks {
			out = append(out, b.Phone)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		f         ops.BlockFilter
		want      []string
		wantTotal int
	}{
		{"all, most recent first", ops.BlockFilter{},
			[]string{"+91", "+919800000001", "+447400123456", "+14155550100", "+88213", "+919800000002"}, 6},
		{"second page", ops.BlockFilter{Limit: 2, Offset: 2}, []string{"+447400123456", "+14155550100"}, 6},
		{"past the end", ops.BlockFilter{Offset: 10}, nil, 6},
		{"by country: numbers and the prefixes of its calling code", ops.BlockFilter{Country: "in"},
			[]string{"+91", "+919800000001", "+919800000002"}, 3},
		{"by number: its block and the prefix covering it", ops.BlockFilter{Phone: "+91 98000 00002"},
			[]string{"+91", "+919800000002"}, 2},
		{"by prefix: numbers in it and entries inside it", ops.BlockFilter{Phone: "+44"}, []string{"+447400123456"}, 1},
		{"whole number deny entry has a country", ops.BlockFilter{Country: "GB"}, []string{"+447400123456"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := d.desk.Blocked(context.Background(), tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, phones(p)); diff != "" {
				t.Errorf("phones (-want +got):\n%s", diff)
			}
			if p.Total != tc.wantTotal {
				t.Errorf("total: got %d, want %d", p.Total, tc.wantTotal)
			}
		})
	}
	p, _ := d.desk.Blocked(context.Background(), ops.BlockFilter{Phone: "+88213"})
	if len(p.Blocks) != 1 || p.Blocks[0].Reason != problem.CodeDenied || p.Blocks[0].Deny == nil || p.Blocks[0].Deny.Reason != "fraud" || !p.Blocks[0].Until.IsZero() {
		t.Errorf("deny entry row: %+v", p.Blocks)
	}

	for _, f := range []ops.BlockFilter{{Phone: "abc"}, {Country: "India"}, {Limit: ops.MaxBlockLimit + 1}, {Offset: -1}} {
		_, err := d.desk.Blocked(context.Background(), f)
		wantDeskCode(t, err, problem.CodeInvalidRequest)
	}
	d.blocks.err = errors.New("redis down")
	_, err := d.desk.Blocked(context.Background(), ops.BlockFilter{})
	wantDeskCode(t, err, problem.CodeStoreUnavailable)
}

func TestDeskAddAndRemoveDeny(t *testing.T) {
	d := newDesk(t, nil)
	var stored []guard.DenyEntry
	d.deny.add = func(e guard.DenyEntry) (guard.DenyEntry, error) {
		e.ID = int64(len(stored) + 1)
		stored = append(stored, e)
		d.deny.set(slices.Clone(stored), nil)
		return e, nil
	}
	d.deny.remove = func(id int64) error {
		if id != 1 {
			return guard.ErrNotFound
		}
		stored = nil
		d.deny.set(nil, nil)
		return nil
	}
	expires := d.now.Add(time.Hour)
	e, err := d.desk.AddDeny(context.Background(), guard.DenyEntry{Pattern: "+88213", Reason: "fraud", ExpiresAt: &expires, Author: "spoofed"}, "ops:abcd")
	if err != nil {
		t.Fatal(err)
	}
	if e.Author != "ops:abcd" || !e.CreatedAt.Equal(d.now) {
		t.Errorf("added: %+v; want author the actor and created now", e)
	}
	// This instance enforces it at once, without waiting for a refresh.
	if p, _ := d.desk.Blocked(context.Background(), ops.BlockFilter{}); len(p.Blocks) != 1 {
		t.Errorf("blocked after AddDeny: %+v, want the new entry", p.Blocks)
	}
	if err := d.desk.RemoveDeny(context.Background(), 2, "ops:abcd"); problem.CodeOf(err) != problem.CodeNotFound {
		t.Errorf("remove unknown id: %v, want not_found", err)
	}
	if err := d.desk.RemoveDeny(context.Background(), 1, "ops:abcd"); err != nil {
		t.Fatal(err)
	}
	w, _ := d.audit.snapshot()
	var actions []string
	for _, e := range w {
		actions = append(actions, e.Action+" "+e.Actor)
	}
	if diff := cmp.Diff([]string{"ops.deny.add ops:abcd", "ops.deny.remove ops:abcd"}, actions); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}

	past := d.now.Add(-time.Second)
	for name, e := range map[string]guard.DenyEntry{
		"no pattern":    {},
		"letters":       {Pattern: "+44abc"},
		"expired":       {Pattern: "+44", ExpiresAt: &past},
		"long reason":   {Pattern: "+44", Reason: string(make([]byte, 501))},
		"invalid utf-8": {Pattern: "+44", Reason: "\xff"},
	} {
		if _, err := d.desk.AddDeny(context.Background(), e, "ops:abcd"); problem.CodeOf(err) != problem.CodeInvalidRequest {
			t.Errorf("%s: got %v, want invalid_request", name, err)
		}
	}
	d.deny.add = func(guard.DenyEntry) (guard.DenyEntry, error) { return guard.DenyEntry{}, errors.New("db down") }
	_, err = d.desk.AddDeny(context.Background(), guard.DenyEntry{Pattern: "+44"}, "ops:abcd")
	wantDeskCode(t, err, problem.CodeDatabaseUnavailable)
}

type fakeActivity []ops.ActivityCount

func (f fakeActivity) CountActivity(context.Context, time.Time, time.Time) ([]ops.ActivityCount, error) {
	return f, nil
}

func TestDeskActivity(t *testing.T) {
	d := newDesk(t, nil)
	minute := func(m int) time.Time { return time.Date(2026, 3, 1, 12, m, 0, 0, time.UTC) }
	act := fakeActivity{
		{Minute: minute(30), Action: "otp.send", Outcome: "sent", N: 4},
		{Minute: minute(30), Action: "otp.send", Outcome: "cooldown", N: 2},
		{Minute: minute(30), Action: "otp.send", Outcome: "denied", N: 1},
		// The velocity rule's refusals and the challenges put before an
		// automatic refusal are blocks too: the country table counts them
		// among its refusals.
		{Minute: minute(30), Action: "otp.send", Outcome: "unusual_volume", N: 50},
		{Minute: minute(30), Action: "otp.send", Outcome: "challenge_required", N: 5},
		{Minute: minute(29), Action: "otp.verify", Outcome: "too_many_attempts", N: 3},
		{Minute: minute(29), Action: "otp.verify", Outcome: "wrong_code", N: 9},
		{Minute: minute(29), Action: "otp.send", Outcome: "provider_unavailable", N: 9},
		{Minute: minute(0), Action: "otp.send", Outcome: "sent", N: 100}, // outside the window
	}
	desk := ops.NewDesk(ops.DeskOptions{Activity: act, Now: func() time.Time { return d.now }})
	got, err := desk.Activity(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 || !got[0].Minute.Equal(minute(21)) || !got[9].Minute.Equal(minute(30)) {
		t.Fatalf("minutes: %d from %s to %s, want 10 from 12:21 to 12:30", len(got), got[0].Minute, got[len(got)-1].Minute)
	}
	if got[9].Sends != 4 || got[9].Blocks != 58 || got[8].Sends != 0 || got[8].Blocks != 3 {
		t.Errorf("12:29 %+v, 12:30 %+v; want 0/3 and 4/58", got[8], got[9])
	}
}

// TestDeskEventsRefusesBadPrefix: a number prefix that is not + and digits
// is the caller's mistake (invalid_request), never sent to the database
// and never reported as the database failing.
func TestDeskEventsRefusesBadPrefix(t *testing.T) {
	d := newDesk(t, nil)
	asked := 0
	d.audit.list = func(ops.EventFilter) ([]guard.Event, error) { asked++; return nil, nil }
	for _, p := range []string{"+91%", "91", "+"} {
		_, err := d.desk.Events(context.Background(), ops.EventFilter{PhonePrefix: p})
		wantDeskCode(t, err, problem.CodeInvalidRequest)
	}
	if asked != 0 {
		t.Errorf("the audit log was asked %d times, want 0", asked)
	}
	if _, err := d.desk.Events(context.Background(), ops.EventFilter{PhonePrefix: "+9198"}); err != nil || asked != 1 {
		t.Errorf("Events(+9198): %v, audit log asked %d times; want nil and 1", err, asked)
	}
}
