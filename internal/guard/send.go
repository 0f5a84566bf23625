package guard

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// SendRequest asks for a code to be sent to Phone. ClientIP is the end user's
// address as the calling app saw it; empty means no per-IP limit applies.
type SendRequest struct {
	Phone    string
	ClientIP string
	// Challenge is the solution of the challenge a 428 challenge_required
	// answered (challenge.go); empty: none.
	Challenge string
	// Account: the calling app says the number belongs to an existing
	// account, so the send is trusted (trust.go). An app must set it only
	// for numbers it already knows, never for a number a sign-up typed.
	Account bool
}

// SendResult says where the code went and how long it lives.
type SendResult struct {
	Phone     Phone
	ExpiresIn time.Duration
	// VerificationID names the code's verification (pending); empty for a
	// stateless code, which has no record (verification.go).
	VerificationID string
	// Tier is the send's tier (trust.go).
	Tier Tier
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
	phone, ip, err := s.parseSend(req)
	if err != nil {
		s.record(ctx, ActionOTPSend, "", phone, CleanIP(req.ClientIP), err)
		return SendResult{}, err
	}
	res, err := s.send(limit.WithDecision(ctx), phone, ip, req.Challenge, req.Account)
	if _, lost := err.(*ClaimLost); lost {
		return res, err // a duplicate of a request that runs or ran: that one is recorded
	}
	s.recordTier(ctx, ActionOTPSend, OutcomeSent, phone, CleanIP(req.ClientIP), err, res.Tier)
	res.Phone = phone // on a refusal too: the caller's log names it (masked)
	return res, err
}

// send is the pipeline of a parsed send: its steps in order, each in the
// file of its concept, each returning here. The first refusal ends it.
func (s *OTP) send(ctx context.Context, phone Phone, ip, solution string, account bool) (SendResult, error) {
	// A solution that holds makes the send TierSolved (challenge.go).
	tier, sol, err := s.solvedTier(ctx, phone, ip, solution)
	if err != nil {
		return SendResult{}, err
	}
	// Who may receive codes at all: the deny-list (deny.go; the conversion
	// watch's automatic blocks spare a solved send and a trusted number),
	// then the paused, allowed countries and number types (pumping.go).
	if tier, err = s.checkDeniedTier(ctx, phone, tier, account); err != nil {
		return SendResult{}, s.challengeInstead(ctx, phone, tier, err)
	}
	if err := s.checkDestination(phone); err != nil {
		return SendResult{}, err
	}
	// Trust: the app's word, or the number's mark, read here or with the
	// limits below (trust.go); a trusted number outranks a solution.
	tier = max(tier, s.trustStep(ctx, phone, account))
	// The automatic abuse rules: per prefix, per country and the country
	// velocity rule, with the spend budget (pumping.go, velocity.go); a
	// solved send meets the solved cap instead (challenge.go), a trusted
	// one its tier's cap (trust.go).
	abuse := s.abuseRules(phone, tier, sol)
	// Spend the number's and the address's limits and the abuse rules' in
	// one round trip; a refusal refunds the rest (spend.go), and an
	// automatic rule's refusal of an untrusted send is a challenge instead
	// (challenge.go).
	spent, err := s.spend(ctx, phone, append(s.sendLimits(phone.E164, ip, len(abuse.limits)), abuse.limits...), abuse.velocity)
	if err != nil {
		return SendResult{}, s.challengeInstead(ctx, phone, tier, err)
	}
	// A CAPTCHA's token goes to its provider only now, once: every limit
	// let the send through and its single use is taken (challenge.go).
	if err := s.confirmSolved(ctx, phone, ip, solution, abuse.velocity, spent); err != nil {
		return SendResult{}, err
	}
	// A new code, saved as its HMAC, or a stateless one (code.go).
	code, err := s.issueCode(ctx, phone, tier)
	if err != nil {
		s.giveBack(ctx, phone, spent, false)
		return SendResult{}, err
	}
	// Hand it to the SMS provider (delivery.go).
	if err := s.deliver(ctx, phone, code, spent); err != nil {
		return SendResult{}, err
	}
	// Count it for the conversion watch (conversion.go).
	if spent.trusted { // the store found the number's mark (trust.go)
		tier = TierTrusted
	}
	s.watchSend(ctx, phone, tier)
	return SendResult{Phone: phone, ExpiresIn: code.ttl, VerificationID: code.id, Tier: tier}, nil
}
