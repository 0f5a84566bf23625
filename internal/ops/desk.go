package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// maxDenyReason bounds a deny-list reason: a note, not a document.
const maxDenyReason = 500

// MaxDenyFor bounds how far ahead a deny-list entry may expire: ten years,
// far beyond any need and far below an overflow of the time left (year
// 9999 showed as 292 years on the page).
const MaxDenyFor = 10 * 365 * 24 * time.Hour

// opsWriteTimeout bounds the direct write of an ops action's audit event
// before it falls back to the queue.
const opsWriteTimeout = 2 * time.Second

// dbRetryAfter is the Retry-After of a 503 when the ops database fails.
const dbRetryAfter = 5 * time.Second

// ActivityCount is how many events of one action and outcome fell in one
// minute.
type ActivityCount struct {
	Minute  time.Time
	Action  string
	Outcome string
	N       int64
}

// Activity counts audit events per minute, for the ops page's chart.
type Activity interface {
	// CountActivity counts the otp.send and otp.verify events in
	// [since, until) per minute, action and outcome.
	CountActivity(ctx context.Context, since, until time.Time) ([]ActivityCount, error)
}

// MinuteActivity is one minute of the ops chart.
type MinuteActivity struct {
	Minute time.Time
	Sends  int64 // codes sent
	Blocks int64 // sends refused by a limit, the velocity rule or the deny-list (or challenged instead), and verify lock-outs
}

// DeskOptions are the dependencies of the ops desk.
type DeskOptions struct {
	Blocks   BlockIndex
	DenyList DenyList
	// Deny is reloaded after every change made here, so that this instance
	// enforces it at once (the others within their refresh interval). The
	// blocked list reads deny entries from it, so it works while the
	// database is down.
	Deny     *DenyCache
	Audit    AuditLog
	Activity Activity
	// ServiceActivity counts each service's day (services.go).
	ServiceActivity ServiceActivity
	// Events takes an ops action's audit event when writing it directly
	// fails, so that the action is recorded once the database returns.
	Events guard.EventSink
	// OnWrite, when set, is told of every audit event written directly
	// (AuditQueueOptions.OnWrite counts those written through Events).
	OnWrite func(n int)
	// DatabaseTimeout bounds the database work of one ops request as a
	// whole (OTPGUARD_DATABASE_TIMEOUT; see Request); 0: each SQL call
	// has only its own timeout.
	DatabaseTimeout time.Duration
	// DefaultRegion is the OTP policy's: numbers are read as /otp/send reads them.
	DefaultRegion string
	// Overrides keeps the emergency overrides and OverrideCache enforces
	// them here (overrides.go); Policy is the OTP policy they tighten.
	Overrides     OverrideList
	OverrideCache *OverrideCache
	Policy        func() guard.OTPPolicy
	Logger        *slog.Logger
	Now           func() time.Time // time.Now when nil
}

// Desk is the ops desk: who is blocked and why, unblock, the deny-list and
// the audit trail. Every change it makes is audited with the actor.
type Desk struct {
	o DeskOptions
}

// NewDesk returns the ops desk.
func NewDesk(o DeskOptions) *Desk {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Events == nil {
		o.Events = discardEvents{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnWrite == nil {
		o.OnWrite = func(int) {}
	}
	return &Desk{o: o}
}

// Now is the desk's clock.
func (d *Desk) Now() time.Time { return d.o.Now() }

// Request returns the context for the work of one ops request: every
// database call made with it, the ones made after a change included (the
// reload, the audit event), ends by one deadline, DatabaseTimeout from
// now (WithDatabaseDeadline). The HTTP side calls it as a request arrives.
func (d *Desk) Request(ctx context.Context) context.Context {
	if d.o.DatabaseTimeout <= 0 {
		return ctx
	}
	// The real clock: the deadline is kept by the database driver's.
	return WithDatabaseDeadline(ctx, time.Now().Add(d.o.DatabaseTimeout))
}

// Blocked returns one page of the numbers refused now, most recent first:
// the blocks of the index and the deny-list entries.
func (d *Desk) Blocked(ctx context.Context, f BlockFilter) (BlockPage, error) {
	f, err := f.normalize()
	if err != nil {
		return BlockPage{}, err
	}
	var match func(string) bool
	if f.Phone != "" || f.Country != "" {
		match = f.matchNumber
	}
	blocks, total, err := d.o.Blocks.ListBlocks(ctx, match, f.Offset+f.Limit)
	if err != nil {
		return BlockPage{}, limit.StoreUnavailable(err, dbRetryAfter)
	}
	now := d.o.Now()
	var denies []guard.DenyEntry
	for _, e := range d.o.Deny.Entries() {
		if !f.SkipDeny && !e.Expired(now) && f.matchDeny(e) {
			denies = append(denies, e)
		}
	}
	return BlockPage{Blocks: mergeBlocked(blocks, denies, f.Offset, f.Limit), Total: total + len(denies)}, nil
}

// UnblockResult says what an unblock did.
type UnblockResult struct {
	Phone guard.Phone
	// DeniedBy is the deny-list entry that still refuses the number, if
	// any: unblocking lifts limits, not the deny-list.
	DeniedBy *guard.DenyEntry
}

// Unblock clears the number's send counters, cooldown and code (and with
// it a verify lock-out), so that it may receive a code at once: the
// default service's, and each named service's of services (the Verify
// services in force, whose codes and counters are the number's too).
func (d *Desk) Unblock(ctx context.Context, raw, actor string, services ...string) (UnblockResult, error) {
	phone, err := guard.ParsePhone(raw, d.o.DefaultRegion)
	if err != nil {
		return UnblockResult{}, err
	}
	if err := d.o.Blocks.Unblock(ctx, phone.E164, guard.PhoneCounterKeys(phone.E164, services...), services...); err != nil {
		d.o.Logger.ErrorContext(ctx, "unblock failed", "phone", guard.MaskPhone(phone.E164), "err", err)
		return UnblockResult{}, limit.StoreUnavailable(err, limit.StoreRetryAfter)
	}
	d.audit(ctx, guard.Event{Action: ActionUnblock, Outcome: OutcomeUnblocked, Phone: phone.E164, Country: phone.Region, Actor: actor})
	res := UnblockResult{Phone: phone}
	if e, ok := d.o.Deny.Denied(phone.E164, d.o.Now()); ok {
		res.DeniedBy = &e
	}
	return res, nil
}

// PlainText reports whether s is valid UTF-8 without control characters:
// what a note typed by a person may hold, and what both SQL engines store
// alike (PostgreSQL refuses a NUL that SQLite would keep). Bidirectional
// controls count as control characters: they make a reason read
// differently on the page than it was written (a "Trojan Source" note).
func PlainText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return false
		}
	}
	return true
}

// DenyEntries returns the live deny-list from the database.
func (d *Desk) DenyEntries(ctx context.Context) ([]guard.DenyEntry, error) {
	entries, err := d.o.DenyList.ListDeny(ctx)
	if err != nil {
		return nil, dbUnavailable(err)
	}
	return entries, nil
}

// AddDeny adds a number or prefix to the deny-list, authored by actor.
func (d *Desk) AddDeny(ctx context.Context, e guard.DenyEntry, actor string) (guard.DenyEntry, error) {
	if err := guard.ValidateDenyPattern(e.Pattern); err != nil {
		return guard.DenyEntry{}, err
	}
	if utf8.RuneCountInString(e.Reason) > maxDenyReason || !PlainText(e.Reason) {
		return guard.DenyEntry{}, problem.Errorf(problem.CodeInvalidRequest, "reason must be text of at most %d characters, without control characters", maxDenyReason)
	}
	now := d.o.Now()
	if e.ExpiresAt != nil && !e.ExpiresAt.After(now) {
		return guard.DenyEntry{}, problem.Errorf(problem.CodeInvalidRequest, "expires_at must be in the future")
	}
	if e.ExpiresAt != nil && e.ExpiresAt.After(now.Add(MaxDenyFor)) {
		return guard.DenyEntry{}, problem.Errorf(problem.CodeInvalidRequest, "expires_at must be at most 10 years ahead (%s)", now.Add(MaxDenyFor).UTC().Format(time.RFC3339))
	}
	e.ID, e.Author, e.CreatedAt = 0, actor, now
	added, err := d.o.DenyList.AddDeny(ctx, e)
	if err != nil {
		return guard.DenyEntry{}, dbError(err)
	}
	d.reload(ctx)
	detail := fmt.Sprintf("id=%d pattern=%s", added.ID, added.Pattern)
	if added.ExpiresAt != nil {
		detail += " expires=" + added.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if added.Reason != "" {
		detail += " reason=" + added.Reason
	}
	d.audit(ctx, guard.Event{Action: ActionDenyAdd, Outcome: OutcomeAdded, Phone: wholeNumber(added.Pattern), Actor: actor, Detail: detail})
	return added, nil
}

// RemoveDeny removes the deny-list entry id; NotFound when there is none.
func (d *Desk) RemoveDeny(ctx context.Context, id int64, actor string) error {
	if err := d.o.DenyList.RemoveDeny(ctx, id); err != nil {
		return dbError(err)
	}
	d.reload(ctx)
	d.audit(ctx, guard.Event{Action: ActionDenyRemove, Outcome: OutcomeRemoved, Actor: actor, Detail: fmt.Sprintf("id=%d", id)})
	return nil
}

// Events returns one page of the audit trail, newest first.
func (d *Desk) Events(ctx context.Context, f EventFilter) ([]guard.Event, error) {
	if f.Limit < 0 || f.Limit > MaxEventLimit {
		return nil, problem.Errorf(problem.CodeInvalidRequest, "limit must be between 1 and %d", MaxEventLimit)
	}
	if f.PhonePrefix != "" {
		if err := guard.ValidateDenyPattern(f.PhonePrefix); err != nil {
			return nil, err // a refusal of the filter, not the database failing
		}
	}
	events, err := d.o.Audit.ListEvents(ctx, f)
	if err != nil {
		return nil, dbUnavailable(err)
	}
	return events, nil
}

// Activity returns sends and blocks per minute over the last `minutes`
// minutes, oldest first, the current minute last.
func (d *Desk) Activity(ctx context.Context, minutes int) ([]MinuteActivity, error) {
	now := d.o.Now()
	first := now.Truncate(time.Minute).Add(-time.Duration(minutes-1) * time.Minute)
	counts, err := d.o.Activity.CountActivity(ctx, first, now.Add(time.Millisecond))
	if err != nil {
		return nil, dbUnavailable(err)
	}
	out := make([]MinuteActivity, minutes)
	for i := range out {
		out[i].Minute = first.Add(time.Duration(i) * time.Minute)
	}
	for _, c := range counts {
		i := int(c.Minute.Sub(first) / time.Minute)
		if i < 0 || i >= minutes {
			continue
		}
		switch {
		case c.Action == guard.ActionOTPSend && c.Outcome == guard.OutcomeSent:
			out[i].Sends += c.N
		case isBlockOutcome(c.Action, problem.Code(c.Outcome)):
			out[i].Blocks += c.N
		}
	}
	return out, nil
}

func isBlockOutcome(action string, outcome problem.Code) bool {
	switch action {
	case guard.ActionOTPSend:
		switch outcome {
		case problem.CodeCooldown, problem.CodePhoneRateLimited, problem.CodeIPRateLimited, problem.CodeDenied,
			problem.CodeCountryNotAllowed, problem.CodeNumberTypeNotAllowed, problem.CodePrefixRateLimited,
			problem.CodeCountryRateLimited, problem.CodeBudgetExhausted, problem.CodeCountryPaused,
			problem.CodeUnusualVolume, problem.CodeChallengeRequired, problem.CodeCarrierPaused, problem.CodeCarrierRateLimited, problem.CodeHighRiskNumber:
			return true
		}
	case guard.ActionOTPVerify:
		return outcome == problem.CodeTooManyAttempts
	}
	return false
}

// RecordLogin audits an ops sign-in: outcome OutcomeOK with the actor, or
// OutcomeFailed with the address it came from; with the request and trace
// IDs of ctx (guard.WithRequestID), so the sign-in is found by them.
func (d *Desk) RecordLogin(ctx context.Context, actor, ip string, ok bool) {
	e := guard.Event{At: d.o.Now(), Action: ActionLogin, Outcome: OutcomeFailed, IP: ip,
		RequestID: guard.RequestID(ctx), TraceID: guard.TraceID(ctx)}
	if ok {
		e.Outcome, e.Actor = OutcomeOK, actor
	}
	d.o.Events.Record(e)
}

// RecordKeyLockout audits, once per address and window, that ip has sent
// the limit's wrong API keys and is refused until the window ends: a
// summary, not one row per wrong key. ctx gives the request and trace IDs
// of the request that spent the last one.
func (d *Desk) RecordKeyLockout(ctx context.Context, ip string, l SignInLimit) {
	d.o.Events.Record(guard.Event{At: d.o.Now(), Action: ActionAPIKeys, Outcome: OutcomeLockedOut, IP: ip,
		Detail:    fmt.Sprintf("%d wrong API keys within %s; refused until the window ends", l.Failures, l.Window),
		RequestID: guard.RequestID(ctx), TraceID: guard.TraceID(ctx)})
}

// audit writes an ops action's event at once, so it shows on the page the
// action returns to; when the database fails it is queued instead. The UID
// is given first: a direct write that timed out after its commit, then
// written again by the queue, is stored once.
func (d *Desk) audit(ctx context.Context, e guard.Event) {
	e.At = d.o.Now()
	e.TraceID = guard.TraceID(ctx)
	e.RequestID = guard.RequestID(ctx)
	e.UID = guard.NewEventUID()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opsWriteTimeout)
	defer cancel()
	if err := d.o.Audit.WriteEvents(wctx, []guard.Event{e}); err != nil {
		d.o.Logger.WarnContext(ctx, "writing an ops audit event failed; queued instead", "action", e.Action, "err", err)
		d.o.Events.Record(e)
		return
	}
	d.o.OnWrite(1)
}

// reload makes this instance enforce a deny-list change at once.
func (d *Desk) reload(ctx context.Context) {
	if err := d.o.Deny.Reload(context.WithoutCancel(ctx)); err != nil {
		d.o.Logger.WarnContext(ctx, "deny-list reload after a change failed; the change applies at the next refresh", "err", err)
	}
}

// wholeNumber returns pattern when it is a whole valid number, else "".
func wholeNumber(pattern string) string {
	if p, err := guard.ParsePhone(pattern, ""); err == nil && p.E164 == pattern {
		return pattern
	}
	return ""
}

// dbError passes a domain error through, turns guard.ErrNotFound into not_found
// and anything else into a 503.
func dbError(err error) error {
	var e *problem.Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, guard.ErrNotFound):
		return &problem.Error{Code: problem.CodeNotFound, Message: "no such entry", Err: err}
	}
	return dbUnavailable(err)
}

func dbUnavailable(err error) *problem.Error {
	return &problem.Error{Code: problem.CodeDatabaseUnavailable, Message: "the ops database is unreachable; try again shortly",
		RetryAfter: dbRetryAfter, Err: err}
}

// discardEvents is the guard.EventSink of a desk given none.
type discardEvents struct{}

func (discardEvents) Record(guard.Event) {}
