package guard

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// The verification lifecycle. Every code saved in the store is one
// verification, named by an opaque, unguessable id ("VE" and 32 hex
// digits, 128 bits from crypto/rand): it is pending while its code can be
// verified, and ends exactly once, in the same atomic step (one Lua script
// on the number's hash slot) that changes the code:
//
//	pending -> approved              a right guess consumed the code
//	pending -> canceled              POST /otp/verifications/{id}/cancel deleted the code,
//	                                 or a new send to the number replaced it (superseded)
//	pending -> max_attempts_reached  a wrong guess used the last attempt (the code is locked)
//	pending -> expired               the code's TTL passed (derived on read: the code is gone
//	                                 while the record still says pending)
//
// The records are kept VerificationRetention after they were created,
// then Redis drops them (GET answers 404). A stateless code (sent during a
// Redis outage, statelesscode.go) has no record: it cannot have one while
// the store is away, and its send answers no verification_id.

// VerificationRetention is how long a verification record (and the id's
// mapping to its number) is kept after it was created.
const VerificationRetention = 24 * time.Hour

// VerificationStatus is where a verification is in its lifecycle.
type VerificationStatus string

// The statuses of a verification (Twilio Verify's names).
const (
	StatusPending     VerificationStatus = "pending"
	StatusApproved    VerificationStatus = "approved"
	StatusCanceled    VerificationStatus = "canceled"
	StatusExpired     VerificationStatus = "expired"
	StatusMaxAttempts VerificationStatus = "max_attempts_reached"
)

// Verification is one code's record.
type Verification struct {
	ID                              string
	Phone                           string // E.164
	Status                          VerificationStatus
	CreatedAt, UpdatedAt, ExpiresAt time.Time
	// Attempts counts the guesses compared with the code, at most
	// MaxAttempts (max_verify_attempts when the code was sent).
	Attempts, MaxAttempts int
	// Service owns the verification ("" the default service, service.go).
	Service string
	// Channel is how its code went (channel.go): ChannelSMS unless it
	// says otherwise.
	Channel string
}

// Verifications reads and cancels verification records.
type Verifications interface {
	// Verification returns the record of id, its status derived
	// (expired); ErrNotFound when there is none (never was, or older than
	// the retention).
	Verification(ctx context.Context, id string) (Verification, error)
	// EndVerification deletes the code of e.ID and marks it e.Status
	// (canceled or approved) if it is pending; ended says whether it did.
	// The record returned is the current one either way; a record of
	// another service than e.Service is ErrNotFound.
	EndVerification(ctx context.Context, e Ending, now time.Time) (v Verification, ended bool, err error)
}

// Ending is an app's end of a pending verification: canceled, or
// approved without a code (Verify's "Status=approved": the app verified
// the user by other means).
type Ending struct {
	ID      string
	Service string // "" the default service
	Status  VerificationStatus
}

// verificationIDPrefix starts every id (Twilio's are "VE" and 32 hex digits).
const verificationIDPrefix = "VE"

// newVerificationID draws an id from r (crypto/rand).
func newVerificationID(r io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("otp: new verification id: %w", err)
	}
	return verificationIDPrefix + hex.EncodeToString(b[:]), nil
}

// ValidVerificationID reports whether id has the shape of an id otpguard
// makes; anything else cannot name a verification.
func ValidVerificationID(id string) bool {
	if len(id) != len(verificationIDPrefix)+32 || id[:2] != verificationIDPrefix {
		return false
	}
	for _, c := range id[2:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func verificationNotFound() *problem.Error {
	return problem.Errorf(problem.CodeVerificationNotFound, "no such verification (never created, or older than its retention)")
}

// verificationRecords reads and cancels the records of verifications.
type verificationRecords struct {
	store Verifications // nil: GET and cancel answer 404
	audit *audit
	log   *slog.Logger
	now   func() time.Time
}

// get returns the verification id of service: another service's is not
// found, as if it did not exist.
func (s *verificationRecords) get(ctx context.Context, service, id string) (Verification, error) {
	if !ValidVerificationID(id) || s.store == nil {
		return Verification{}, verificationNotFound()
	}
	v, err := s.store.Verification(ctx, id)
	if err != nil {
		return Verification{}, s.verificationError(ctx, err)
	}
	if v.Service != service {
		return Verification{}, verificationNotFound()
	}
	return v, nil
}

// end kills the code of a pending verification of service and marks it
// canceled, or approved. A verification that is no longer pending is
// refused with verification_not_pending and its status: an approved code
// cannot be canceled, nor a canceled one approved (the store decides both
// in one atomic step). Another service's verification is not found, in
// the same step. An approval without a code is audited as otp.approve and
// credits nothing: no trust mark, no conversion, no baseline (no code was
// proved).
func (s *verificationRecords) end(ctx context.Context, service, id string, status VerificationStatus) (Verification, error) {
	if !ValidVerificationID(id) || s.store == nil {
		return Verification{}, verificationNotFound()
	}
	action, outcome := ActionOTPCancel, OutcomeCanceled
	if status == StatusApproved {
		action, outcome = ActionOTPApprove, OutcomeApproved
	}
	v, ended, err := s.store.EndVerification(ctx, Ending{ID: id, Service: service, Status: status}, s.now())
	if err != nil {
		return Verification{}, s.verificationError(ctx, err)
	}
	phone := Phone{E164: v.Phone}
	if p, perr := ParsePhone(v.Phone, ""); perr == nil {
		phone = p
	}
	if !ended {
		err = &problem.Error{Code: problem.CodeVerificationNotPending, VerificationStatus: string(v.Status),
			Message: fmt.Sprintf("the verification is %s, not pending", v.Status)}
		s.audit.record(ctx, action, "", phone, "", service, err)
		return v, err
	}
	s.audit.record(ctx, action, outcome, phone, "", service, nil)
	return v, nil
}

func (s *verificationRecords) verificationError(ctx context.Context, err error) error {
	if errors.Is(err, ErrNotFound) {
		return verificationNotFound()
	}
	s.log.Log(ctx, limit.StoreFailureLevel(err), "reading a verification failed", "err", err)
	return limit.StoreError(err)
}
