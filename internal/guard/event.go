package guard

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// Event is one audit record: a send decision, a verify outcome or an ops
// action. It never holds an OTP code, in any field.
type Event struct {
	ID      int64
	At      time.Time
	Action  string // ActionOTPSend, ActionOTPVerify, ... or one of the ops desk's
	Outcome string // OutcomeSent, a refusal's Code ("phone_rate_limited"), ...
	Phone   string // E.164, or "" when the action concerns no number
	Country string // ISO 3166 region, may be ""
	IP      string
	Actor   string // API key id or ops user, may be ""
	// Service is the Verify service SID a send, check, cancel or approval
	// acted for (service.go); "" for the default service (every /otp/...
	// call) and for the events no service caused.
	Service string
	Detail  string
	// TraceID is the trace ID of the request that led to the event
	// (WithTraceID), "" when tracing is off or no request caused it.
	TraceID string
	// RequestID is the X-Request-Id of the HTTP request that led to the
	// event (WithRequestID), "" for events no request caused.
	RequestID string
	// UID is the event's identity: 32 hex digits (the millisecond it was
	// made, then 80 random bits) given once, when the event is made and
	// before it is queued (NewEventUID).
	// The audit trail stores each UID at most once, so a write retried
	// after a commit whose answer was lost does not store it twice.
	UID string
	// Trusted: a send that went to a trusted number (trust.go), for the
	// attack view's counts. Not stored in the audit trail.
	Trusted bool
	// Solved: a send after a solved challenge (the solved tier; challenge.go),
	// sent or refused by the solved cap, for the attack view's counts: the
	// cap's refusal answers unusual_volume as the velocity rule's does, and
	// this is how the desk tells them apart. Not stored in the audit trail.
	Solved bool
	// Carrier is the display name of the carrier an abuse rule's event
	// concerns ("MTN"; carriershare.go), "" for a country's or none. Not
	// stored in the audit trail, whose Detail names it ("carrier=MTN").
	Carrier string
}

// NewEventUID returns a fresh Event.UID.
func NewEventUID() string { return newEventUID(time.Now()) }

// newEventUID is the UID of an event made at t: the unix milliseconds in
// 48 bits, then 80 random bits, which keep UIDs of one millisecond apart
// (a clash among a million of them has odds of 1 in 2^41). Time first:
// the audit table's unique index on the UID then grows at its end, as the
// table does, and a batch's commit writes a few of its pages, not one page
// per event as 128 random bits did (a quarter of the writer's CPU,
// BenchmarkWriteEvents). Only the order of the index depends on the clock:
// a clock set back makes UIDs that sort earlier, not ones that repeat.
func newEventUID(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	rand.Read(b[6:]) // never fails (crypto/rand: it crashes the program instead)
	return hex.EncodeToString(b[:])
}

// The audit actions the OTP rules record (Event.Action). They are stored
// in the audit trail and filtered on: never rename one.
const (
	ActionOTPSend     = "otp.send"
	ActionOTPVerify   = "otp.verify"
	ActionConversion  = "otp.conversion"   // a conversion alert
	ActionVelocity    = "otp.velocity"     // a country refused for unusual volume
	ActionSMSStatus   = "sms.status"       // a delivery status report
	ActionOTPCancel   = "otp.cancel"       // POST /otp/verifications/{id}/cancel, Verify's Status=canceled
	ActionOTPApprove  = "otp.approve"      // Verify's Status=approved: approved without a code
	ActionTrustImport = "otp.trust.import" // POST /ops/trusted-numbers
	ActionRiskLookup  = "otp.risk.lookup"  // a risk score asked of the network (risk.go)
	ActionRiskClear   = "otp.risk.clear"   // DELETE /ops/risk/{phone}
	ActionTrustHeld   = "otp.trust.held"   // trust marks held: a country's hour of unusual new-number volume
)

// The outcomes the OTP rules record (Event.Outcome) besides the Code of a
// refusal. A delivery report's outcome is the provider's status as sent
// ("delivered", "failed", ...). Stored like the actions: never rename one.
const (
	OutcomeSent  = "sent"  // otp.send: the code left
	OutcomeValid = "valid" // otp.verify: the code was right
	// otp.conversion: the alert was only reported, or its prefix was
	// deny-listed.
	OutcomeReported = "reported"
	OutcomeBlocked  = "blocked"
	// OutcomeQuarantined: a country's velocity floor was cut (conversion watch, block mode).
	OutcomeQuarantined = "quarantined"
	// OutcomeCanceled: otp.cancel killed a pending verification's code.
	OutcomeCanceled = "canceled"
	// OutcomeApproved: otp.approve approved a pending verification
	// without its code.
	OutcomeApproved = "approved"
)
