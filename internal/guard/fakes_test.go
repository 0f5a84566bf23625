package guard_test

// The hand-written fakes the tests share: a store that can go down and an SMS
// outbox. (The resilience tests keep their own copies.)

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

var errRedisDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

// outageStore is a hand-written Counter and Codes: in memory while up, failing
// (after wait, or at once) while down. It counts the calls that reach it.
type outageStore struct {
	mu    sync.Mutex
	down  bool
	wait  bool // while down, block until the context ends, as a black hole does
	calls atomic.Int64
	fw    map[limit.Key]int64
	codes map[string]guard.Guess
}

func newOutageStore() *outageStore {
	return &outageStore{fw: map[limit.Key]int64{}, codes: map[string]guard.Guess{}}
}

func (f *outageStore) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *outageStore) fail(ctx context.Context) error {
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
	return errRedisDown
}

func (f *outageStore) Take(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if err := f.fail(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := make([]limit.Result, len(takes))
	for i, t := range takes { // fixed windows only, that never expire: enough here
		f.fw[t.Key] += t.Cost
		c := f.fw[t.Key]
		res[i] = limit.Result{Allowed: c <= t.Limit, Limit: t.Limit, Count: c, Remaining: max(0, t.Limit-c), Spent: t.Cost > 0}
	}
	return res, nil
}

func (f *outageStore) Refund(ctx context.Context, takes []limit.Take) error {
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

func (f *outageStore) SaveCode(ctx context.Context, c guard.NewCode) (int, error) {
	if err := f.fail(ctx); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.codes[c.Phone] = guard.Guess{MAC: c.MAC, TTL: c.TTL, VerificationID: c.VerificationID}
	return 0, nil
}

func (f *outageStore) GuessCode(ctx context.Context, phone string, _ time.Time) (guard.Guess, error) {
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

func (f *outageStore) ConsumeCode(ctx context.Context, phone string, mac []byte, _ time.Time) (guard.Consumed, error) {
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

func (f *outageStore) LockCode(ctx context.Context, phone, id string, now time.Time) error {
	return f.fail(ctx)
}

func (f *outageStore) DeleteCode(ctx context.Context, phone string) error {
	if err := f.fail(ctx); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.codes, phone)
	return nil
}

var outageHMACKey = []byte("0123456789abcdef0123456789abcdef")

// smsBox is a guard.Sender that keeps what it was asked to send.
type smsBox struct {
	mu   sync.Mutex
	sent []guard.Message
}

func (b *smsBox) Send(_ context.Context, m guard.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sent = append(b.sent, m)
	return nil
}

func (b *smsBox) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sent)
}

func (b *smsBox) last(t *testing.T) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.sent) == 0 {
		t.Fatal("no SMS was sent")
	}
	f := strings.Fields(b.sent[len(b.sent)-1].Body)
	return f[len(f)-1]
}

// otpInstance is one instance: its own Fallback (memory, breaker) over the
func wantCode(t *testing.T, err error, want problem.Code) {
	t.Helper()
	if got := problem.CodeOf(err); got != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
}
