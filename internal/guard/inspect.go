package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// NumberState is what the OTP rules hold of one number now, read without
// spending anything: the ops desk's answer to "why did +X get no code?"
// (ops.Desk.LookUp). A part the store could not read is left unknown and
// its error named in Errors; the rest still answer.
type NumberState struct {
	// Sends is the number's own send window (otp.per_phone) and Cooldown
	// its cooldown (otp.cooldown; Limit 0: no cooldown): Count used,
	// ResetAfter until it is full again. Known false: not read.
	Sends, Cooldown WindowState
	// Trusted: the number's trust mark is set and counts now (a verify
	// within otp.trust.verified_within, or an import). TrustKnown: marks
	// are kept and the read answered.
	Trusted, TrustKnown bool
	// Risk is the network's cached risk answer (otp.risk), nil when none
	// is cached or risk scores are off.
	Risk *RiskAnswer
	// Code is the number's live code, nil when it has none; CodeKnown:
	// it was read (a CodeReader answered). It is the default service's;
	// ServiceCodes are the named services' asked for, in their order.
	Code         *CodeState
	CodeKnown    bool
	ServiceCodes []ServiceCode
	// Errors name the parts that could not be read ("limits: ...").
	Errors []string
}

// CodeState is a number's live code as read without counting a guess:
// the wrong guesses used of its maximum (otp.max_verify_attempts), whether
// its verification is locked (max_attempts_reached: a wrong guess used the
// last attempt; the code stays until it expires, refusing every guess),
// and how long the code still lives.
type CodeState struct {
	Guesses, MaxAttempts int64
	Locked               bool
	ExpiresIn            time.Duration
}

// ServiceCode is a named service's live code of the number (each service
// keeps its own, service.go): nil when it has none; Known: it was read.
type ServiceCode struct {
	Service string
	Code    *CodeState
	Known   bool
}

// CodeReader reads a number's live code of service ("" the default
// service) without counting a guess or changing anything
// (store.Codes.ReadCode): ErrNotFound when it has none.
type CodeReader interface {
	ReadCode(ctx context.Context, phone, service string) (CodeState, error)
}

// WindowState is one of a number's windows as read.
type WindowState struct {
	Known      bool
	Count      int64
	Limit      int64
	Window     time.Duration
	ResetAfter time.Duration
}

// Refusing reports whether the window refuses the next send now.
func (w WindowState) Refusing() bool { return w.Known && w.Limit > 0 && w.Count >= w.Limit }

// Inspect reads what the OTP rules hold of phone: its send window and
// cooldown (peeked, as a locked code's wait is: cost 0, one round trip),
// its live code's guesses (CodeReader: no guess counted), the default
// service's and each of services', its trust mark and its cached risk
// score. It changes nothing and records nothing; the desk audits the
// look-up.
func (s *OTP) Inspect(ctx context.Context, phone Phone, services ...string) NumberState {
	var st NumberState
	p := s.policy
	takes := []limit.Take{{Key: phoneSendsKey(phone), Algorithm: limit.FixedWindow, Limit: p.PerPhone.Limit, Window: p.PerPhone.Window}}
	if p.Cooldown > 0 {
		takes = append(takes, limit.Take{Key: cooldownKey(phone), Algorithm: limit.FixedWindow, Limit: 1, Window: p.Cooldown})
	}
	res, err := s.codes.counter.Take(ctx, takes)
	if err == nil && len(res) != len(takes) {
		err = fmt.Errorf("otp: store answered %d results for %d takes", len(res), len(takes))
	}
	if err != nil {
		st.Errors = append(st.Errors, "limits: "+err.Error())
	} else {
		st.Sends = windowState(res[0], takes[0])
		if len(res) > 1 {
			st.Cooldown = windowState(res[1], takes[1])
		}
	}
	if r := s.codes.states; r != nil {
		st.Code, st.CodeKnown = readCode(ctx, r, phone, DefaultService, &st.Errors)
		for _, svc := range services {
			c, known := readCode(ctx, r, phone, svc, &st.Errors)
			st.ServiceCodes = append(st.ServiceCodes, ServiceCode{Service: svc, Code: c, Known: known})
		}
	}
	if s.trust.on() {
		ok, err := s.trust.trusts.Trusted(ctx, trustMarkKey(s.trust.hmacKey, phone), s.trust.now())
		if err != nil {
			st.Errors = append(st.Errors, "trust mark: "+err.Error())
		} else {
			st.Trusted, st.TrustKnown = ok, true
		}
	}
	if s.risk.risks != nil {
		c, err := s.risk.risks.CachedRisk(ctx, riskKey(s.risk.hmacKey, phone), limit.Key{})
		switch {
		case err != nil:
			st.Errors = append(st.Errors, "risk score: "+err.Error())
		case c.Found:
			a := c.Answer
			st.Risk = &a
		}
	}
	return st
}

// readCode reads phone's live code of service: nil when it has none,
// known false when the read failed (its error added to errs).
func readCode(ctx context.Context, r CodeReader, phone Phone, service string, errs *[]string) (*CodeState, bool) {
	c, err := r.ReadCode(ctx, phone.E164, service)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, true
	case err != nil:
		name := "code"
		if service != DefaultService {
			name += " of " + service
		}
		*errs = append(*errs, name+": "+err.Error())
		return nil, false
	}
	return &c, true
}

func windowState(r limit.Result, t limit.Take) WindowState {
	w := WindowState{Known: !r.Fallback, Count: r.Count, Limit: t.Limit, Window: t.Window}
	if r.Count > 0 {
		w.ResetAfter = r.ResetAfter
	}
	return w
}
