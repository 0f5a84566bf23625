package guard

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// A service's policy (docs/verify.md, "A service's policy"). A service of
// the policy file may carry an otp: block of its own: what it sets
// overrides the deployment's otp: policy for that service's sends and
// verifies, what it leaves out is the deployment's. The overlay is
// applied once per policy (NewOTP), and each step reads the policy of
// the request's service where it reads a value (servicePolicies.of):
// the code (code.go), the text (delivery.go), the channels (channel.go)
// and the number's limits and the budget (spend.go). A send looks its
// service's up once and hands it down its steps.
//
// What a service may set is what a tenant owns: its codes (length, life,
// guesses), its texts, the number's cooldown and per_phone window as its
// sends meet them, the channels it offers (some of the deployment's) and
// a spend budget of its own. The automatic abuse rules, the per-address
// and shared limits, the fallback mode and the deployment's budget stay
// the deployment's: they guard the deployment's numbers and money as a
// whole. A service's budget is a second, smaller ceiling counted on its
// own counters; the deployment's still counts every service's sends.

// ServicePolicy is a service's otp: block: each field set overrides the
// deployment's; a zero field (nil for Cooldown and Channels) inherits it.
type ServicePolicy struct {
	CodeLength        int
	CodeTTL           time.Duration
	MaxVerifyAttempts int
	// Cooldown nil: the deployment's; 0: none.
	Cooldown *time.Duration
	// PerPhone Limit 0: the deployment's window. It is counted on the
	// number's own counter, with this limit for this service's sends.
	PerPhone Window
	// Message and Messages are one set of texts: a service that sets
	// either has its own set, Message (else the deployment's) and its
	// Messages only, so that no locale of the deployment's speaks for a
	// service that wrote its own words.
	Message  string
	Messages map[string]string
	// Channels are the channels its sends may name, some of those the
	// deployment offers; nil: the deployment's.
	Channels []string
	// Budget is its own spend budget (0: none of its own), counted per
	// service beside the deployment's otp.budget, which stays the shared
	// ceiling.
	Budget Budget
}

// servicePolicy is the policy one service's sends and verifies meet: the
// deployment's with the service's overlay, and what the steps derive
// from it. A send looks it up once (OTP.Send) and hands it down.
type servicePolicy struct {
	OTPPolicy
	deployment channels // the channels the deployment offers
	offered    channels // those its sends may name
	fallback   string   // its fallback channel (fallback.go); "" none
	messages   messages
	// ownBudget are its own budget's limits (none without one), spent
	// after the deployment's (spend.go).
	ownBudget []limitedTake
}

// servicePolicies are the policies of a deployment's services, by owner
// tag; a service without an overlay (the default one too) has the
// deployment's, base.
type servicePolicies struct {
	base *servicePolicy
	by   map[string]*servicePolicy
}

// newServicePolicies builds the policies of p's services once: offered
// are the channels the deployment offers. The policy must have passed
// Validate (and ValidateServiceChannels).
func newServicePolicies(p OTPPolicy, services []Service, offered channels) *servicePolicies {
	ps := &servicePolicies{base: &servicePolicy{OTPPolicy: p, deployment: offered, offered: offered,
		fallback: fallbackOf(p, offered), messages: newMessages(p)}}
	for _, svc := range services {
		if svc.OTP == nil || svc.Default {
			continue
		}
		if ps.by == nil {
			ps.by = map[string]*servicePolicy{}
		}
		o := svc.OTP
		sp := &servicePolicy{OTPPolicy: overlay(p, o), deployment: offered, offered: offered}
		sp.ownBudget = budgetLimits(o.Budget, "service:"+svc.SID, p.OnStoreError)
		if o.Channels != nil {
			sp.offered = slices.DeleteFunc(slices.Clone(offered), func(ch string) bool { return !slices.Contains(o.Channels, ch) })
		}
		sp.fallback, sp.messages = fallbackOf(sp.OTPPolicy, sp.offered), newMessages(sp.OTPPolicy)
		ps.by[svc.Owner()] = sp
	}
	return ps
}

// overlay is p with what o sets.
func overlay(p OTPPolicy, o *ServicePolicy) OTPPolicy {
	if o.CodeLength > 0 {
		p.CodeLength = o.CodeLength
	}
	if o.CodeTTL > 0 {
		p.CodeTTL = o.CodeTTL
	}
	if o.MaxVerifyAttempts > 0 {
		p.MaxVerifyAttempts = o.MaxVerifyAttempts
	}
	if o.Cooldown != nil {
		p.Cooldown = *o.Cooldown
	}
	if o.PerPhone.Limit > 0 {
		p.PerPhone = o.PerPhone
	}
	if o.Message != "" || o.Messages != nil {
		if o.Message != "" {
			p.Message = o.Message
		}
		p.Messages = o.Messages
	}
	return p
}

// of is the policy of service's sends and verifies ("" the default
// service: the deployment's).
func (ps *servicePolicies) of(service string) *servicePolicy {
	if sp, ok := ps.by[service]; ok {
		return sp
	}
	return ps.base
}

// budgetLimits are a service's own budget b's limits (none without one),
// beside the deployment's (enforced.go): its own counters (id), charged
// a channel's price as the deployment's are (priced).
func budgetLimits(b Budget, id string, mode limit.FallbackMode) []limitedTake {
	if b == (Budget{}) {
		return nil
	}
	if mode == limit.FallbackLocal { // shared limits get their share (enforced.go)
		mode = limit.FallbackOpen
	}
	var ls []limitedTake
	for _, w := range []struct {
		name   string
		limit  int64
		window time.Duration
		what   string
	}{
		{budgetHourKey.Name, b.PerHour, time.Hour, "this service's SMS budget for this hour is spent; try again later"},
		{budgetDayKey.Name, b.PerDay, 24 * time.Hour, "this service's SMS budget for today is spent; try again later"},
	} {
		if w.limit <= 0 {
			continue
		}
		ls = append(ls, limitedTake{take: limit.Take{Key: limit.Key{Space: budgetHourKey.Space, ID: id, Name: w.name},
			Algorithm: limit.FixedWindow, Limit: w.limit, Window: w.window, Cost: 1, Policy: OTPPolicyName, OnStoreError: mode},
			refundDenied: true, denial: problem.CodeBudgetExhausted, what: w.what})
	}
	return ls
}

// validateServicePolicy checks the otp: block of the service at where
// against the deployment's policy base.
func validateServicePolicy(where string, o *ServicePolicy, base OTPPolicy, bad func(string, string, ...any)) {
	field := where + ".otp"
	if o.CodeLength != 0 && (o.CodeLength < 6 || o.CodeLength > 10) {
		bad(field+".code_length", "must be between 6 and 10 digits, got %d", o.CodeLength)
	}
	if o.CodeTTL != 0 && (o.CodeTTL < minCodeTTL || o.CodeTTL > maxCodeTTL) {
		bad(field+".code_ttl", "must be between %s and %s, got %s", minCodeTTL, maxCodeTTL, o.CodeTTL)
	}
	if o.MaxVerifyAttempts != 0 && (o.MaxVerifyAttempts < 1 || o.MaxVerifyAttempts > maxAttempts) {
		bad(field+".max_verify_attempts", "must be between 1 and %d, got %d", maxAttempts, o.MaxVerifyAttempts)
	}
	if cd := o.Cooldown; cd != nil && (*cd < 0 || *cd > maxCooldown || *cd%time.Millisecond != 0) {
		bad(field+".cooldown", "must be between 0 (off) and %s, in whole milliseconds, got %s", maxCooldown, *cd)
	}
	if o.PerPhone != (Window{}) {
		validateWindow(field+".per_phone", o.PerPhone, bad)
	}
	if o.Message != "" {
		validateMessage(field+".message", o.Message, bad)
	}
	for _, l := range slices.Sorted(maps.Keys(o.Messages)) {
		f := field + ".messages." + l
		if c, ok := CanonicalLocale(l); !ok {
			bad(f, "%q is not a supported locale: use one of %s", l, strings.Join(supportedLocales, ", "))
		} else if c != l {
			bad(f, "write the locale as %q", c)
		}
		validateMessage(f, o.Messages[l], bad)
	}
	if o.Channels != nil && len(o.Channels) == 0 {
		bad(field+".channels", "name at least one channel, or leave channels out (the deployment's)")
	}
	seen := map[string]bool{}
	for i, ch := range o.Channels {
		f := fmt.Sprintf("%s.channels[%d]", field, i)
		switch {
		case !slices.Contains(Channels(), ch):
			bad(f, "%q is not a channel: use %s", ch, strings.Join(Channels(), ", "))
		case seen[ch]:
			bad(f, "%s is named twice", ch)
		}
		seen[ch] = true
	}
	for _, w := range []struct {
		name       string
		own, ceil  int64
		deployment string
	}{{"per_hour", o.Budget.PerHour, base.Budget.PerHour, "otp.budget.per_hour"}, {"per_day", o.Budget.PerDay, base.Budget.PerDay, "otp.budget.per_day"}} {
		f := field + ".budget." + w.name
		switch {
		case w.own < 0 || w.own > maxLimit:
			bad(f, "must be between 0 (none of its own) and %d, got %d", maxLimit, w.own)
		case w.own > 0 && w.ceil > 0 && w.own > w.ceil:
			bad(f, "%d is above the deployment's %s (%d), the ceiling every service shares: a service's budget is a smaller one", w.own, w.deployment, w.ceil)
		}
	}
}

// ValidateServiceChannels checks that every service's otp.channels names
// only channels the deployment offers (offered: its senders', SMS
// always): a channel a service names that no sender can carry is a
// mistake to stop the start or the reload on, not a send to refuse.
func ValidateServiceChannels(services []Service, offered []string) error {
	var errs []error
	for i, s := range services {
		if s.OTP == nil {
			continue
		}
		for j, ch := range s.OTP.Channels {
			if ch != ChannelSMS && slices.Contains(Channels(), ch) && !slices.Contains(offered, ch) {
				errs = append(errs, fmt.Errorf("services[%d].otp.channels[%d]: the %s channel is off on this deployment (its sender is not configured): a service offers some of the deployment's channels (%s)",
					i, j, ch, strings.Join(offered, ", ")))
			}
		}
	}
	return errors.Join(errs...)
}
