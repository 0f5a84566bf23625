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
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// issued is a code made for a send: its digits, its life, its
// verification ("" for a stateless code) and the service that owns it.
type issued struct {
	text    string
	ttl     time.Duration
	id      string
	service string
}

// codebook makes the codes of sends and checks the guesses of verifies.
type codebook struct {
	policies  *servicePolicies // each service's code length, life and guesses
	codes     Codes
	states    CodeReader // nil: Inspect does not read the code
	random    io.Reader
	hmacKey   []byte
	counter   limit.Counter // a locked code's wait (newCodeIn)
	stateless *stateless
	marks     tierMarks
	audit     *audit // a lock-out's block
	log       *slog.Logger
	now       func() time.Time
}

// issuing is how a send's code is issued beyond its request: whether it
// fell back (fallback.go), and its place in the vouched tier to take
// beside the save (nil: none).
type issuing struct {
	fellBack bool
	beside   *vouchedPlace
	// policy is the send's service's (servicepolicy.go): its code's
	// length, life and guesses.
	policy *servicePolicy
}

// issueCode makes the code to send. A random code, saved as its HMAC with
// a new verification (whose id it returns), when the store takes it;
// otherwise, unless the policy is closed, the stateless code of the
// current step, which needs no store and has no verification (id "").
// A code of a named service (service.go) is saved as that service's, and
// is never stateless: a stateless code has no record to say whose it is.
// Its record keeps the channel it goes by (req.Channel). A fallback
// send's (how.fellBack, fallback.go) is marked as such.
//
// A low-scored send's place in the vouched tier (how.beside; nil: none)
// is taken beside the save, one round trip for both (vouchedplace.go);
// when it is refused, the code saved beside it is deleted and the
// place's answer is the send's.
func (s *codebook) issueCode(ctx context.Context, phone Phone, tier Tier, req SendRequest, how issuing) (issued, error) {
	service, beside, p := req.Service, how.beside, how.policy
	code, err := newCode(s.random, p.CodeLength)
	if err != nil {
		return issued{}, fmt.Errorf("otp: new code: %w", err)
	}
	mac := s.mac(phone.E164, service, code)
	id, err := newVerificationID(s.random)
	if err != nil {
		return issued{}, err
	}
	// Its verify is credited to the tier the send counted in (tiermark.go).
	id = s.marks.apply(id, tier)
	if how.fellBack && tier == TierNew {
		id = s.marks.applyFallback(id)
	}
	ttl := p.CodeTTL
	var placed sync.WaitGroup
	var refused error
	if beside != nil {
		placed.Go(func() { refused = beside.take(ctx) })
	}
	prev, err := s.codes.SaveCode(ctx, NewCode{Phone: phone.E164, MAC: mac, TTL: ttl,
		VerificationID: id, MaxAttempts: p.MaxVerifyAttempts, Now: s.now(), Retention: VerificationRetention,
		Service: service, Channel: req.Channel})
	placed.Wait()
	if errors.Is(err, ErrUnindexed) { // saved, but GET /otp/verifications/{id} cannot find it: no id
		s.log.DebugContext(ctx, "code saved without its verification id's index", "phone", MaskPhone(phone.E164), "err", err)
		id, err = "", nil
	}
	if err == nil && prev >= p.MaxVerifyAttempts { // it replaced a locked code: the lock-out is over
		if err := s.audit.blocks.EndBlock(context.WithoutCancel(ctx), phone.E164, problem.CodeTooManyAttempts); err != nil {
			s.log.WarnContext(ctx, "ending a lock-out block failed", "phone", MaskPhone(phone.E164), "err", err)
		}
	}
	if refused != nil { // the vouched tier refused the place: the code never leaves
		if err == nil {
			if err := s.codes.DeleteCode(context.WithoutCancel(ctx), phone.E164, service); err != nil {
				s.log.WarnContext(ctx, "deleting a code the vouched tier refused failed", "phone", MaskPhone(phone.E164), "err", err)
			}
		}
		return issued{}, refused
	}
	if err == nil {
		return issued{text: code, ttl: ttl, id: id, service: service}, nil
	}
	// Overload is not an outage: no stateless code.
	if !errors.Is(err, problem.ErrOverloaded) && service == DefaultService {
		if code, ttl, ok := s.stateless.current(phone.E164, s.now()); ok {
			// Debug: the breaker and the policy log the outage once, not per send.
			s.log.DebugContext(ctx, "saving code failed: sending a stateless code", "phone", MaskPhone(phone.E164), "err", err)
			return issued{text: code, ttl: ttl}, nil
		}
	}
	s.log.Log(ctx, limit.StoreFailureLevel(err), "saving code failed", "phone", MaskPhone(phone.E164), "err", err)
	return issued{}, limit.StoreError(err)
}

// checkCodeFormat refuses a guess that is not the CodeLength digits of
// service's policy.
func (s *codebook) checkCodeFormat(service, code string) error {
	n := s.policies.of(service).CodeLength
	if len(code) != n {
		return problem.Errorf(problem.CodeInvalidCode, "code must be %d digits", n)
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return problem.Errorf(problem.CodeInvalidCode, "code must be %d digits", n)
		}
	}
	return nil
}

// newCode draws a uniformly random code of length digits.
func newCode(random io.Reader, length int) (string, error) {
	max := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(length)), nil)
	n, err := rand.Int(random, max)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%0*d", length, n), nil
}

// mac binds the code to the number, so a stored HMAC is useless for any
// other number and reveals nothing without the key; and a named service's
// code to its service, so that consuming one service's code can never
// consume another's with the same digits. The default service's is the
// MAC of number and code alone, as before services.
func (s *codebook) mac(phone, service, code string) []byte {
	m := hmac.New(sha256.New, s.hmacKey)
	m.Write([]byte(phone))
	m.Write([]byte{0})
	m.Write([]byte(code))
	if service != DefaultService {
		m.Write([]byte{0})
		m.Write([]byte(service))
	}
	return m.Sum(nil)
}

// verify checks code, a guess of of's service (and verification), and
// returns the verification it approved ("" for a stateless code, which
// only the default service has).
func (s *codebook) verify(ctx context.Context, phone Phone, code string, of GuessOf) (string, error) {
	g, err := s.codes.GuessCode(ctx, phone.E164, of, s.now())
	stateless := s.stateless.on() && of.Service == DefaultService && of.VerificationID == ""
	switch {
	case errors.Is(err, ErrNotFound) && stateless && s.stateless.recentFailure(s.now()):
		// Redis answers again, but a stateless code sent while it did
		// not may still be alive.
		return "", s.stateless.verify(ctx, phone, code)
	case errors.Is(err, ErrNotFound):
		return "", problem.Errorf(problem.CodeNoActiveCode, "no code is waiting for this number (never sent, expired or already used)")
	case err != nil && stateless && !errors.Is(err, problem.ErrOverloaded):
		s.log.DebugContext(ctx, "reading code failed: checking stateless codes", "phone", MaskPhone(phone.E164), "err", err)
		return "", s.stateless.verify(ctx, phone, code)
	case err != nil:
		s.log.Log(ctx, limit.StoreFailureLevel(err), "reading code failed", "phone", MaskPhone(phone.E164), "err", err)
		return "", limit.StoreError(err)
	}
	p := s.policies.of(of.Service)
	if g.Attempts > p.MaxVerifyAttempts {
		return "", s.tooManyAttempts(ctx, phone)
	}
	if !hmac.Equal(g.MAC, s.mac(phone.E164, of.Service, code)) {
		if stateless && s.stateless.recentFailure(s.now()) {
			// The stored code may be one whose save timed out but ran,
			// while the SMS carried a stateless code. The guess is counted.
			if k, ok := s.stateless.match(phone.E164, code, s.now()); ok {
				return "", s.stateless.use(ctx, phone, k)
			}
		}
		left := p.MaxVerifyAttempts - g.Attempts
		if left == 0 { // this guess locked the code: the number is blocked until it expires
			s.lockCode(ctx, phone, of.Service, g.VerificationID)
			s.audit.noteBlock(ctx, Block{Phone: phone.E164, Country: phone.Region, Reason: problem.CodeTooManyAttempts,
				Count: int64(g.Attempts), Until: s.now().Add(g.TTL)})
		}
		return "", &problem.Error{Code: problem.CodeWrongCode, Message: "the code is wrong", AttemptsLeft: &left,
			VerificationID: g.VerificationID}
	}
	consumed, err := s.codes.ConsumeCode(ctx, phone.E164, of.Service, g.MAC, s.now())
	if err != nil {
		s.log.Log(ctx, limit.StoreFailureLevel(err), "consuming code failed", "phone", MaskPhone(phone.E164), "err", err)
		return "", limit.StoreError(err)
	}
	switch consumed {
	case ConsumedOK:
		return g.VerificationID, nil
	case ConsumedLocked: // a concurrent wrong guess used the last attempt first
		return "", &problem.Error{Code: problem.CodeTooManyAttempts,
			Message: "too many wrong guesses; request a new code", RetryAfter: g.TTL}
	}
	return "", problem.Errorf(problem.CodeNoActiveCode, "the code was already used")
}

// lockCode marks the verification of a code that a wrong guess just
// locked max_attempts_reached. A lost mark is mended by the next guess,
// which the store refuses and marks (GuessCode).
func (s *codebook) lockCode(ctx context.Context, phone Phone, service, id string) {
	if id == "" {
		return
	}
	if err := s.codes.LockCode(context.WithoutCancel(ctx), phone.E164, service, id, s.now()); err != nil {
		s.log.WarnContext(ctx, "marking a locked verification failed", "phone", MaskPhone(phone.E164), "err", err)
	}
}
