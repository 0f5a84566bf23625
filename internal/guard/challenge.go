package guard

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// A challenge before a refusal (docs/abuse.md, "Challenges"). Where an
// automatic rule (a prefix or country limit, the country velocity rule and
// its quarantine, the conversion watch's automatic prefix blocks) would
// refuse an untrusted send, the caller gets 428 challenge_required with a
// Challenge to solve instead, and the send goes through when it comes back
// with the solution (SendRequest.Challenge). A solution is bound to the
// number it was issued for, expires, and is single-use across instances.
//
// A bot solves proof of work and a farm solves CAPTCHAs, so a solved
// challenge is a tier of its own (TierSolved), not trust: the automatic
// rules are replaced by the solved cap, per country and hour, which is the
// country's normal hourly volume of new numbers (the velocity rule's
// baseline) and at least a floor, and by a conversion watch of its own: a
// country whose solved sends are not verified has its solved cap cut to a
// tenth. Per-number, per-IP, cooldown, the spend budget and every operator
// action still refuse, and no challenge helps there.

// ChallengeType is which challenge a refused send gets.
type ChallengeType string

// The challenge types of otp.challenge.type.
const (
	ChallengePoW     ChallengeType = "pow"     // ALTCHA-style proof of work (the default)
	ChallengeCaptcha ChallengeType = "captcha" // a CAPTCHA provider's siteverify
	ChallengeOff     ChallengeType = "off"
)

// Defaults of otp.challenge.
const (
	DefaultChallengeMaxNumber = 100_000
	DefaultChallengeExpires   = 5 * time.Minute
	// MaxChallengeSolution bounds SendRequest.Challenge (bytes): a CAPTCHA
	// token is a few kilobytes at most.
	MaxChallengeSolution = 4096
)

// ChallengePolicy is otp.challenge.
type ChallengePolicy struct {
	Type ChallengeType
	// MaxNumber is the proof of work's difficulty: the solver tries up to
	// MaxNumber hashes, half of them on average.
	MaxNumber int64
	Expires   time.Duration
	// Floor is the solved cap of a country without history, per hour
	// (0: the country velocity rule's floor).
	Floor int64
	// CutFor is how long a cut of the solved cap lasts (0: the country
	// velocity rule's quarantine_for).
	CutFor time.Duration
}

// On reports whether the policy asks for challenges (a type other than
// off); the service asks only with a challenger and a store too.
func (c ChallengePolicy) On() bool { return c.Type != ChallengeOff && c.Type != "" }

// Challenge is what a client must solve. Type "pow": ALTCHA's fields
// (Algorithm, Challenge, Salt, MaxNumber, Signature); type "captcha": the
// provider's SiteKey and the signed ID the client sends back with the
// provider's token ("<id>.<token>").
type Challenge struct {
	Type      ChallengeType
	Algorithm string
	Challenge string
	Salt      string
	MaxNumber int64
	Signature string
	SiteKey   string
	ID        string
}

// Solution is a solution that held: ID names its single-use key, and it
// is good until Expires.
type Solution struct {
	ID      string
	Expires time.Time
}

// Challenger issues challenges bound to a number and checks their
// solutions (internal/challenge).
type Challenger interface {
	Issue(e164 string, now time.Time) (Challenge, error)
	// Check answers ErrBadSolution for a solution that does not hold
	// (malformed, another number's, expired, forged); any other error is
	// the verifier's failure, which refuses the send with 503. It asks
	// nobody: a provider's word is Confirmer's.
	Check(ctx context.Context, e164, solution, clientIP string, now time.Time) (Solution, error)
}

// ErrBadSolution is a challenge solution that does not hold.
var ErrBadSolution = errors.New("the challenge's solution does not hold")

// DefaultChallenge is otp.challenge when the policy file says nothing:
// proof of work, 100,000 at most (50,000 SHA-256 hashes on average: a
// wait of seconds in the user's browser, whose widget makes one WebCrypto
// call a hash; docs/abuse.md has the figures), 5 minutes to solve it.
func DefaultChallenge() ChallengePolicy {
	return ChallengePolicy{Type: ChallengePoW, MaxNumber: DefaultChallengeMaxNumber, Expires: DefaultChallengeExpires}
}

// validateChallenge checks otp.challenge.
func validateChallenge(c ChallengePolicy, bad func(string, string, ...any)) {
	switch c.Type {
	case "", ChallengeOff:
		return
	case ChallengePoW:
		if c.MaxNumber < 1000 || c.MaxNumber > 100_000_000 {
			bad("otp.challenge.max_number", "must be between 1000 and 100000000, got %d", c.MaxNumber)
		}
	case ChallengeCaptcha:
	default:
		bad("otp.challenge.type", "must be pow, captcha or off, got %q", c.Type)
		return
	}
	if c.Expires < 10*time.Second || c.Expires > time.Hour {
		bad("otp.challenge.expires", "must be between 10s and 1h, got %s", c.Expires)
	}
	if c.Floor < 0 || c.Floor > maxLimit {
		bad("otp.challenge.floor", "must be between 0 (the country velocity floor) and %d, got %d", maxLimit, c.Floor)
	}
	if c.CutFor < 0 || c.CutFor > maxWindow {
		bad("otp.challenge.cut_for", "must be between 0 (quarantine_for) and %s, got %s", maxWindow, c.CutFor)
	}
}

// challenges is what a send does with challenges: it checks the solution
// a send came with, asks the provider about it last, and answers a refusal
// an automatic rule made with a new challenge.
type challenges struct {
	challenger Challenger
	// on: refused untrusted sends get a challenge (a challenger, a type
	// that is not off, and a volume store to keep a solution's single use).
	on    bool
	spend *spender // what a send the provider refused gives back
	risk  *risk    // the network's risk score, asked before a challenge (riskstep.go)
	log   *slog.Logger
	now   func() time.Time
}

// challengeInstead turns an untrusted send's refusal by an automatic rule
// into 428 challenge_required with a new challenge for the number; any
// other refusal stays as it is.
func (s *challenges) challengeInstead(ctx context.Context, phone Phone, tier Tier, err error) error {
	if tier != TierNew || !s.on || !automaticRefusal(err) {
		return err
	}
	return s.newChallenge(ctx, phone, "solve the challenge and send again with its solution", err)
}

// newChallenge is a 428 with a new challenge for phone; cause is kept for
// the log and the audit event.
func (s *challenges) newChallenge(ctx context.Context, phone Phone, msg string, cause error) error {
	c, ierr := s.challenger.Issue(phone.E164, s.now())
	if ierr != nil {
		s.log.WarnContext(ctx, "issuing a challenge failed", "err", ierr)
		return cause
	}
	e := &problem.Error{Code: problem.CodeChallengeRequired, Message: msg, Challenge: &c, Err: cause}
	var ce *problem.Error
	if errors.As(cause, &ce) {
		e.Usage = ce.Usage
	}
	return e
}
