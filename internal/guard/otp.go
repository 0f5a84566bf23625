package guard

import (
	"crypto/rand"
	"io"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// OTPOptions are the dependencies and rules of an OTP service.
type OTPOptions struct {
	Policy  OTPPolicy
	Counter limit.Counter
	Codes   Codes
	Sender  Sender
	HMACKey []byte
	Logger  *slog.Logger
	Random  io.Reader // crypto/rand.Reader when nil
	// Optional: a deny-list, an audit sink and a block index. Nil means
	// none (nothing denied, nothing recorded).
	Deny   DenyChecker
	Events EventSink
	Blocks Blocks
	// Now is the clock for deny-list expiry and block times; time.Now when nil.
	Now func() time.Time
	// LastStoreFailure is when the store last failed (Fallback.LastFailure):
	// stateless codes are accepted only within a code TTL of it. Nil: only
	// while the store fails.
	LastStoreFailure func() time.Time
	// The abuse defences (pumping.go, conversion.go), all optional: the
	// conversion watch's store, the deny-list it blocks prefixes on, and
	// metric hooks. No Conversions: no conversion watch.
	Conversions Conversions
	AutoBlock   AutoBlocker
	Abuse       AbuseHooks
	// Deliveries remembers the delivery reports already recorded, so that a
	// replayed status callback is recorded once (delivery.go). Nil: every
	// report is recorded.
	Deliveries Deliveries
	// Volumes keeps the country velocity rule's hourly counts (velocity.go);
	// nil: no country velocity rule.
	Volumes Volumes
	// WatchQueue bounds the conversion watch's queue of events waiting to
	// be counted (DefaultWatchQueue when 0). With Conversions, NewOTP
	// starts the watch's goroutine: Close stops it.
	WatchQueue int
	// Verifications reads and cancels verification records
	// (verification.go); nil: GET and cancel answer 404.
	Verifications Verifications
	// Overrides are the ops desk's emergency overrides (override.go); nil:
	// the policy as is.
	Overrides Overrides
	// Challenger issues and checks the challenges of otp.challenge
	// (challenge.go); nil: refusals stay refusals.
	Challenger Challenger
	// Trusts remembers trusted numbers (trust.go); nil: only the account
	// flag trusts.
	Trusts Trusts
}

// OTP sends and verifies one-time codes under exact, shared limits.
type OTP struct {
	policy     OTPPolicy
	counter    limit.Counter
	codes      Codes
	sender     Sender
	hmacKey    []byte
	log        *slog.Logger
	random     io.Reader
	deny       DenyChecker
	events     EventSink
	blocks     Blocks
	now        func() time.Time
	deliveries Deliveries
	// lastStoreFailure: see OTPOptions.LastStoreFailure.
	lastStoreFailure func() time.Time
	abuse            *abuseState
	// watch is the conversion watch's queue (watch.go); nil without
	// Conversions.
	watch         *watchQueue
	verifications Verifications
	challenger    Challenger
	trusts        Trusts
}

// NewOTP returns an OTP service. The policy must have passed Validate.
func NewOTP(o OTPOptions) *OTP {
	if o.Random == nil {
		o.Random = rand.Reader
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Deny == nil {
		o.Deny = noDeny{}
	}
	if o.Events == nil {
		o.Events = noEvents{}
	}
	if o.Blocks == nil {
		o.Blocks = noBlocks{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LastStoreFailure == nil {
		o.LastStoreFailure = func() time.Time { return time.Time{} }
	}
	s := &OTP{
		policy: o.Policy, counter: o.Counter, codes: o.Codes, sender: o.Sender,
		hmacKey: o.HMACKey, log: o.Logger, random: o.Random,
		deny: o.Deny, events: o.Events, blocks: o.Blocks, now: o.Now,
		lastStoreFailure: o.LastStoreFailure, abuse: newAbuseState(o),
		deliveries: o.Deliveries, verifications: o.Verifications, challenger: o.Challenger,
		trusts: o.Trusts,
	}
	if o.Conversions != nil {
		s.watch = newWatchQueue(o.WatchQueue)
		go s.runWatch()
	}
	return s
}
