package guard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"
)

// StoreRetryAfter is the Retry-After of a 503 when the limit store is
// unavailable and the policy fails closed (or an ops unblock failed): long
// enough not to hammer a recovering Redis.
const StoreRetryAfter = 60 * time.Second

// OTPOptions are the dependencies and rules of an OTP service.
type OTPOptions struct {
	Policy  OTPPolicy
	Counter Counter
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
}

// OTP sends and verifies one-time codes under exact, shared limits.
type OTP struct {
	policy     OTPPolicy
	counter    Counter
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
		deliveries: o.Deliveries, verifications: o.Verifications,
	}
	if o.Conversions != nil {
		s.watch = newWatchQueue(o.WatchQueue)
		go s.runWatch()
	}
	return s
}

// SendRequest asks for a code to be sent to Phone. ClientIP is the end user's
// address as the calling app saw it; empty means no per-IP limit applies.
type SendRequest struct {
	Phone    string
	ClientIP string
}

// SendResult says where the code went and how long it lives.
type SendResult struct {
	Phone     Phone
	ExpiresIn time.Duration
	// VerificationID names the code's verification (pending); empty for a
	// stateless code, which has no record (verification.go).
	VerificationID string
}

// Send checks the limits, stores a new code's HMAC and sends the code.
//
// Counting rule: the limits (cooldown, per number, per IP, the abuse
// limits, the country velocity rule) are taken together, each an atomic
// fixed-window hit (spend). The first in that order that denies keeps the
// attempt; the others are refunded, so a denied request spends no other
// budget. A send the provider then fails still counts: the provider may
// have delivered it.
func (s *OTP) Send(ctx context.Context, req SendRequest) (SendResult, error) {
	phone, err := ParsePhone(req.Phone, s.policy.DefaultRegion)
	var ip string
	if err == nil {
		ip, err = IPSubject(req.ClientIP)
	}
	if err != nil { // audited too: a stream of bad numbers is worth seeing
		s.record(ctx, ActionOTPSend, "", phone, CleanIP(req.ClientIP), err)
		return SendResult{}, err
	}
	res, err := s.send(WithDecision(ctx), phone, ip)
	s.record(ctx, ActionOTPSend, OutcomeSent, phone, CleanIP(req.ClientIP), err)
	res.Phone = phone // on a refusal too: the caller's log names it (masked)
	return res, err
}

func (s *OTP) send(ctx context.Context, phone Phone, ip string) (SendResult, error) {
	if e, ok := s.deny.Denied(phone.E164, s.now()); ok {
		return SendResult{}, &Error{Code: CodeDenied, Message: "this number may not receive codes",
			Err: fmt.Errorf("deny-list entry %d (%s)", e.ID, MaskPhone(e.Pattern))}
	}
	if err := s.checkDestination(phone); err != nil {
		return SendResult{}, err
	}
	safe := s.safe(phone.E164)
	// The country velocity rule goes out with the limits (one round trip)
	// when the counter can take it; it counts only sends every other limit
	// let through, so its count is given back when another limit denies.
	var vol *VolumeTake
	if s.velocityOn(safe) {
		v := s.volumeTake(phone)
		vol = &v
	}
	passed, counted, err := s.spend(ctx, phone, append(s.sendLimits(phone.E164, ip), s.abuseLimits(phone, safe)...), vol)
	if err != nil {
		return SendResult{}, err
	}
	var velAt time.Time
	if counted {
		velAt = vol.Now
	}
	notSent := func() { // nothing left: the budget and the country's hour get it back
		s.refund(ctx, budgetTakes(passed))
		if counted {
			s.refundVelocity(ctx, phone, velAt)
		}
	}

	code, ttl, vid, err := s.issueCode(ctx, phone)
	if err != nil {
		notSent()
		return SendResult{}, err
	}
	body := strings.ReplaceAll(s.policy.Message, "{code}", code)
	if err := s.sender.Send(ctx, Message{To: phone.E164, Body: body}); err != nil {
		// The code was never delivered (as far as we know): do not leave it
		// guessable. The send limits stay spent. (A stateless code cannot
		// be taken back; it dies with its step.)
		if vid != "" {
			if derr := s.codes.DeleteCode(context.WithoutCancel(ctx), phone.E164); derr != nil {
				s.log.WarnContext(ctx, "deleting undelivered code failed", "phone", MaskPhone(phone.E164), "err", derr)
			}
		}
		s.log.WarnContext(ctx, "sms not sent", "phone", MaskPhone(phone.E164), "err", err)
		var e *Error
		if errors.As(err, &e) {
			if e.Code == CodeInvalidDestination || errors.Is(err, ErrNotSent) { // surely not sent: the budget is not spent
				notSent()
			}
			return SendResult{}, err
		}
		return SendResult{}, &Error{Code: CodeProviderUnavailable, Message: "the SMS provider failed", Err: err}
	}
	s.watchSend(ctx, phone)
	return SendResult{Phone: phone, ExpiresIn: ttl, VerificationID: vid}, nil
}

// limitedTake is one send limit and the code that refuses it.
type limitedTake struct {
	take   Take
	denial Code
	what   string
	// refundDenied: a denied hit is given back too (the budget's).
	refundDenied bool
}

// sendLimits are the limits of one send. When the store cannot answer they
// fall back by the policy's on_store_error: with local, the cooldown is one
// send per number per cooldown and the per-number limit is local_limit, on
// each instance, while the per-IP limit is split (per_ip.limit / N); with
// open, all three are split; with closed, the send is refused.
func (s *OTP) sendLimits(phone, ip string) []limitedTake {
	mode := s.policy.OnStoreError
	fallback := func(t Take, localLimit int64) Take {
		t.Policy, t.OnStoreError = OTPPolicyName, mode
		if mode == FallbackLocal {
			t.LocalLimit = localLimit
		}
		return t
	}
	var ls []limitedTake
	if cd := s.policy.Cooldown; cd > 0 {
		ls = append(ls, limitedTake{
			take:   fallback(Take{Key: cooldownKey(phone), Algorithm: FixedWindow, Limit: 1, Window: cd, Cost: 1}, 1),
			denial: CodeCooldown, what: "a code was sent to this number moments ago",
		})
	}
	ls = append(ls, limitedTake{
		take: fallback(Take{Key: phoneSendsKey(phone), Algorithm: FixedWindow,
			Limit: s.policy.PerPhone.Limit, Window: s.policy.PerPhone.Window, Cost: 1}, s.policy.LocalLimit),
		denial: CodePhoneRateLimited, what: "too many codes were sent to this number",
	})
	if ip != "" {
		t := fallback(Take{Key: Key{"otp:ip", ip, "sends"}, Algorithm: FixedWindow,
			Limit: s.policy.PerIP.Limit, Window: s.policy.PerIP.Window, Cost: 1}, 0)
		if mode == FallbackLocal { // local_limit is per number: an address gets its share
			t.OnStoreError, t.LocalLimit = FallbackOpen, 0
		}
		ls = append(ls, limitedTake{
			take:   t,
			denial: CodeIPRateLimited, what: "too many codes were requested from this address",
		})
	}
	return ls
}

// PhoneCounterKeys are the keys Send counts a number's own sends under:
// its cooldown and its per-number window. The cooldown key is listed even
// when the policy has no cooldown, as a policy in force earlier may have
// set one. The per-IP counter is the address's, not the number's, and is
// not listed. The ops desk deletes these keys to unblock a number.
func PhoneCounterKeys(e164 string) []Key {
	return []Key{cooldownKey(e164), phoneSendsKey(e164)}
}

func cooldownKey(e164 string) Key { return Key{"otp", e164, "cooldown"} }

func phoneSendsKey(e164 string) Key { return Key{"otp", e164, "sends"} }

// spend takes every limit of a send at once: one Counter call, which the
// store sends in one round trip (one per hash slot, in parallel, on
// Redis Cluster), each limit still its own atomic unit. With vol, the
// country velocity rule goes out in the same round trip when the counter
// is a SendCounter, and as a second step after the limits otherwise.
//
// Counting rule: the first limit that denies, in the order of limits,
// decides the answer and keeps its attempt (the budget's refundDenied
// gives its own back); every other limit the store counted for this
// request (those that passed, and those that denied alongside) is refunded,
// and so is the velocity count, so a denied request spends no other budget.
// Between the take and the refund a concurrent request may see a counter
// one higher than it will settle at: it can be refused, never allowed
// beyond a limit (docs/limits.md, "One round trip per send").
//
// It returns the takes spent (for a send that does not leave to give the
// budget back) and whether the velocity rule counted the send.
func (s *OTP) spend(ctx context.Context, phone Phone, limits []limitedTake, vol *VolumeTake) ([]Take, bool, error) {
	takes := make([]Take, len(limits))
	for i, l := range limits {
		takes[i] = l.take
	}
	var res []Result
	var vres *VolumeResult
	var err error
	if sc, ok := s.counter.(SendCounter); ok && vol != nil {
		res, vres, err = sc.TakeSend(ctx, takes, vol)
	} else {
		res, err = s.counter.Take(ctx, takes)
	}
	if err == nil && len(res) != len(takes) {
		err = fmt.Errorf("otp: store answered %d results for %d takes", len(res), len(takes))
	}
	if err != nil {
		s.log.Log(ctx, StoreFailureLevel(err), "limit store failed", "limit", "otp.send", "err", err)
		return nil, false, storeError(err)
	}
	deny := slices.IndexFunc(res, func(r Result) bool { return !r.Allowed })
	// spent: what the store counted for this request, each refund going
	// where it was counted (the fallback's memory or the store).
	var spent []Take
	fellBack := false
	for i, r := range res {
		fellBack = fellBack || r.Fallback
		if !r.Spent || (i == deny && !limits[i].refundDenied) {
			continue
		}
		t := takes[i]
		t.Fallback = r.Fallback
		spent = append(spent, t)
	}
	if deny >= 0 {
		// The refunds go out at once: one round trip of latency.
		var wg sync.WaitGroup
		if vres != nil && vres.Allowed {
			wg.Go(func() { s.refundVelocity(ctx, phone, vol.Now) })
		}
		s.refund(ctx, spent)
		wg.Wait()
		l, r := limits[deny], res[deny]
		if l.denial == CodeBudgetExhausted {
			s.budgetRefused(ctx, l.take.Key, r)
		}
		// The number is blocked, not just its address. (Not noted when
		// the fallback decided: the block index lives in the store.)
		if l.take.Key.Space == "otp" && !r.Fallback {
			s.noteBlock(ctx, Block{Phone: phone.E164, Country: phone.Region, Reason: l.denial,
				Count: r.Count, Until: s.now().Add(r.RetryAfter)})
		}
		return nil, false, &Error{Code: l.denial, Message: l.what, RetryAfter: r.RetryAfter,
			Usage: Usage(r.Count, l.take.Limit, l.take.Window)}
	}
	switch {
	case vol == nil:
		return spent, false, nil
	case vres != nil:
		if !vres.Allowed {
			s.refund(ctx, spent)
			return nil, false, s.velocityDenied(ctx, phone, *vol, *vres)
		}
		return spent, true, nil
	case fellBack:
		// The fallback decided a limit (the breaker is open or the store
		// failed in this decision): the velocity rule is not judged then,
		// and the send does not wait on the store again.
		return spent, false, nil
	}
	// A counter that cannot take the velocity rule with the limits: it
	// comes last, as its own step.
	counted, err := s.takeVelocity(ctx, phone, *vol)
	if err != nil {
		s.refund(ctx, spent)
		return nil, false, err
	}
	return spent, counted, nil
}

func (s *OTP) refund(ctx context.Context, takes []Take) {
	if len(takes) == 0 {
		return
	}
	if err := s.counter.Refund(context.WithoutCancel(ctx), takes); err != nil {
		// A lost refund only ever refuses more, never allows more.
		s.log.WarnContext(ctx, "refund failed", "err", err)
	}
}

// VerifyRequest checks Code against the code last sent to Phone.
type VerifyRequest struct {
	Phone string
	Code  string
}

// Verify counts the guess, then compares it in constant time, and consumes
// the code on a match: of two concurrent correct guesses exactly one wins.
// After MaxVerifyAttempts wrong guesses the code is dead (even the right
// code is refused) until a new one is sent. On a refusal the number is
// returned when it parsed.
func (s *OTP) Verify(ctx context.Context, req VerifyRequest) (Phone, error) {
	res, err := s.VerifyCode(ctx, req)
	return res.Phone, err
}

// VerifyResult is a right guess: the number, and the verification it
// approved (empty for a stateless code, which has none).
type VerifyResult struct {
	Phone          Phone
	VerificationID string
}

// VerifyCode is Verify, answering the verification approved too.
func (s *OTP) VerifyCode(ctx context.Context, req VerifyRequest) (VerifyResult, error) {
	phone, err := ParsePhone(req.Phone, s.policy.DefaultRegion)
	if err == nil {
		err = s.checkCodeFormat(req.Code)
	}
	if err != nil {
		s.record(ctx, ActionOTPVerify, "", phone, "", err)
		return VerifyResult{}, err
	}
	ctx = WithDecision(ctx)
	vid, err := s.verify(ctx, phone, req.Code)
	s.record(ctx, ActionOTPVerify, OutcomeValid, phone, "", err)
	if err != nil {
		return VerifyResult{Phone: phone}, err // the number, for the caller's log
	}
	s.watchVerify(ctx, phone)
	s.creditVerify(ctx, phone)
	return VerifyResult{Phone: phone, VerificationID: vid}, nil
}

// verify checks code and returns the verification it approved ("" for a
// stateless code).
func (s *OTP) verify(ctx context.Context, phone Phone, code string) (string, error) {
	g, err := s.codes.GuessCode(ctx, phone.E164, s.now())
	switch {
	case errors.Is(err, ErrNotFound) && s.statelessCodes() && s.recentStoreFailure(s.now()):
		// Redis answers again, but a stateless code sent while it did
		// not may still be alive.
		return "", s.verifyStateless(ctx, phone, code)
	case errors.Is(err, ErrNotFound):
		return "", Errorf(CodeNoActiveCode, "no code is waiting for this number (never sent, expired or already used)")
	case err != nil && s.statelessCodes() && !errors.Is(err, ErrOverloaded):
		s.log.DebugContext(ctx, "reading code failed: checking stateless codes", "phone", MaskPhone(phone.E164), "err", err)
		return "", s.verifyStateless(ctx, phone, code)
	case err != nil:
		s.log.Log(ctx, StoreFailureLevel(err), "reading code failed", "phone", MaskPhone(phone.E164), "err", err)
		return "", storeError(err)
	}
	if g.Attempts > s.policy.MaxVerifyAttempts {
		return "", s.tooManyAttempts(ctx, phone.E164)
	}
	if !hmac.Equal(g.MAC, s.mac(phone.E164, code)) {
		if s.statelessCodes() && s.recentStoreFailure(s.now()) {
			// The stored code may be one whose save timed out but ran,
			// while the SMS carried a stateless code. The guess is counted.
			if k, ok := s.matchStateless(phone.E164, code, s.now()); ok {
				return "", s.useStateless(ctx, phone, k)
			}
		}
		left := s.policy.MaxVerifyAttempts - g.Attempts
		if left == 0 { // this guess locked the code: the number is blocked until it expires
			s.lockCode(ctx, phone, g.VerificationID)
			s.noteBlock(ctx, Block{Phone: phone.E164, Country: phone.Region, Reason: CodeTooManyAttempts,
				Count: int64(g.Attempts), Until: s.now().Add(g.TTL)})
		}
		return "", &Error{Code: CodeWrongCode, Message: "the code is wrong", AttemptsLeft: &left}
	}
	consumed, err := s.codes.ConsumeCode(ctx, phone.E164, g.MAC, s.now())
	if err != nil {
		s.log.Log(ctx, StoreFailureLevel(err), "consuming code failed", "phone", MaskPhone(phone.E164), "err", err)
		return "", storeError(err)
	}
	switch consumed {
	case ConsumedOK:
		return g.VerificationID, nil
	case ConsumedLocked: // a concurrent wrong guess used the last attempt first
		return "", &Error{Code: CodeTooManyAttempts,
			Message: "too many wrong guesses; request a new code", RetryAfter: g.TTL}
	}
	return "", Errorf(CodeNoActiveCode, "the code was already used")
}

// lockCode marks the verification of a code that a wrong guess just
// locked max_attempts_reached. A lost mark is mended by the next guess,
// which the store refuses and marks (GuessCode).
func (s *OTP) lockCode(ctx context.Context, phone Phone, id string) {
	if id == "" {
		return
	}
	if err := s.codes.LockCode(context.WithoutCancel(ctx), phone.E164, id, s.now()); err != nil {
		s.log.WarnContext(ctx, "marking a locked verification failed", "phone", MaskPhone(phone.E164), "err", err)
	}
}

func (s *OTP) checkCodeFormat(code string) error {
	if len(code) != s.policy.CodeLength {
		return Errorf(CodeInvalidCode, "code must be %d digits", s.policy.CodeLength)
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return Errorf(CodeInvalidCode, "code must be %d digits", s.policy.CodeLength)
		}
	}
	return nil
}

// newCode draws a uniformly random code of CodeLength digits.
func (s *OTP) newCode() (string, error) {
	max := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(s.policy.CodeLength)), nil)
	n, err := rand.Int(s.random, max)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%0*d", s.policy.CodeLength, n), nil
}

// mac binds the code to the number, so a stored HMAC is useless for any
// other number and reveals nothing without the key.
func (s *OTP) mac(phone, code string) []byte {
	m := hmac.New(sha256.New, s.hmacKey)
	m.Write([]byte(phone))
	m.Write([]byte{0})
	m.Write([]byte(code))
	return m.Sum(nil)
}

// record hands the decision to the audit sink: outcome is ok's label on
// success and the refusal's code otherwise. Never the code itself.
func (s *OTP) record(ctx context.Context, action, ok string, phone Phone, ip string, err error) {
	outcome := ok
	if err != nil {
		outcome = string(ErrorCode(err))
	}
	var detail string
	if e, ok := errors.AsType[*Error](err); ok {
		detail = e.Usage
	}
	s.events.Record(Event{At: s.now(), Action: action, Outcome: outcome, Phone: phone.E164, Country: phone.Region, IP: ip,
		Detail: detail, TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
}

func (s *OTP) noteBlock(ctx context.Context, b Block) {
	if err := s.blocks.NoteBlock(context.WithoutCancel(ctx), b); err != nil {
		s.log.WarnContext(ctx, "noting a block failed", "phone", MaskPhone(b.Phone), "err", err)
	}
}
