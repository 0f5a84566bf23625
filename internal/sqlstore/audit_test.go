package sqlstore_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Two Verify services' SIDs, as the audit keeps them.
const (
	serviceA = "VA0000000000000000000000000000000a"
	serviceB = "VA0000000000000000000000000000000b"
)

func writeEvents(t *testing.T, s *sqlstore.SQL, events []guard.Event) {
	t.Helper()
	if err := s.WriteEvents(t.Context(), events); err != nil {
		t.Fatalf("WriteEvents(%d events): %v", len(events), err)
	}
}

func listEvents(t *testing.T, s *sqlstore.SQL, f ops.EventFilter) []guard.Event {
	t.Helper()
	got, err := s.ListEvents(t.Context(), f)
	if err != nil {
		t.Fatalf("ListEvents(%+v): %v", f, err)
	}
	return got
}

func details(events []guard.Event) []string {
	out := []string{}
	for _, e := range events {
		out = append(out, e.Detail)
	}
	return out
}

// wantNewestFirst fails unless IDs strictly decrease.
func wantNewestFirst(t *testing.T, events []guard.Event) {
	t.Helper()
	for i := 1; i < len(events); i++ {
		if events[i].ID >= events[i-1].ID {
			t.Fatalf("event %d has ID %d after ID %d: want strictly decreasing IDs", i, events[i].ID, events[i-1].ID)
		}
	}
}

func TestSQLListEventsFilters(t *testing.T) {
	written := []guard.Event{
		{At: t0, Action: "otp.send", Outcome: "sent", Phone: "+919800000001", Country: "IN", IP: "203.0.113.7", Actor: "key_app", Detail: "e1"},
		{At: t0.Add(1 * time.Second), Action: "otp.send", Outcome: "phone_rate_limited", Phone: "+919800000001", Country: "IN", IP: "203.0.113.7", Actor: "key_app", Detail: "e2", RequestID: "req-2",
			Service: serviceA},
		{At: t0.Add(2 * time.Second), Action: "otp.verify", Outcome: "wrong_code", Phone: "+919800000001", Country: "IN", IP: "2001:db8::1", Actor: "key_app", Detail: "e3",
			Service: serviceA},
		{At: t0.Add(3 * time.Second), Action: "otp.send", Outcome: "sent", Phone: "+447700900001", Country: "GB", IP: "198.51.100.2", Actor: "key_app", Detail: "e4",
			Service: serviceB},
		{At: t0.Add(4 * time.Second), Action: "ops.deny.add", Outcome: "ok", Actor: "alice", Detail: "e5", RequestID: "4f1c2a0b9d8e7f6a5b4c3d2e1f0a9b8c"},
		// Sub-millisecond part: stored and returned as milliseconds.
		{At: t0.Add(5*time.Second + 700*time.Microsecond), Action: "otp.verify", Outcome: "valid", Phone: "+447700900001", Country: "GB", IP: "198.51.100.2", Actor: "key_app", Detail: "e6"},
	}

	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		writeEvents(t, s, written)

		all := listEvents(t, s, ops.EventFilter{})
		wantNewestFirst(t, all)
		want := make([]guard.Event, 0, len(written))
		for i := len(written) - 1; i >= 0; i-- {
			e := written[i]
			e.At = e.At.Truncate(time.Millisecond)
			want = append(want, e)
		}
		if diff := cmp.Diff(want, all, cmpopts.IgnoreFields(guard.Event{}, "ID", "UID")); diff != "" {
			t.Fatalf("ListEvents with no filter (-want +got):\n%s", diff)
		}
		idOf := map[string]int64{}
		for _, e := range all {
			idOf[e.Detail] = e.ID
		}

		tests := []struct {
			name   string
			filter ops.EventFilter
			want   []string
		}{
			{"phone", ops.EventFilter{Phone: "+919800000001"}, []string{"e3", "e2", "e1"}},
			{"action", ops.EventFilter{Action: "otp.send"}, []string{"e4", "e2", "e1"}},
			{"phone and action", ops.EventFilter{Phone: "+919800000001", Action: "otp.send"}, []string{"e2", "e1"}},
			{"request id", ops.EventFilter{RequestID: "req-2"}, []string{"e2"}},
			{"another request id", ops.EventFilter{RequestID: "4f1c2a0b9d8e7f6a5b4c3d2e1f0a9b8c"}, []string{"e5"}},
			{"unknown request id", ops.EventFilter{RequestID: "req-9"}, []string{}},
			{"service", ops.EventFilter{Service: serviceA}, []string{"e3", "e2"}},
			{"another service", ops.EventFilter{Service: serviceB}, []string{"e4"}},
			{"a service of no event", ops.EventFilter{Service: "VA000000000000000000000000000000cc"}, []string{}},
			{"service and action", ops.EventFilter{Service: serviceA, Action: "otp.verify"}, []string{"e3"}},
			{"service and phone", ops.EventFilter{Service: serviceB, Phone: "+919800000001"}, []string{}},
			{"the default service", ops.EventFilter{DefaultService: true}, []string{"e6", "e5", "e1"}},
			{"the default service and action", ops.EventFilter{DefaultService: true, Action: "otp.send"}, []string{"e1"}},
			{"the default service and phone", ops.EventFilter{DefaultService: true, Phone: "+447700900001"}, []string{"e6"}},
			{"request id and phone", ops.EventFilter{RequestID: "req-2", Phone: "+447700900001"}, []string{}},
			{"since is inclusive", ops.EventFilter{Since: t0.Add(2 * time.Second)}, []string{"e6", "e5", "e4", "e3"}},
			{"until is exclusive", ops.EventFilter{Until: t0.Add(2 * time.Second)}, []string{"e2", "e1"}},
			{"since and until", ops.EventFilter{Since: t0.Add(time.Second), Until: t0.Add(4 * time.Second)}, []string{"e4", "e3", "e2"}},
			{"limit keeps the newest", ops.EventFilter{Limit: 2}, []string{"e6", "e5"}},
			{"before id", ops.EventFilter{BeforeID: idOf["e4"]}, []string{"e3", "e2", "e1"}},
			{"before id and phone", ops.EventFilter{BeforeID: idOf["e6"], Phone: "+447700900001"}, []string{"e4"}},
			{"before the first id", ops.EventFilter{BeforeID: idOf["e1"]}, []string{}},
			{"unknown phone", ops.EventFilter{Phone: "+10000000000"}, []string{}},
			{"everything filtered at once", ops.EventFilter{
				Phone: "+919800000001", Action: "otp.send", Since: t0, Until: t0.Add(time.Hour), Limit: 1, BeforeID: idOf["e6"],
			}, []string{"e2"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got := listEvents(t, s, tt.filter)
				wantNewestFirst(t, got)
				if diff := cmp.Diff(tt.want, details(got)); diff != "" {
					t.Errorf("ListEvents(%+v) details (-want +got):\n%s", tt.filter, diff)
				}
			})
		}
	})
}

// TestSQLListEventsOutcomeCountryPrefix: the ops page's filters by
// outcome, country and number prefix, alone and together. A country
// matches events that have no number too (a country's velocity alert).
func TestSQLListEventsOutcomeCountryPrefix(t *testing.T) {
	written := []guard.Event{
		{At: t0, Action: "otp.send", Outcome: "sent", Phone: "+919800000001", Country: "IN", Detail: "in1"},
		{At: t0, Action: "otp.send", Outcome: "phone_rate_limited", Phone: "+919800000001", Country: "IN", Detail: "in2"},
		{At: t0, Action: "otp.send", Outcome: "sent", Phone: "+918800000002", Country: "IN", Detail: "in3"},
		{At: t0, Action: "otp.send", Outcome: "sent", Phone: "+447700900001", Country: "GB", Detail: "gb1"},
		{At: t0, Action: "otp.verify", Outcome: "wrong_code", Phone: "+447700900001", Country: "GB", Detail: "gb2"},
		{At: t0, Action: "otp.velocity", Outcome: "unusual_volume", Country: "GB", Detail: "gb3"},
		{At: t0, Action: "otp.send", Outcome: "phone_rate_limited", Phone: "+19800919800", Country: "US", Detail: "us1"},
		{At: t0, Action: "ops.deny.add", Outcome: "ok", Actor: "alice", Detail: "ops1"},
	}

	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		writeEvents(t, s, written)
		tests := []struct {
			name   string
			filter ops.EventFilter
			want   []string
		}{
			{"outcome", ops.EventFilter{Outcome: "sent"}, []string{"gb1", "in3", "in1"}},
			{"another outcome", ops.EventFilter{Outcome: "phone_rate_limited"}, []string{"us1", "in2"}},
			{"unknown outcome", ops.EventFilter{Outcome: "cooldown"}, []string{}},
			{"country", ops.EventFilter{Country: "IN"}, []string{"in3", "in2", "in1"}},
			{"country, events without a number too", ops.EventFilter{Country: "GB"}, []string{"gb3", "gb2", "gb1"}},
			{"unknown country", ops.EventFilter{Country: "NG"}, []string{}},
			{"calling code as prefix", ops.EventFilter{PhonePrefix: "+91"}, []string{"in3", "in2", "in1"}},
			{"longer prefix", ops.EventFilter{PhonePrefix: "+9198"}, []string{"in2", "in1"}},
			{"whole number as prefix", ops.EventFilter{PhonePrefix: "+447700900001"}, []string{"gb2", "gb1"}},
			{"one digit", ops.EventFilter{PhonePrefix: "+1"}, []string{"us1"}},
			{"no number starts with it", ops.EventFilter{PhonePrefix: "+9800"}, []string{}},
			{"prefix longer than any number", ops.EventFilter{PhonePrefix: "+4477009000012"}, []string{}},
			{"outcome and country", ops.EventFilter{Outcome: "phone_rate_limited", Country: "IN"}, []string{"in2"}},
			{"outcome and prefix", ops.EventFilter{Outcome: "sent", PhonePrefix: "+91"}, []string{"in3", "in1"}},
			{"country and prefix disagree", ops.EventFilter{Country: "GB", PhonePrefix: "+91"}, []string{}},
			{"all three and the action", ops.EventFilter{Action: "otp.send", Outcome: "sent", Country: "IN", PhonePrefix: "+9188"}, []string{"in3"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got := listEvents(t, s, tt.filter)
				wantNewestFirst(t, got)
				if diff := cmp.Diff(tt.want, details(got)); diff != "" {
					t.Errorf("ListEvents(%+v) details (-want +got):\n%s", tt.filter, diff)
				}
			})
		}

		// A prefix that is not + and digits is refused, never dropped: a
		// dropped filter would list every event as if it matched.
		for _, p := range []string{"+91%", "+9_", "91", "+", "+91 98"} {
			if got, err := s.ListEvents(t.Context(), ops.EventFilter{PhonePrefix: p}); err == nil {
				t.Errorf("ListEvents(PhonePrefix %q) = %v, nil; want an error", p, details(got))
			}
		}
	})
}

func TestSQLListEventsPagination(t *testing.T) {
	const total = 1050 // more than ops.MaxEventLimit, and several insert chunks
	events := make([]guard.Event, total)
	for i := range events {
		events[i] = guard.Event{At: t0.Add(time.Duration(i) * time.Millisecond), Action: "otp.send", Outcome: "sent", Detail: fmt.Sprint(i)}
	}

	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		writeEvents(t, s, events[:600])
		writeEvents(t, s, events[600:])

		if got := len(listEvents(t, s, ops.EventFilter{})); got != ops.DefaultEventLimit {
			t.Errorf("ListEvents with Limit 0 returned %d events, want ops.DefaultEventLimit = %d", got, ops.DefaultEventLimit)
		}
		if got := len(listEvents(t, s, ops.EventFilter{Limit: 5000})); got != ops.MaxEventLimit {
			t.Errorf("ListEvents with Limit 5000 returned %d events, want ops.MaxEventLimit = %d", got, ops.MaxEventLimit)
		}

		var (
			pages []int
			seen  []string
			f     = ops.EventFilter{Limit: 400}
		)
		for {
			page := listEvents(t, s, f)
			if len(page) == 0 {
				break
			}
			if len(pages) > total {
				t.Fatal("pagination does not end")
			}
			pages = append(pages, len(page))
			seen = append(seen, details(page)...)
			f.BeforeID = page[len(page)-1].ID
		}
		if diff := cmp.Diff([]int{400, 400, 250}, pages); diff != "" {
			t.Errorf("page sizes (-want +got):\n%s", diff)
		}
		want := make([]string, total)
		for i := range want {
			want[i] = fmt.Sprint(total - 1 - i)
		}
		if diff := cmp.Diff(want, seen); diff != "" {
			t.Errorf("events across pages, newest first (-want +got):\n%s", diff)
		}
	})
}

func TestSQLWriteEvents(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		if err := s.WriteEvents(t.Context(), nil); err != nil {
			t.Fatalf("WriteEvents(nil): %v", err)
		}

		// A batch with one bad event is refused whole.
		bad := []guard.Event{{Action: "otp.send", Detail: "good"}, {Action: "", Detail: "no action"}}
		if err := s.WriteEvents(t.Context(), bad); err == nil {
			t.Fatal("WriteEvents with an event without Action: nil error, want an error")
		}
		if got := listEvents(t, s, ops.EventFilter{}); len(got) != 0 {
			t.Fatalf("after a refused batch ListEvents = %v, want no events", details(got))
		}

		before := time.Now()
		writeEvents(t, s, []guard.Event{{Action: "otp.send", Outcome: "sent"}})
		got := listEvents(t, s, ops.EventFilter{})
		if len(got) != 1 {
			t.Fatalf("ListEvents returned %d events, want 1", len(got))
		}
		if at := got[0].At; at.Before(before.Truncate(time.Millisecond)) || at.After(time.Now()) {
			t.Errorf("event written with zero At has At %v, want now (%v)", at, before)
		}
		if loc := got[0].At.Location(); loc != time.UTC {
			t.Errorf("At location %v, want UTC", loc)
		}
	})
}

// TestSQLWriteEventsOddText: a NUL or invalid UTF-8 in an event does not
// make PostgreSQL refuse the batch (and the audit queue retry it forever);
// both engines store the same replacement.
func TestSQLWriteEventsOddText(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		writeEvents(t, s, []guard.Event{
			{Action: "otp.send", Outcome: "sent", Detail: "before"},
			{Action: "otp.send", Outcome: "sent", IP: "fe80::1%\x00", Detail: "bad \xff byte"},
		})
		got := listEvents(t, s, ops.EventFilter{})
		if len(got) != 2 {
			t.Fatalf("ListEvents returned %d events, want 2", len(got))
		}
		if got[0].IP != "fe80::1%\uFFFD" || got[0].Detail != "bad \uFFFD byte" {
			t.Errorf("stored IP %q, detail %q; want the NUL and the bad byte replaced by U+FFFD", got[0].IP, got[0].Detail)
		}
	})
}

func TestSQLPruneEvents(t *testing.T) {
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		ctx := t.Context()
		cutoff := t0.Add(-time.Hour)

		// More old events than one delete chunk, to exercise the loop.
		old := make([]guard.Event, 12_345)
		for i := range old {
			old[i] = guard.Event{At: cutoff.Add(-time.Duration(i+1) * time.Millisecond), Action: "otp.send", Detail: "old"}
		}
		// In batches like the audit queue's: one write of 12,345 rows can
		// outlast the per-call SQL timeout on a busy machine.
		for chunk := range slices.Chunk(old, 500) {
			writeEvents(t, s, chunk)
		}
		writeEvents(t, s, []guard.Event{
			{At: cutoff, Action: "otp.send", Detail: "at cutoff"},
			{At: t0, Action: "otp.send", Detail: "new"},
		})

		n, err := s.PruneEvents(ctx, cutoff)
		if err != nil {
			t.Fatalf("PruneEvents: %v", err)
		}
		if n != int64(len(old)) {
			t.Errorf("PruneEvents deleted %d events, want %d", n, len(old))
		}
		if diff := cmp.Diff([]string{"new", "at cutoff"}, details(listEvents(t, s, ops.EventFilter{}))); diff != "" {
			t.Errorf("events left after PruneEvents (-want +got):\n%s", diff)
		}

		n, err = s.PruneEvents(ctx, cutoff)
		if err != nil || n != 0 {
			t.Errorf("second PruneEvents = %d, %v; want 0, nil", n, err)
		}
	})
}

// Audit writes arrive from many requests at once. None may be lost or fail
// (SQLite has one writer; PostgreSQL many), and each writer's events keep
// their order.
func TestSQLWriteEventsConcurrently(t *testing.T) {
	const (
		writers  = 8
		batches  = 25
		perBatch = 4
	)
	forEachEngine(t, func(t *testing.T, s *sqlstore.SQL) {
		var wg sync.WaitGroup
		errs := make(chan error, writers*batches)
		for w := range writers {
			wg.Go(func() {
				for b := range batches {
					batch := make([]guard.Event, perBatch)
					for i := range batch {
						batch[i] = guard.Event{
							At:     t0,
							Action: "otp.send",
							Actor:  fmt.Sprintf("w%d", w),
							Detail: fmt.Sprintf("%04d", b*perBatch+i),
						}
					}
					if err := s.WriteEvents(t.Context(), batch); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent WriteEvents: %v", err)
		}

		all := listEvents(t, s, ops.EventFilter{Limit: ops.MaxEventLimit})
		if len(all) != writers*batches*perBatch {
			t.Fatalf("ListEvents returned %d events, want %d", len(all), writers*batches*perBatch)
		}
		wantNewestFirst(t, all)
		// Newest first, so each writer's details must come out descending.
		last := map[string]string{}
		count := map[string]int{}
		for _, e := range all {
			if prev, ok := last[e.Actor]; ok && e.Detail >= prev {
				t.Fatalf("writer %s: event %s listed after %s, want its events newest first", e.Actor, e.Detail, prev)
			}
			last[e.Actor] = e.Detail
			count[e.Actor]++
		}
		for w := range writers {
			if got := count[fmt.Sprintf("w%d", w)]; got != batches*perBatch {
				t.Errorf("writer w%d: %d events stored, want %d", w, got, batches*perBatch)
			}
		}
	})
}
