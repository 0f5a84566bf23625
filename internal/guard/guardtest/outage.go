package guardtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// ErrRedisDown is what OutageStore answers while it is down: a refused
// connection, as the Redis client reports one.
var ErrRedisDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// OutageStore is a limit.Counter and guard.Codes: in memory while up,
// failing (at once, or when the context ends with SetWait) while down. Its
// windows are fixed and never expire: enough for a test. It counts the
// calls that reach it.
type OutageStore struct {
	mu    sync.Mutex
	down  bool
	wait  bool
	calls atomic.Int64
	fw    map[limit.Key]int64
	codes map[string]guard.Guess
}

// NewOutageStore returns a store that is up and empty.
func NewOutageStore() *OutageStore {
	return &OutageStore{fw: map[limit.Key]int64{}, codes: map[string]guard.Guess{}}
}

// SetDown takes the store down, or brings it back.
func (f *OutageStore) SetDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// SetWait makes a store that is down block until the context ends, as a
// black hole does, rather than refuse at once.
func (f *OutageStore) SetWait(wait bool) {
	f.mu.Lock()
	f.wait = wait
	f.mu.Unlock()
}

// Calls is how many calls reached the store, down or up.
func (f *OutageStore) Calls() int64 { return f.calls.Load() }

// Count is the count of the window k.
func (f *OutageStore) Count(k limit.Key) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fw[k]
}

// Counts is a copy of every window's count.
func (f *OutageStore) Counts() map[limit.Key]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[limit.Key]int64, len(f.fw))
	for k, v := range f.fw {
		out[k] = v
	}
	return out
}

func (f *OutageStore) fail(ctx context.Context) error {
	f.calls.Add(1)
	f.mu.Lock()
	down, wait := f.down, f.wait
	f.mu.Unlock()
	if !down {
		return nil
	}
	if wait {
		<-ctx.Done()
		return fmt.Errorf("i/o timeout: %w", ctx.Err())
	}
	return ErrRedisDown
}

// Take counts each take in its fixed window.
func (f *OutageStore) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if err := f.fail(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := make([]limit.Result, len(takes))
	for i, t := range takes {
		f.fw[t.Key] += t.Cost
		c := f.fw[t.Key]
		res[i] = limit.Result{Allowed: c <= t.Limit, Limit: t.Limit, Count: c, Remaining: max(0, t.Limit-c), Spent: t.Cost > 0}
	}
	return res, nil
}

// Refund gives the takes back.
func (f *OutageStore) Refund(ctx context.Context, takes []limit.Take) error {
	if err := f.fail(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range takes {
		f.fw[t.Key] -= t.Cost
	}
	return nil
}

// SaveCode keeps the code, replacing the number's last.
func (f *OutageStore) SaveCode(ctx context.Context, c guard.NewCode) (int, error) {
	if err := f.fail(ctx); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[c.Phone] = guard.Guess{MAC: c.MAC, TTL: c.TTL, VerificationID: c.VerificationID}
	return 0, nil
}

// GuessCode counts a guess at the number's code.
func (f *OutageStore) GuessCode(ctx context.Context, phone string, _ guard.GuessOf, _ time.Time) (guard.Guess, error) {
	if err := f.fail(ctx); err != nil {
		return guard.Guess{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.codes[phone]
	if !ok {
		return guard.Guess{}, guard.ErrNotFound
	}
	g.Attempts++
	f.codes[phone] = g
	return g, nil
}

// ConsumeCode deletes the number's code if there is one.
func (f *OutageStore) ConsumeCode(ctx context.Context, phone, _ string, _ []byte, _ time.Time) (guard.Consumed, error) {
	if err := f.fail(ctx); err != nil {
		return guard.ConsumedNot, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.codes[phone]; !ok {
		return guard.ConsumedNot, nil
	}
	delete(f.codes, phone)
	return guard.ConsumedOK, nil
}

// LockCode does nothing but fail while down.
func (f *OutageStore) LockCode(ctx context.Context, _, _, _ string, _ time.Time) error {
	return f.fail(ctx)
}

// DeleteCode deletes the number's code.
func (f *OutageStore) DeleteCode(ctx context.Context, phone, _ string) error {
	if err := f.fail(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.codes, phone)
	return nil
}
