package guard

import (
	"context"
	"time"
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
	// Service sends the code ("" the default service, service.go): it
	// owns the verification. Every limit counts as for any other send.
	Service string
	// Locale is the language of the SMS (locale.go): one of
	// SupportedLocales, in any case; "" the language of the number's
	// country (numberlocale.go), else the policy's otp.message.
	Locale string
	// Channel is how the code goes (channel.go): ChannelSMS ("" too),
	// ChannelWhatsApp or ChannelCall, if this deployment offers it.
	Channel string
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
	// Locale is the language of the text sent (delivery.go's text): the
	// locale whose template it was, "en" for the built-in otp.message, ""
	// for a deployment's own.
	Locale string
	// Channel is the channel the code went by.
	Channel string
}

// send is the pipeline of a parsed send: its steps in order, each in the
// file of its concept, each returning here. The first refusal ends it.
//
// pol is the policy of the send's service (servicepolicy.go): its
// channels, its number's limits and budget, its code and its text.
func (s *OTP) send(ctx context.Context, pol *servicePolicy, phone Phone, ip string, req SendRequest) (SendResult, error) {
	solution, account := req.Challenge, req.Account
	// A send by the fallback channel meets none of the automatic rules
	// (fallback.go): a solution does nothing for it.
	unheld := pol.fallback != "" && req.Channel == pol.fallback
	if unheld {
		solution = ""
	}
	// A solution that holds makes the send TierSolved (challenge.go).
	tier, sol, err := s.challenges.solvedTier(ctx, phone, ip, solution)
	if err != nil {
		return SendResult{}, err
	}
	// Who may receive codes at all: the deny-list (deny.go; the conversion
	// watch's automatic blocks spare a solved send, a trusted number and
	// the fallback channel), then the paused, allowed countries and number
	// types (pumping.go).
	if tier, err = s.deny.checkDeniedTier(ctx, phone, tier, account); err != nil && !(unheld && automaticRefusal(err)) {
		return SendResult{}, s.challenges.challengeInstead(ctx, phone, tier, err)
	}
	if err := s.pumping.checkDestination(phone); err != nil {
		return SendResult{}, err
	}
	// Trust: the app's word, or the number's mark, read here or with the
	// limits below (trust.go); a trusted number outranks a solution.
	tier = max(tier, s.trust.step(ctx, phone, account))
	// The automatic abuse rules: per prefix, per country and the country
	// velocity rule, with the spend budget (pumping.go, velocity.go); a
	// solved send meets the solved cap instead (challenge.go), a trusted
	// one its tier's cap (trust.go). An opt-in country's untrusted send
	// has its risk score judged first (riskstep.go). The fallback
	// channel's send keeps only the ops desk's limits and the budget.
	abuse := s.pumping.unheldRules(phone)
	if !unheld {
		abuse = s.risk.before(ctx, phone, tier, s.pumping.abuseRules(phone, tier, sol))
	}
	// Its place in the lookup budget, taken beside the spend for a
	// refusal's score, is settled before the answer leaves (riskstep.go).
	defer abuse.lookup.wait(ctx)
	// Spend the number's and the address's limits and the abuse rules' in
	// one round trip; a refusal refunds the rest (spend.go), and an
	// automatic rule's refusal asks the risk score, then is a challenge
	// for an untrusted send (challenge.go); a low score lets the send on
	// in the vouched tier, its place taken with the code (refusal.go).
	abuse.channel, abuse.policy = req.Channel, pol
	spent, err := s.spend.spend(ctx, phone, ip, abuse)
	if err != nil {
		if spent, err = s.challenges.refused(ctx, phone, ip, tier, spent, err); err != nil {
			return SendResult{}, err
		}
	} else if err := s.risk.contested(ctx, phone, spent); err != nil {
		// A contested room's place, taken by a number the network scores
		// high, goes back to the room (contested.go).
		return SendResult{}, err
	}
	// A CAPTCHA's token goes to its provider only now, once: every limit
	// let the send through and its single use is taken (challenge.go).
	if err := s.challenges.confirmSolved(ctx, phone, ip, solution, abuse.velocity, spent); err != nil {
		return SendResult{}, err
	}
	if spent.trusted { // the store found the number's mark (trust.go)
		tier = TierTrusted
	}
	// A new code, saved as its HMAC, or a stateless one; its verification
	// carries the tier, for its verify's credit (code.go). A low-scored
	// send's place in the vouched tier is taken beside the save.
	code, err := s.codes.issueCode(ctx, phone, tier, req, issuing{fellBack: unheld, beside: spent.vouched, policy: pol})
	if err != nil {
		s.spend.giveBack(ctx, phone, spent, false)
		return SendResult{}, err
	}
	// Hand it to the provider of its channel (delivery.go), in the
	// language asked for, else the number's country's (numberlocale.go).
	t := pol.messages.pick(req.Locale, phone.Region)
	if err := s.courier.deliver(ctx, phone, code, spent, t, req.Channel); err != nil {
		return SendResult{}, err
	}
	// Count it for the conversion watch (conversion.go), unless the
	// automatic rules spared it.
	if !unheld {
		s.watch.send(ctx, phone, tier)
	}
	return SendResult{Phone: phone, ExpiresIn: code.ttl, VerificationID: code.id, Tier: tier, Locale: t.locale, Channel: req.Channel}, nil
}
