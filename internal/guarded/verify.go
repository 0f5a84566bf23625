package guarded

import (
	"context"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

var _ guard.Verifications = Store{}

// verIDKey is the id's index key (store/verification.go): the first read
// of GET /otp/verifications/{id}, whose node's breaker the read goes
// through on Redis Cluster (the record itself is on the number's node).
func verIDKey(id string) limit.Key { return limit.Key{Space: "ver", ID: id, Name: "p"} }

// Verification reads a verification record through the Fallback's breaker
// and timeout: while Redis is away it answers 503 store_unavailable.
func (g Store) Verification(ctx context.Context, id string) (guard.Verification, error) {
	var v guard.Verification
	err := g.fb.DoFor(ctx, verIDKey(id), func(ctx context.Context) (err error) {
		v, err = g.st.Codes.Verification(ctx, id)
		return err
	})
	if err != nil {
		return guard.Verification{}, err
	}
	return v, nil
}

// EndVerification cancels or approves through the breaker and timeout.
func (g Store) EndVerification(ctx context.Context, e guard.Ending, now time.Time) (guard.Verification, bool, error) {
	var v guard.Verification
	var canceled bool
	err := g.fb.DoFor(ctx, verIDKey(e.ID), func(ctx context.Context) (err error) {
		v, canceled, err = g.st.Codes.EndVerification(ctx, e, now)
		return err
	})
	if err != nil {
		return guard.Verification{}, false, err
	}
	return v, canceled, nil
}

var _ guard.CodeReader = Store{}

// ReadCode reads a number's live code (the ops desk's number search)
// through the breaker and timeout of the number's node: while Redis is
// away the look-up says the code could not be read.
func (g Store) ReadCode(ctx context.Context, phone, service string) (guard.CodeState, error) {
	var c guard.CodeState
	err := g.fb.DoFor(ctx, limit.Key{Space: "otp", ID: phone, Name: "code"}, func(ctx context.Context) (err error) {
		c, err = g.st.Codes.ReadCode(ctx, phone, service)
		return err
	})
	if err != nil {
		return guard.CodeState{}, err
	}
	return c, nil
}
