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
	return &OTP{
		policy: o.Policy, counter: o.Counter, codes: o.Codes, sender: o.Sender,
		hmacKey: o.HMACKey, log: o.Logger, random: o.Random,
		deny: o.Deny, events: o.Events, blocks: o.Blocks, now: o.Now,
		lastStoreFailure: o.LastStoreFailure, abuse: newAbuseState(o),
		deliveries: o.Deliveries,
	}
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
}

// Send checks the limits, stores a new code's HMAC and sends the code.
//
// Counting rule: the limits are checked in order cooldown, per number, per
// IP, each an atomic fixed-window hit. The counter that denies keeps the
// attempt; the counters passed before it are refunded, so a denied request
// spends no other budget. A send the provider then fails still counts: the
// provider may have delivered it.
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
	res, err := s.send(withDecision(ctx), phone, ip)
	s.record(ctx, ActionOTPSend, OutcomeSent, phone, CleanIP(req.ClientIP), err)
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
	passed, err := s.spend(ctx, phone, append(s.sendLimits(phone.E164, ip), s.abuseLimits(phone, safe)...))
	if err != nil {
		return SendResult{}, err
	}
	// The country velocity rule comes last: it counts only sends that
	// every other limit let through, so its hours hold sends, not attempts.
	var velAt time.Time
	counted := false
	// Not when the fallback decided a limit (the breaker is open or the
	// store failed in this decision): the rule is not judged then, and the
	// send does not wait on the store again.
	if s.velocityOn(safe) && !slices.ContainsFunc(passed, func(t Take) bool { return t.Fallback }) {
		counted, velAt, err = s.takeVelocity(ctx, phone)
		if err != nil {
			s.refund(ctx, passed)
			return SendResult{}, err
		}
	}
	notSent := func() { // nothing left: the budget and the country's hour get it back
		s.refund(ctx, budgetTakes(passed))
		if counted {
			s.refundVelocity(ctx, phone, velAt)
		}
	}

	code, ttl, saved, err := s.issueCode(ctx, phone)
	if err != nil {
		notSent()
		return SendResult{}, err
	}
	body := strings.ReplaceAll(s.policy.Message, "{code}", code)
	if err := s.sender.Send(ctx, Message{To: phone.E164, Body: body}); err != nil {
		// The code was never delivered (as far as we know): do not leave it
		// guessable. The send limits stay spent. (A stateless code cannot
		// be taken back; it dies with its step.)
		if saved {
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
	return SendResult{Phone: phone, ExpiresIn: ttl}, nil
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

// spend takes the limits one by one; on the first denial it refunds those
// already passed and returns the denial. One at a time because each limit
// is its own atomic unit (and, on Redis Cluster, its own slot). It returns
// the takes passed.
func (s *OTP) spend(ctx context.Context, phone Phone, limits []limitedTake) ([]Take, error) {
	var passed []Take
	for _, l := range limits {
		res, err := s.counter.Take(ctx, []Take{l.take})
		if err == nil && len(res) != 1 {
			err = fmt.Errorf("otp: store answered %d results for 1 take", len(res))
		}
		if err != nil {
			s.refund(ctx, passed)
			s.log.Log(ctx, StoreFailureLevel(err), "limit store failed", "limit", l.take.Key.Name, "err", err)
			return nil, storeError(err)
		}
		if !res[0].Allowed {
			if l.refundDenied && res[0].Spent {
				t := l.take
				t.Fallback = res[0].Fallback
				passed = append(passed, t)
			}
			s.refund(ctx, passed)
			if l.denial == CodeBudgetExhausted {
				s.budgetRefused(ctx, l.take.Key, res[0])
			}
			// The number is blocked, not just its address. (Not noted when
			// the fallback decided: the block index lives in the store.)
			if l.take.Key.Space == "otp" && !res[0].Fallback {
				s.noteBlock(ctx, Block{Phone: phone.E164, Country: phone.Region, Reason: l.denial,
					Count: res[0].Count, Until: s.now().Add(res[0].RetryAfter)})
			}
			return nil, &Error{Code: l.denial, Message: l.what, RetryAfter: res[0].RetryAfter, Usage: Usage(res[0].Count, l.take.Limit, l.take.Window)}
		}
		t := l.take
		t.Fallback = res[0].Fallback // its refund goes where it was counted
		passed = append(passed, t)
	}
	return passed, nil
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
// code is refused) until a new one is sent.
func (s *OTP) Verify(ctx context.Context, req VerifyRequest) (Phone, error) {
	phone, err := ParsePhone(req.Phone, s.policy.DefaultRegion)
	if err == nil {
		err = s.checkCodeFormat(req.Code)
	}
	if err != nil {
		s.record(ctx, ActionOTPVerify, "", phone, "", err)
		return Phone{}, err
	}
	ctx = withDecision(ctx)
	err = s.verify(ctx, phone, req.Code)
	s.record(ctx, ActionOTPVerify, OutcomeValid, phone, "", err)
	if err != nil {
		return Phone{}, err
	}
	s.watchVerify(ctx, phone)
	s.creditVerify(ctx, phone)
	return phone, nil
}

func (s *OTP) verify(ctx context.Context, phone Phone, code string) error {
	g, err := s.codes.GuessCode(ctx, phone.E164)
	switch {
	case errors.Is(err, ErrNotFound) && s.statelessCodes() && s.recentStoreFailure(s.now()):
		// Redis answers again, but a stateless code sent while it did
		// not may still be alive.
		return s.verifyStateless(ctx, phone, code)
	case errors.Is(err, ErrNotFound):
		return Errorf(CodeNoActiveCode, "no code is waiting for this number (never sent, expired or already used)")
	case err != nil && s.statelessCodes() && !errors.Is(err, ErrOverloaded):
		s.log.DebugContext(ctx, "reading code failed: checking stateless codes", "phone", MaskPhone(phone.E164), "err", err)
		return s.verifyStateless(ctx, phone, code)
	case err != nil:
		s.log.Log(ctx, StoreFailureLevel(err), "reading code failed", "phone", MaskPhone(phone.E164), "err", err)
		return storeError(err)
	}
	if g.Attempts > s.policy.MaxVerifyAttempts {
		return &Error{Code: CodeTooManyAttempts,
			Message: "too many wrong guesses; request a new code", RetryAfter: g.TTL}
	}
	if !hmac.Equal(g.MAC, s.mac(phone.E164, code)) {
		if s.statelessCodes() && s.recentStoreFailure(s.now()) {
			// The stored code may be one whose save timed out but ran,
			// while the SMS carried a stateless code. The guess is counted.
			if k, ok := s.matchStateless(phone.E164, code, s.now()); ok {
				return s.useStateless(ctx, phone, k)
			}
		}
		left := s.policy.MaxVerifyAttempts - g.Attempts
		if left == 0 { // this guess locked the code: the number is blocked until it expires
			s.noteBlock(ctx, Block{Phone: phone.E164, Country: phone.Region, Reason: CodeTooManyAttempts,
				Count: int64(g.Attempts), Until: s.now().Add(g.TTL)})
		}
		return &Error{Code: CodeWrongCode, Message: "the code is wrong", AttemptsLeft: &left}
	}
	ok, err := s.codes.ConsumeCode(ctx, phone.E164, g.MAC)
	if err != nil {
		s.log.Log(ctx, StoreFailureLevel(err), "consuming code failed", "phone", MaskPhone(phone.E164), "err", err)
		return storeError(err)
	}
	if !ok {
		return Errorf(CodeNoActiveCode, "the code was already used")
	}
	return nil
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
		Detail: detail, TraceID: TraceID(ctx)})
}

func (s *OTP) noteBlock(ctx context.Context, b Block) {
	if err := s.blocks.NoteBlock(context.WithoutCancel(ctx), b); err != nil {
		s.log.WarnContext(ctx, "noting a block failed", "phone", MaskPhone(b.Phone), "err", err)
	}
}
