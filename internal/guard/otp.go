package guard

import (
	"context"
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
	// Channels are the channels Sender offers beside SMS (channel.go):
	// whatsapp, call; nil: SMS only.
	Channels []string
	// Services are the policy file's services: those with an otp: block
	// send and verify under it (servicepolicy.go); nil: none.
	Services []Service
	HMACKey  []byte
	Logger   *slog.Logger
	Random   io.Reader // crypto/rand.Reader when nil
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
	// CodeStates reads a number's live code without counting a guess,
	// for Inspect (inspect.go); nil: Inspect leaves its code unknown.
	CodeStates CodeReader
	// Overrides are the ops desk's emergency overrides (override.go); nil:
	// the policy as is.
	Overrides Overrides
	// Challenger issues and checks the challenges of otp.challenge
	// (challenge.go); nil: refusals stay refusals.
	Challenger Challenger
	// Trusts remembers trusted numbers (trust.go); nil: only the account
	// flag trusts.
	Trusts Trusts
	// RiskLookup asks the network for a number's risk score and Risks
	// caches the answers (otp.risk, riskstep.go); either nil: the rule is
	// off. RiskHooks tell metrics of each lookup.
	RiskLookup RiskLookup
	Risks      Risks
	RiskHooks  RiskHooks
}

// OTP sends and verifies one-time codes under exact, shared limits. It
// lists the steps of a send and of a verify in order (send.go, verify.go);
// each step is a small type of its own concept, built and wired here.
type OTP struct {
	policy     OTPPolicy
	audit      *audit
	challenges *challenges
	deny       *denyCheck
	pumping    *pumping
	budget     *budget
	trust      *trust
	velocity   *velocity
	solved     *solvedCap
	risk       *risk
	spend      *spender
	codes      *codebook
	courier    *courier
	watch      *conversionWatch
	records    *verificationRecords
	// policies are the deployment's policy and its services' (the
	// channels offered, the fallback channel, the texts), by service.
	policies *servicePolicies
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
	p, log, now := o.Policy, o.Logger, o.Now
	safe := safeList(p.SafeList)
	policies := newServicePolicies(p, o.Services, newChannels(o.Channels))
	s := &OTP{policy: p, policies: policies,
		audit: &audit{events: o.Events, blocks: o.Blocks, log: log, now: now},
		challenges: &challenges{challenger: o.Challenger, log: log, now: now,
			on: o.Challenger != nil && o.Volumes != nil && p.Challenge.On()},
		pumping: &pumping{policy: p, overrides: o.Overrides, safe: safe, log: log, now: now},
		budget: &budget{policy: p, overrides: o.Overrides, counter: o.Counter, hooks: o.Abuse,
			log: log, now: now, exhaustedUntil: map[string]time.Time{}},
		trust: &trust{trusts: o.Trusts, policy: p.Trust, hmacKey: o.HMACKey, safe: safe, events: o.Events, log: log, now: now},
		velocity: &velocity{policy: p.CountryVelocity, historyMinSends: p.Conversion.HistoryMinSends,
			onStoreError: p.OnStoreError, safe: safe, volumes: o.Volumes, conv: o.Conversions, hooks: o.Abuse,
			log: log, now: now, noted: map[string]time.Time{}},
		solved: &solvedCap{policy: p.Challenge, volumes: o.Volumes, hooks: o.Abuse, log: log, now: now},
		spend:  &spender{policies: policies, counter: o.Counter, blocks: o.Blocks, volumes: o.Volumes, log: log, now: now},
		watch: &conversionWatch{policy: p.Conversion, prefixes: prefixLimits(p), conv: o.Conversions, autoBlock: o.AutoBlock, hooks: o.Abuse,
			safe: safe, events: o.Events, log: log, now: now},
	}
	unverified := &unverifiedBudget{hooks: o.Abuse,
		conv: o.Conversions, events: o.Events, log: log, now: now}
	s.challenges.spend = s.spend
	s.risk = &risk{policy: p.Risk, lookup: o.RiskLookup, risks: o.Risks, counter: o.Counter, hmacKey: o.HMACKey,
		types: p.AllowedNumberTypes, pumping: s.pumping, spend: s.spend, trust: s.trust, hooks: o.RiskHooks,
		events: o.Events, log: log, now: now}
	s.challenges.risk = s.risk
	s.deny = &denyCheck{deny: o.Deny, trust: s.trust, now: now}
	s.pumping.velocity = s.velocity
	s.trust.velocity = s.velocity
	s.velocity.audit, s.velocity.unverified, s.velocity.solved = s.audit, unverified, s.solved
	s.velocity.challenge, s.velocity.challenges, s.velocity.trust = p.Challenge, s.challenges, s.trust
	s.solved.velocity, s.solved.challenges = s.velocity, s.challenges
	s.spend.audit, s.spend.velocity, s.spend.budget = s.audit, s.velocity, s.budget
	room := &coldRoom{policy: p.CountryVelocity, mode: p.OnStoreError, counter: o.Counter, hooks: o.Abuse,
		conv: o.Conversions, events: o.Events, log: log, now: now, warm: map[string]time.Time{}}
	if room.mode == limit.FallbackLocal { // local_limit is per number: the room gets its share, as the other shared limits
		room.mode = limit.FallbackOpen
	}
	s.pumping.room, s.spend.room = room, room
	s.codes = &codebook{policies: policies, codes: o.Codes, states: o.CodeStates, random: o.Random, hmacKey: o.HMACKey, counter: o.Counter,
		stateless: &stateless{policy: p, hmacKey: o.HMACKey, counter: o.Counter,
			lastStoreFailure: o.LastStoreFailure, log: log, now: now},
		marks: tierMarks{key: o.HMACKey}, audit: s.audit, log: log, now: now}
	s.courier = &courier{sender: o.Sender, codes: o.Codes, deliveries: o.Deliveries,
		events: o.Events, spend: s.spend, log: log, now: now}
	s.watch.velocity, s.watch.solved = s.velocity, s.solved
	s.records = &verificationRecords{store: o.Verifications, audit: s.audit, log: log, now: now}
	if o.Conversions != nil {
		s.watch.q = newWatchQueue(o.WatchQueue)
		go s.watch.run()
	}
	return s
}

// Send checks the limits, stores a new code's HMAC and sends the code.
// Every send is recorded (audited), refused or not: a stream of bad
// numbers is worth seeing too.
//
// Counting rule: the limits (cooldown, per number, per IP, the abuse
// limits, the country velocity rule) are taken together, each an atomic
// fixed-window hit (spend). The first in that order that denies keeps the
// attempt; the others are refunded, so a denied request spends no other
// budget. A send the provider then fails still counts, as the provider
// may have delivered it, unless the provider surely did not take it: then
// the number's try is given back (delivery.go).
func (s *OTP) Send(ctx context.Context, req SendRequest) (SendResult, error) {
	// The policy of the send's service: the deployment's, or its overlay
	// (servicepolicy.go), handed down the steps.
	pol := s.policies.of(req.Service)
	phone, ip, auditIP, err := parseSend(&req, s.policy.DefaultRegion)
	if err == nil {
		req.Channel, err = pol.checkChannel(req.Channel)
	}
	if err != nil {
		s.audit.record(ctx, ActionOTPSend, "", phone, auditIP, req.Service, err)
		return SendResult{}, err
	}
	dctx := limit.WithDecision(ctx)
	res, err := s.send(dctx, pol, phone, ip, req)
	if _, lost := err.(*ClaimLost); lost {
		return res, err // a duplicate of a request that runs or ran: that one is recorded
	}
	s.audit.recordTier(ctx, ActionOTPSend, OutcomeSent, phone, auditIP, req.Service, err, res.Tier)
	res.Phone = phone // on a refusal too: the caller's log names it (masked)
	return res, offerFallback(pol.fallback, req.Channel, err)
}

// Verification returns the verification id of service ("" the default
// service); another service's is verification_not_found
// (verification.go).
func (s *OTP) Verification(ctx context.Context, service, id string) (Verification, error) {
	return s.records.get(ctx, service, id)
}

// CancelVerification kills the code of a pending verification of service
// and marks it canceled. A verification that is no longer pending is
// refused with verification_not_pending and its status: an approved code
// cannot be canceled, nor a canceled one approved (the store decides both
// in one atomic step).
func (s *OTP) CancelVerification(ctx context.Context, service, id string) (Verification, error) {
	return s.records.end(ctx, service, id, StatusCanceled)
}

// ApproveVerification approves a pending verification of service without
// its code (Verify's Status=approved), as CancelVerification cancels it.
// Nothing is credited: no code was proved (verification.go).
func (s *OTP) ApproveVerification(ctx context.Context, service, id string) (Verification, error) {
	return s.records.end(ctx, service, id, StatusApproved)
}

// CodeLength is the length of the codes service ("" the default
// service) sends, its own policy's (Verify's service answers it).
func (s *OTP) CodeLength(service string) int { return s.policies.of(service).CodeLength }

// RecordDelivery puts a delivery report in the audit trail and reports
// whether it did: a report already recorded (the same message id and
// status, on any instance, within DeliveryReplayWindow) is a replay and is
// not recorded again. When the replay check cannot reach its store the
// report is recorded: a report counted twice beats one lost (delivery.go).
func (s *OTP) RecordDelivery(ctx context.Context, d Delivery) bool {
	return s.courier.recordDelivery(ctx, d)
}

// ImportTrusted marks numbers trusted for verified_within (an operator's
// import of the numbers an app verified before it used otpguard), and
// records it in the audit trail with the counts only (no number).
// Idempotent: importing a number again only renews its mark. Imported
// counts distinct numbers: a number listed twice is marked, and counted,
// once (trust.go).
func (s *OTP) ImportTrusted(ctx context.Context, numbers []string, actor string) (ImportResult, error) {
	return s.trust.importTrusted(ctx, numbers, actor)
}

// ClearRisk deletes the cached risk answer of phone (an operator's word:
// its next refused send asks the network again), recorded in the audit
// trail without the number in clear; false: none was cached.
func (s *OTP) ClearRisk(ctx context.Context, phone, actor string) (bool, error) {
	p, err := ParsePhone(phone, s.policy.DefaultRegion)
	if err != nil {
		return false, err
	}
	return s.risk.clear(ctx, p, actor)
}

// RiskOn reports whether risk scores are asked (otp.risk.mode on and a
// lookup available).
func (s *OTP) RiskOn() bool { return s.risk.on() }

// BudgetUse reads the spend budget's windows without spending, with the
// limits a send meets now, the ops desk's overrides included; windows
// that are off are left out. On an error the windows are returned with
// Known false (budget.go).
func (s *OTP) BudgetUse(ctx context.Context) ([]BudgetUse, error) {
	return s.budget.use(ctx)
}

// WatchQueued is how many conversion watch events wait in the queue.
func (s *OTP) WatchQueued() int { return s.watch.queued() }

// Flush waits until every watch event queued before it was counted and
// judged (its alerts raised), or ctx ends. Without a watch it returns at
// once.
func (s *OTP) Flush(ctx context.Context) error { return s.watch.flush(ctx) }

// Close drains the watch queue (counting and judging what is in it) and
// stops its goroutine. Events queued after Close are dropped. Safe to call
// more than once.
func (s *OTP) Close() { s.watch.close() }

// WatchDropped is how many conversion watch events a full queue dropped.
func (s *OTP) WatchDropped() int64 { return s.watch.dropped() }
