package guard

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
)

// SendCounter is a Counter that takes an OTP send's limits and its
// country velocity count together: in one round trip on a single Redis
// (one MULTI/EXEC), one per hash slot in parallel on Redis Cluster. Each
// limit and the velocity count stay their own atomic unit; the caller
// refunds what a denied send must not keep (spender.spend).
type SendCounter interface {
	// TakeSend is Take, plus vol (when not nil) in the same round trip.
	// The VolumeResult is nil when vol was not taken: the store could not
	// answer and the fallback decided the takes (the rule is not judged
	// then), or vol was nil.
	TakeSend(ctx context.Context, takes []limit.Take, vol *VolumeTake) ([]limit.Result, *VolumeResult, error)
}

// Guess is a stored code as seen by one verify attempt.
type Guess struct {
	MAC      []byte        // HMAC of the code; the code itself is never stored
	Attempts int           // guesses so far, this one included
	TTL      time.Duration // how long the code stays alive
	// VerificationID is the verification the code belongs to; empty for a
	// code saved before verifications existed.
	VerificationID string
}

// NewCode is a code to save: its HMAC and life, and the verification
// record created with it (verification.go).
type NewCode struct {
	Phone          string // E.164
	MAC            []byte
	TTL            time.Duration
	VerificationID string
	MaxAttempts    int
	Now            time.Time     // created_at
	Retention      time.Duration // how long the verification record is kept
	// Service owns the code and its verification ("" the default
	// service, service.go): only its guesses count against the code.
	Service string
	// Channel is how the code goes (channel.go), kept in its record.
	Channel string
}

// GuessOf says whose guess it is: the service guessing ("" the default
// service) and, when set, the verification it guesses for. A live code
// of another service, or of another verification, is not found, and its
// guesses are not counted: one service cannot spend, or lock, another's
// code.
type GuessOf struct {
	Service        string
	VerificationID string
}

// Codes stores OTP codes, as HMACs, one live code per number and service
// (service.go: a service's send never replaces another's code), each with
// its verification record; a code and its record change together, in one
// atomic step.
type Codes interface {
	// SaveCode replaces the number's code of c.Service, with a fresh guess count, and
	// creates its verification (pending); a pending verification of the
	// replaced code is canceled. It returns the guesses counted against the
	// code it replaced (0 if none).
	SaveCode(ctx context.Context, c NewCode) (prevAttempts int, err error)
	// GuessCode counts one guess atomically (on the verification too) and
	// returns the stored code; ErrNotFound when the number has no live
	// code of the guess's service (and verification, when named).
	GuessCode(ctx context.Context, phone string, of GuessOf, now time.Time) (Guess, error)
	// ConsumeCode deletes service's code if it is still mac and its verification
	// is still pending, and approves the verification; otherwise it says
	// why not.
	ConsumeCode(ctx context.Context, phone, service string, mac []byte, now time.Time) (Consumed, error)
	// DeleteCode removes the number's code of service, if any, and its
	// verification.
	DeleteCode(ctx context.Context, phone, service string) error
	// LockCode marks the verification id, if it is still the number's
	// live code of service and pending, max_attempts_reached.
	LockCode(ctx context.Context, phone, service, id string, now time.Time) error
}

// Consumed is what ConsumeCode did.
type Consumed int

// The outcomes of ConsumeCode.
const (
	ConsumedNot    Consumed = iota // the code is gone or was replaced
	ConsumedOK                     // consumed: its verification is approved
	ConsumedLocked                 // the verification is no longer pending (locked by a concurrent wrong guess)
)
