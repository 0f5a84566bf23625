package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"
)

// The audit actions of the ops desk (Event.Action). They are stored in the
// audit trail and filtered on: never rename one.
const (
	ActionUnblock    = "ops.unblock"
	ActionDenyAdd    = "ops.deny.add"
	ActionDenyRemove = "ops.deny.remove"
	ActionLogin      = "ops.login"
)

// The outcomes of the ops desk's actions (Event.Outcome).
const (
	OutcomeUnblocked = "unblocked" // ops.unblock
	OutcomeAdded     = "added"     // ops.deny.add
	OutcomeRemoved   = "removed"   // ops.deny.remove
	OutcomeOK        = "ok"        // ops.login: signed in
	OutcomeFailed    = "failed"    // ops.login: a wrong key or password
)

// maxDenyReason bounds a deny-list reason: a note, not a document.
const maxDenyReason = 500

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
	Blocks int64 // sends refused by a limit or the deny-list, and verify lock-outs
}

// OpsOptions are the dependencies of the ops desk.
type OpsOptions struct {
	Blocks   BlockIndex
	DenyList DenyList
	// Deny is reloaded after every change made here, so that this instance
	// enforces it at once (the others within their refresh interval). The
	// blocked list reads deny entries from it, so it works while the
	// database is down.
	Deny     *DenyCache
	Audit    AuditLog
	Activity Activity
	// Events takes an ops action's audit event when writing it directly
	// fails, so that the action is recorded once the database returns.
	Events EventSink
	// Counter counts failed sign-ins per address (signin.go), in the shared
	// store like every other limit; nil: sign-ins are not limited.
	Counter Counter
	// SignIn is the failed sign-in limit; zero: DefaultSignInLimit.
	SignIn SignInLimit
	// DefaultRegion is the OTP policy's: numbers are read as /otp/send reads them.
	DefaultRegion string
	Logger        *slog.Logger
	Now           func() time.Time // time.Now when nil
}

// Ops is the ops desk: who is blocked and why, unblock, the deny-list and
// the audit trail. Every change it makes is audited with the actor.
type Ops struct {
	o OpsOptions
}

// NewOps returns the ops desk.
func NewOps(o OpsOptions) *Ops {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Events == nil {
		o.Events = noEvents{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SignIn == (SignInLimit{}) {
		o.SignIn = DefaultSignInLimit
	}
	return &Ops{o: o}
}

// Now is the desk's clock.
func (o *Ops) Now() time.Time { return o.o.Now() }

// Blocked returns one page of the numbers refused now, most recent first:
// the blocks of the index and the deny-list entries.
func (o *Ops) Blocked(ctx context.Context, f BlockFilter) (BlockPage, error) {
	f, err := f.normalize()
	if err != nil {
		return BlockPage{}, err
	}
	var match func(string) bool
	if f.Phone != "" || f.Country != "" {
		match = f.matchNumber
	}
	blocks, total, err := o.o.Blocks.ListBlocks(ctx, match, f.Offset+f.Limit)
	if err != nil {
		return BlockPage{}, StoreUnavailable(err, dbRetryAfter)
	}
	now := o.o.Now()
	var denies []DenyEntry
	for _, e := range o.o.Deny.Entries() {
		if !e.Expired(now) && f.matchDeny(e) {
			denies = append(denies, e)
		}
	}
	return BlockPage{Blocks: mergeBlocked(blocks, denies, f.Offset, f.Limit), Total: total + len(denies)}, nil
}

// UnblockResult says what an unblock did.
type UnblockResult struct {
	Phone Phone
	// DeniedBy is the deny-list entry that still refuses the number, if
	// any: unblocking lifts limits, not the deny-list.
	DeniedBy *DenyEntry
}

// Unblock clears the number's send counters, cooldown and code (and with
// it a verify lock-out), so that it may receive a code at once.
func (o *Ops) Unblock(ctx context.Context, raw, actor string) (UnblockResult, error) {
	phone, err := ParsePhone(raw, o.o.DefaultRegion)
	if err != nil {
		return UnblockResult{}, err
	}
	if err := o.o.Blocks.Unblock(ctx, phone.E164, PhoneCounterKeys(phone.E164)); err != nil {
		o.o.Logger.ErrorContext(ctx, "unblock failed", "phone", MaskPhone(phone.E164), "err", err)
		return UnblockResult{}, StoreUnavailable(err, StoreRetryAfter)
	}
	o.audit(ctx, Event{Action: ActionUnblock, Outcome: OutcomeUnblocked, Phone: phone.E164, Country: phone.Region, Actor: actor})
	res := UnblockResult{Phone: phone}
	if e, ok := o.o.Deny.Denied(phone.E164, o.o.Now()); ok {
		res.DeniedBy = &e
	}
	return res, nil
}

// PlainText reports whether s is valid UTF-8 without control characters:
// what a note typed by a person may hold, and what both SQL engines store
// alike (PostgreSQL refuses a NUL that SQLite would keep).
func PlainText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// DenyEntries returns the live deny-list from the database.
func (o *Ops) DenyEntries(ctx context.Context) ([]DenyEntry, error) {
	entries, err := o.o.DenyList.ListDeny(ctx)
	if err != nil {
		return nil, dbUnavailable(err)
	}
	return entries, nil
}

// AddDeny adds a number or prefix to the deny-list, authored by actor.
func (o *Ops) AddDeny(ctx context.Context, e DenyEntry, actor string) (DenyEntry, error) {
	if err := ValidateDenyPattern(e.Pattern); err != nil {
		return DenyEntry{}, err
	}
	if utf8.RuneCountInString(e.Reason) > maxDenyReason || !PlainText(e.Reason) {
		return DenyEntry{}, Errorf(CodeInvalidRequest, "reason must be text of at most %d characters, without control characters", maxDenyReason)
	}
	now := o.o.Now()
	if e.ExpiresAt != nil && !e.ExpiresAt.After(now) {
		return DenyEntry{}, Errorf(CodeInvalidRequest, "expires_at must be in the future")
	}
	e.ID, e.Author, e.CreatedAt = 0, actor, now
	added, err := o.o.DenyList.AddDeny(ctx, e)
	if err != nil {
		return DenyEntry{}, dbError(err)
	}
	o.reload(ctx)
	detail := fmt.Sprintf("id=%d pattern=%s", added.ID, added.Pattern)
	if added.ExpiresAt != nil {
		detail += " expires=" + added.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if added.Reason != "" {
		detail += " reason=" + added.Reason
	}
	o.audit(ctx, Event{Action: ActionDenyAdd, Outcome: OutcomeAdded, Phone: wholeNumber(added.Pattern), Actor: actor, Detail: detail})
	return added, nil
}

// RemoveDeny removes the deny-list entry id; NotFound when there is none.
func (o *Ops) RemoveDeny(ctx context.Context, id int64, actor string) error {
	if err := o.o.DenyList.RemoveDeny(ctx, id); err != nil {
		return dbError(err)
	}
	o.reload(ctx)
	o.audit(ctx, Event{Action: ActionDenyRemove, Outcome: OutcomeRemoved, Actor: actor, Detail: fmt.Sprintf("id=%d", id)})
	return nil
}

// Events returns one page of the audit trail, newest first.
func (o *Ops) Events(ctx context.Context, f EventFilter) ([]Event, error) {
	if f.Limit < 0 || f.Limit > MaxEventLimit {
		return nil, Errorf(CodeInvalidRequest, "limit must be between 1 and %d", MaxEventLimit)
	}
	events, err := o.o.Audit.ListEvents(ctx, f)
	if err != nil {
		return nil, dbUnavailable(err)
	}
	return events, nil
}

// Activity returns sends and blocks per minute over the last `minutes`
// minutes, oldest first, the current minute last.
func (o *Ops) Activity(ctx context.Context, minutes int) ([]MinuteActivity, error) {
	now := o.o.Now()
	first := now.Truncate(time.Minute).Add(-time.Duration(minutes-1) * time.Minute)
	counts, err := o.o.Activity.CountActivity(ctx, first, now.Add(time.Millisecond))
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
		case c.Action == ActionOTPSend && c.Outcome == OutcomeSent:
			out[i].Sends += c.N
		case isBlockOutcome(c.Action, Code(c.Outcome)):
			out[i].Blocks += c.N
		}
	}
	return out, nil
}

func isBlockOutcome(action string, outcome Code) bool {
	switch action {
	case ActionOTPSend:
		switch outcome {
		case CodeCooldown, CodePhoneRateLimited, CodeIPRateLimited, CodeDenied,
			CodeCountryNotAllowed, CodeNumberTypeNotAllowed, CodePrefixRateLimited,
			CodeCountryRateLimited, CodeBudgetExhausted:
			return true
		}
	case ActionOTPVerify:
		return outcome == CodeTooManyAttempts
	}
	return false
}

// RecordLogin audits an ops sign-in: outcome OutcomeOK with the actor, or
// OutcomeFailed with the address it came from.
func (o *Ops) RecordLogin(actor, ip string, ok bool) {
	e := Event{At: o.o.Now(), Action: ActionLogin, Outcome: OutcomeFailed, IP: ip}
	if ok {
		e.Outcome, e.Actor = OutcomeOK, actor
	}
	o.o.Events.Record(e)
}

// audit writes an ops action's event at once, so it shows on the page the
// action returns to; when the database fails it is queued instead.
func (o *Ops) audit(ctx context.Context, e Event) {
	e.At = o.o.Now()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opsWriteTimeout)
	defer cancel()
	if err := o.o.Audit.WriteEvents(wctx, []Event{e}); err != nil {
		o.o.Logger.WarnContext(ctx, "writing an ops audit event failed; queued instead", "action", e.Action, "err", err)
		o.o.Events.Record(e)
	}
}

// reload makes this instance enforce a deny-list change at once.
func (o *Ops) reload(ctx context.Context) {
	if err := o.o.Deny.Reload(context.WithoutCancel(ctx)); err != nil {
		o.o.Logger.WarnContext(ctx, "deny-list reload after a change failed; the change applies at the next refresh", "err", err)
	}
}

// wholeNumber returns pattern when it is a whole valid number, else "".
func wholeNumber(pattern string) string {
	if p, err := ParsePhone(pattern, ""); err == nil && p.E164 == pattern {
		return pattern
	}
	return ""
}

// dbError passes a domain error through, turns ErrNotFound into not_found
// and anything else into a 503.
func dbError(err error) error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return err
	case errors.Is(err, ErrNotFound):
		return &Error{Code: CodeNotFound, Message: "no such entry", Err: err}
	}
	return dbUnavailable(err)
}

func dbUnavailable(err error) *Error {
	return &Error{Code: CodeStoreUnavailable, Message: "the ops database is unavailable; try again shortly",
		RetryAfter: dbRetryAfter, Err: err}
}
