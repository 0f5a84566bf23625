package httpapi

import "github.com/otpguard/otpguard/internal/metrics"

// Admission is the instance's bound on decisions in flight
// (OTPGUARD_MAX_IN_FLIGHT), built once and shared by every transport that
// decides: the API's routes (Options.Admission) and Envoy's gRPC service.
// A decision past the bound is shed at once whichever way it came in, so
// that a flood on one cannot take the instance from the other (why shed:
// admission.go).
type Admission struct{ a admission }

// NewAdmission bounds the decisions in flight to maxInFlight (0: no
// bound); what it sheds is counted in m's otpguard_shed_total, by route,
// and in /ops/status.
func NewAdmission(maxInFlight int, m *metrics.Set) *Admission {
	return &Admission{a: newAdmission(maxInFlight, m)}
}

// Enter takes a slot for a decision on route; false when none is free
// (the decision is shed, and counted). A slot taken is given back by
// Leave.
func (x *Admission) Enter(route string) bool { return x.a.enter(route) }

// Leave gives back the slot Enter took; err is the decision's, counted as
// shed when it was given up as overloaded on a healthy Redis.
func (x *Admission) Leave(err error, route string) { x.a.leave(err, route) }
