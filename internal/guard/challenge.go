package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
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

// Confirmer is a Challenger whose solutions also need a provider's word
// (a CAPTCHA's siteverify). The send asks it last, once every limit that
// can refuse without it let the send through and the solution's single
// use is taken in the store: a limit's refusal costs no provider call, and
// a solution reaches the provider at most once, however often it is sent.
type Confirmer interface {
	// Confirm answers ErrBadSolution for a solution the provider refuses;
	// any other error is the provider's failure (down, slow, busy), which
	// refuses the send with 503.
	Confirm(ctx context.Context, solution, clientIP string) error
}

// ErrBadSolution is a challenge solution that does not hold.
var ErrBadSolution = errors.New("the challenge's solution does not hold")

// SolvedUse is what a VolumeTake of the solved tier adds: the solution's
// single-use key and how long it must live, and the country's velocity
// counts, whose baseline is the solved cap.
type SolvedUse struct {
	Used limit.Key // same hash tag as the VolumeTake's Key
	TTL  time.Duration
	Base limit.Key // the country's velocity counts (velocityKey); same hash tag
}

func solvedKey(region string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "solved"}
}

func solvedCutKey(region string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "solvedcut"}
}

func solutionKey(region, id string) limit.Key {
	return limit.Key{Space: "otp:vel", ID: region, Name: "used:" + id}
}

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

// challenging reports whether refused untrusted sends get a challenge.
func (s *OTP) challenging() bool {
	return s.challenger != nil && s.abuse.volumes != nil && // single use is kept in the store
		s.policy.Challenge.Type != ChallengeOff && s.policy.Challenge.Type != ""
}

// solvedTier checks the solution a send came with, as far as it can be
// checked without a provider (Challenger.Check): one that holds makes the
// send TierSolved, its provider's word still to come (confirmSolved); one
// that does not leaves it TierNew (the automatic rules then judge it, and
// may challenge it again). A verifier that fails refuses the send: 503
// challenge_unavailable, never an allow.
func (s *OTP) solvedTier(ctx context.Context, phone Phone, ip, solution string) (Tier, *Solution, error) {
	if solution == "" || !s.challenging() {
		return TierNew, nil, nil
	}
	sol, err := s.challenger.Check(ctx, phone.E164, solution, ip, s.now())
	switch {
	case errors.Is(err, ErrBadSolution):
		s.log.InfoContext(ctx, "challenge solution refused", "phone", MaskPhone(phone.E164), "err", err)
		return TierNew, nil, nil
	case err != nil:
		s.log.WarnContext(ctx, "challenge verifier failed", "err", err)
		return TierNew, nil, challengeUnavailable(err)
	}
	return TierSolved, &sol, nil
}

// confirmSolved asks the provider about a solved send's solution, when
// the challenger has one (Confirmer): after spend took every limit and the
// solution's single use (vol.Solved), before a code is made. A solution
// the provider refuses gets a new challenge, and the send keeps the
// number's and the address's limits spent (a refused token is a try, so a
// stream of them meets those limits as sends do) but gives back its budget
// and its solved count (giveBack); a provider that fails gives back all
// the send spent (503 challenge_unavailable: nothing was sent, and the
// user did nothing wrong). Either way the solution stays used.
func (s *OTP) confirmSolved(ctx context.Context, phone Phone, ip, solution string, vol *VolumeTake, sp spent) error {
	cf, ok := s.challenger.(Confirmer)
	if !ok || vol == nil || vol.Solved == nil {
		return nil
	}
	err := cf.Confirm(ctx, solution, ip)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrBadSolution):
		s.log.InfoContext(ctx, "challenge solution refused", "phone", MaskPhone(phone.E164), "err", err)
		s.giveBack(ctx, phone, sp, false)
		return s.newChallenge(ctx, phone, "the challenge's solution does not hold; solve the new challenge", err)
	}
	s.log.WarnContext(ctx, "challenge verifier failed", "err", err)
	s.refund(ctx, sp.takes)
	if !sp.velocityAt.IsZero() {
		s.refundVelocity(ctx, sp.velocity, sp.velocityAt)
	}
	return challengeUnavailable(err)
}

// challengeUnavailable is the refusal of a send whose challenge could not
// be checked.
func challengeUnavailable(err error) error {
	return &problem.Error{Code: problem.CodeChallengeUnavailable, RetryAfter: 5 * time.Second, Err: err,
		Message: "the challenge could not be checked; try again shortly"}
}

// automaticRefusal reports whether err is a refusal by an automatic rule,
// which a challenge may lift: not per number, per address, cooldown,
// budget or an operator's action.
func automaticRefusal(err error) bool {
	switch problem.CodeOf(err) {
	case problem.CodePrefixRateLimited, problem.CodeCountryRateLimited, problem.CodeUnusualVolume:
		return !errors.Is(err, errOperatorLimit)
	case problem.CodeDenied:
		return errors.Is(err, errAutomaticBlock)
	}
	return false
}

// challengeInstead turns an untrusted send's refusal by an automatic rule
// into 428 challenge_required with a new challenge for the number; any
// other refusal stays as it is.
func (s *OTP) challengeInstead(ctx context.Context, phone Phone, tier Tier, err error) error {
	if tier != TierNew || !s.challenging() || !automaticRefusal(err) {
		return err
	}
	return s.newChallenge(ctx, phone, "solve the challenge and send again with its solution", err)
}

// newChallenge is a 428 with a new challenge for phone; cause is kept for
// the log and the audit event.
func (s *OTP) newChallenge(ctx context.Context, phone Phone, msg string, cause error) error {
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

// solvedTake is the solved cap's count of one send: the velocity rule's
// mechanism on the solved tier's own counts, the solution's single-use key
// taken in the same atomic step.
func (s *OTP) solvedTake(phone Phone, sol *Solution) *VolumeTake {
	r := region(phone)
	t := s.volumeTake(phone)
	t.Key, t.Quarantine = solvedKey(r), solvedCutKey(r)
	t.Floor = s.policy.Challenge.Floor
	if t.Floor <= 0 {
		t.Floor = s.policy.CountryVelocity.floor(r)
	}
	t.QFloor, t.Factor, t.MinuteShare = max(1, t.Floor/10), 1, 0
	t.Solved = &SolvedUse{Used: solutionKey(r, sol.ID), TTL: max(time.Second, sol.Expires.Sub(t.Now)), Base: velocityKey(r)}
	return &t
}

// solvedDenied is the refusal of a solved send: its solution was used
// already (a new challenge), or the country's solved cap is spent.
func (s *OTP) solvedDenied(ctx context.Context, phone Phone, t VolumeTake, res VolumeResult) error {
	if res.Reused {
		return s.newChallenge(ctx, phone, "this solution was used already; solve the new challenge",
			problem.Errorf(problem.CodeChallengeRequired, "solution reused"))
	}
	if f := s.abuse.hooks.VelocityRefused; f != nil {
		f(region(phone))
	}
	retry := time.Unix((t.Hour+1)*3600, 0).Sub(t.Now)
	return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: retry, Usage: Usage(res.Count+1, res.Limit, time.Hour),
		Message: "unusually many challenged codes were sent to this country this hour; try again later"}
}

// cutSolved cuts a country's solved cap to a tenth (its solved sends are
// not verified).
func (s *OTP) cutSolved(ctx context.Context, region string) bool {
	if s.abuse.volumes == nil {
		return false
	}
	d := s.policy.Challenge.CutFor
	if d <= 0 {
		d = s.policy.CountryVelocity.QuarantineFor
	}
	if err := s.abuse.volumes.Quarantine(ctx, solvedCutKey(region), s.now().Add(d), d); err != nil {
		s.log.WarnContext(ctx, "challenge: cutting the solved cap failed", "country", region, "err", err)
		return false
	}
	return true
}

// The verification of a solved send carries a keyed mark in its ID (its
// last two bytes are a MAC of the others), so that its verify counts in
// the solved tier's conversion watch without a field in the code's record.
const solvedMarkLen = 2

func (s *OTP) solvedMark(b []byte) []byte {
	m := hmac.New(sha256.New, s.hmacKey)
	m.Write([]byte("otpguard solved verification\x00"))
	m.Write(b)
	return m.Sum(nil)[:solvedMarkLen]
}

// markSolved rewrites a new verification ID's last bytes into the mark.
func (s *OTP) markSolved(id string) string {
	b, err := hex.DecodeString(id[len(verificationIDPrefix):])
	if err != nil || len(b) <= solvedMarkLen {
		return id
	}
	n := len(b) - solvedMarkLen
	copy(b[n:], s.solvedMark(b[:n]))
	return verificationIDPrefix + hex.EncodeToString(b)
}

// solvedVerification reports whether id was issued to a solved send (one
// in 65,536 other IDs carries the mark by chance).
func (s *OTP) solvedVerification(id string) bool {
	if !ValidVerificationID(id) {
		return false
	}
	b, err := hex.DecodeString(id[len(verificationIDPrefix):])
	if err != nil {
		return false
	}
	n := len(b) - solvedMarkLen
	return hmac.Equal(b[n:], s.solvedMark(b[:n]))
}

// errOperatorLimit marks a refusal by a limit the ops desk's override set.
var errOperatorLimit = errors.New("a limit an operator's override set")

// errAutomaticBlock marks a deny-list entry the conversion watch made.
var errAutomaticBlock = fmt.Errorf("an automatic block (%s)", ConversionActor)
