package guard

import (
	"context"
	"time"
)

// The network's risk score (docs/abuse.md, "The risk score"): Twilio
// Lookup v2's SMS pumping risk for a number, asked only where a send
// would otherwise be challenged or refused, since each lookup costs money
// and a round trip.

// RiskAnswer is what the network says of one number.
type RiskAnswer struct {
	// Score is the SMS pumping risk score, 0 (low) to 100 (high).
	Score int
	// CarrierRisk is the carrier's risk category ("low", "mild", "high");
	// "" when not given.
	CarrierRisk string
	// Blocked: the network blocks the number (Lookup's number_blocked).
	Blocked bool
	// LineType is the live line type ("mobile", "nonFixedVoip", "premium"...,
	// Lookup's line_type_intelligence.type); "" when not given. It
	// overrides the static number type of libphonenumber's metadata.
	LineType string
	// At is when the answer was fetched (a cached answer keeps its age).
	At time.Time
}

// RiskLookup asks the network for a number's risk (sms: the Lookup v2
// client; the simulator: a fake answering from the scenario).
type RiskLookup interface {
	// LookupRisk asks for e164's risk. An error (or ctx's deadline) means
	// no answer: the send gets what it would without a score.
	LookupRisk(ctx context.Context, e164 string) (RiskAnswer, error)
}
