package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The code calls below read what their call wrote only when it returned
// (err == nil): after wait gives up on a call, the call may still write.

// SaveCode saves through the breaker, within the timeout.
func (f *Fallback) SaveCode(ctx context.Context, c guard.NewCode) (int, error) {
	var prev int
	err := f.calls.call(ctx, f.nodes.code(c.Phone), func(ctx context.Context) (err error) {
		prev, err = f.codes.SaveCode(ctx, c)
		return err
	})
	if errors.Is(err, guard.ErrUnindexed) { // saved: prev is the store's
		return prev, err
	}
	if err != nil {
		return 0, err
	}
	return prev, nil
}

// GuessCode reads through the breaker, within the timeout.
func (f *Fallback) GuessCode(ctx context.Context, phone string, of guard.GuessOf, now time.Time) (guard.Guess, error) {
	var g guard.Guess
	err := f.calls.call(ctx, f.nodes.code(phone), func(ctx context.Context) error {
		var err error
		g, err = f.codes.GuessCode(ctx, phone, of, now)
		return err
	})
	if err != nil {
		return guard.Guess{}, err
	}
	return g, nil
}

// ConsumeCode consumes through the breaker, within the timeout.
func (f *Fallback) ConsumeCode(ctx context.Context, phone, service string, mac []byte, now time.Time) (guard.Consumed, error) {
	var c guard.Consumed
	err := f.calls.call(ctx, f.nodes.code(phone), func(ctx context.Context) error {
		var err error
		c, err = f.codes.ConsumeCode(ctx, phone, service, mac, now)
		return err
	})
	if err != nil {
		return guard.ConsumedNot, err
	}
	return c, nil
}

// DeleteCode deletes through the breaker, within the timeout.
func (f *Fallback) DeleteCode(ctx context.Context, phone, service string) error {
	return f.calls.call(ctx, f.nodes.code(phone), func(ctx context.Context) error { return f.codes.DeleteCode(ctx, phone, service) })
}

// LockCode marks through the breaker, within the timeout.
func (f *Fallback) LockCode(ctx context.Context, phone, service, id string, now time.Time) error {
	return f.calls.call(ctx, f.nodes.code(phone), func(ctx context.Context) error {
		return f.codes.LockCode(ctx, phone, service, id, now)
	})
}
