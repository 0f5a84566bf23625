package ops

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// ActionLookup audits a look-up of one number on the desk ("why did +X get
// no code?"): who looked, when, the number masked in the detail and its
// country, as the risk score's clearing is, so that the trail of
// look-ups names no number in clear.
const ActionLookup = "ops.lookup"

// lookupEvents is how many of the number's last events a look-up shows.
const lookupEvents = 10

// NumberInspector reads what the OTP rules hold of one number without
// spending (guard.OTP.Inspect).
type NumberInspector interface {
	Inspect(ctx context.Context, phone guard.Phone, services ...string) guard.NumberState
}

// NumberAnswer is what the desk knows of one number: the answer to "why
// did +X get no code?". A part that could not be read is named in Errors.
type NumberAnswer struct {
	Phone guard.Phone
	At    time.Time
	// DeniedBy is the deny-list entry that refuses it, nil when none.
	DeniedBy *guard.DenyEntry
	// Blocks are its entries in the block index (cooldown,
	// phone_rate_limited, too_many_attempts, ...), most recent first.
	Blocks []BlockedNumber
	// State is its windows, live code, trust mark and risk score
	// (NumberInspector);
	// zero when there is no OTP service to ask.
	State guard.NumberState
	// Events are its last sends, verifies and ops actions, newest first.
	Events []guard.Event
	Errors []string
}

// Reason is one thing that refuses the number's next send now, and when
// it clears (zero: not by itself).
type Reason struct {
	Code   problem.Code
	Text   string
	Clears time.Duration
}

// LookUp answers what the desk knows of the number raw (any spelling
// /otp/send takes, read in the OTP policy's default region): the deny-list,
// the block index, its windows, live code, trust mark and risk score (in; nil: not
// asked), and its last events. The live codes read are the default
// service's and each of services' (the Verify services in force). The
// look-up is audited with actor and the number masked. Errors of the parts are in the answer; only a number that
// does not parse is an error.
func (d *Desk) LookUp(ctx context.Context, raw, actor string, in NumberInspector, services ...string) (NumberAnswer, error) {
	phone, err := guard.ParsePhone(raw, d.o.DefaultRegion)
	if err != nil {
		return NumberAnswer{}, err
	}
	now := d.o.Now()
	a := NumberAnswer{Phone: phone, At: now}
	d.audit(ctx, guard.Event{Action: ActionLookup, Outcome: OutcomeOK, Country: phone.Region, Actor: actor,
		Detail: "number " + guard.MaskPhone(phone.E164)})
	if e, ok := d.o.Deny.Denied(phone.E164, now); ok {
		a.DeniedBy = &e
	}
	blocks, _, err := d.o.Blocks.ListBlocks(ctx, func(p string) bool { return p == phone.E164 }, 10)
	if err != nil {
		a.Errors = append(a.Errors, "blocks: "+problemText(problem.CodeStoreUnavailable))
	}
	for _, b := range blocks {
		if b.Until.IsZero() || b.Until.After(now) {
			a.Blocks = append(a.Blocks, b)
		}
	}
	if in != nil {
		a.State = in.Inspect(ctx, phone, services...)
		if len(a.State.Errors) > 0 {
			a.Errors = append(a.Errors, "limits, code, trust mark or risk score: "+problemText(problem.CodeStoreUnavailable))
		}
	}
	a.Events, err = d.Events(ctx, EventFilter{Phone: phone.E164, Limit: lookupEvents})
	if err != nil {
		a.Errors = append(a.Errors, "events: "+problemText(problem.CodeOf(err)))
	}
	return a, nil
}

// Refusing lists what refuses the number's next send now, worst first:
// the deny-list, its blocks, its send window and cooldown, and a high risk
// score the network gave it. Empty: nothing of its own refuses it (a
// budget, a pause or an alert on its country may; the desk's status says).
func (a NumberAnswer) Refusing() []Reason {
	var out []Reason
	if e := a.DeniedBy; e != nil {
		r := Reason{Code: problem.CodeDenied, Text: "deny-listed by " + e.Pattern}
		if e.ExpiresAt != nil {
			r.Clears = e.ExpiresAt.Sub(a.At)
		}
		out = append(out, r)
	}
	seen := map[problem.Code]bool{}
	for _, b := range a.Blocks {
		if seen[b.Reason] {
			continue
		}
		seen[b.Reason] = true
		out = append(out, Reason{Code: b.Reason, Text: "blocked: " + string(b.Reason), Clears: b.Until.Sub(a.At)})
	}
	if w := a.State.Sends; w.Refusing() && !seen[problem.CodePhoneRateLimited] {
		out = append(out, Reason{Code: problem.CodePhoneRateLimited, Text: "its send limit is spent", Clears: w.ResetAfter})
	}
	if w := a.State.Cooldown; w.Refusing() && !seen[problem.CodeCooldown] {
		out = append(out, Reason{Code: problem.CodeCooldown, Text: "its cooldown runs", Clears: w.ResetAfter})
	}
	if r := a.State.Risk; r != nil && r.Blocked {
		out = append(out, Reason{Code: problem.CodeHighRiskNumber, Text: "the network blocks it (risk score)"})
	}
	return out
}

// LastSend is the number's last send decision in Events, and whether
// there is one.
func (a NumberAnswer) LastSend() (guard.Event, bool) {
	for _, e := range a.Events {
		if e.Action == guard.ActionOTPSend {
			return e, true
		}
	}
	return guard.Event{}, false
}

// problemText is a code as a short phrase for a part that failed.
func problemText(c problem.Code) string {
	switch c {
	case problem.CodeDatabaseUnavailable:
		return "the ops database is unreachable"
	case problem.CodeStoreUnavailable:
		return "the store is unreachable"
	}
	return "could not be read"
}
