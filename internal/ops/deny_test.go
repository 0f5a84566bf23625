package ops_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// fakeDenyList is an ops.DenyList whose methods are function fields.
type fakeDenyList struct {
	mu     sync.Mutex
	list   func() ([]guard.DenyEntry, error)
	add    func(e guard.DenyEntry) (guard.DenyEntry, error)
	remove func(id int64) error
}

func (f *fakeDenyList) ListDeny(context.Context) ([]guard.DenyEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.list()
}

func (f *fakeDenyList) AddDeny(_ context.Context, e guard.DenyEntry) (guard.DenyEntry, error) {
	return f.add(e)
}

func (f *fakeDenyList) RemoveDeny(_ context.Context, id int64) error { return f.remove(id) }

func (f *fakeDenyList) set(entries []guard.DenyEntry, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = func() ([]guard.DenyEntry, error) { return entries, err }
}

func TestDenyCacheDenied(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	past := now.Add(-time.Minute)
	fake := &fakeDenyList{}
	fake.set([]guard.DenyEntry{
		{ID: 1, Pattern: "+919800000000"},
		{ID: 2, Pattern: "+88213"},
		{ID: 3, Pattern: "+4477009", ExpiresAt: &past},
		{ID: 4, Pattern: "not a pattern"},
	}, nil)
	c := ops.NewDenyCache(fake, ops.DenyCacheOptions{})
	if _, ok := c.Denied("+919800000000", now); ok {
		t.Fatal("denied before the first reload")
	}
	if err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		phone  string
		wantID int64 // 0: not denied
	}{
		{"+919800000000", 1},
		{"+919800000001", 0},
		{"+882130000001", 2},
		{"+88213", 2},
		{"+8821", 0},
		{"+447700900123", 0}, // its entry has expired
		{"+14155550100", 0},
	} {
		e, ok := c.Denied(tc.phone, now)
		if ok != (tc.wantID != 0) || e.ID != tc.wantID {
			t.Errorf("Denied(%s): got entry %d (%v), want %d", tc.phone, e.ID, ok, tc.wantID)
		}
	}
	if got := len(c.Entries()); got != 4 {
		t.Errorf("Entries: got %d, want 4", got)
	}
}

func TestDenyCacheKeepsLastListWhileStoreFails(t *testing.T) {
	now := time.Now()
	fake := &fakeDenyList{}
	fake.set([]guard.DenyEntry{{ID: 7, Pattern: "+88213"}}, nil)
	var reloads []error
	c := ops.NewDenyCache(fake, ops.DenyCacheOptions{OnRefresh: func(_ int, err error) { reloads = append(reloads, err) }})
	if err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	down := errors.New("database down")
	fake.set(nil, down)
	for range 3 {
		if err := c.Reload(context.Background()); !errors.Is(err, down) {
			t.Fatalf("Reload with the store down: got %v, want %v", err, down)
		}
	}
	if e, ok := c.Denied("+882130000001", now); !ok || e.ID != 7 {
		t.Errorf("while the store is down: got %d (%v), want the last list's entry 7", e.ID, ok)
	}
	fake.set([]guard.DenyEntry{}, nil)
	if err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Denied("+882130000001", now); ok {
		t.Error("after the store returned an empty list: still denied")
	}
	if got, want := len(reloads), 5; got != want {
		t.Errorf("OnRefresh calls: got %d, want %d", got, want)
	}
}

func TestDenyCacheRunRefreshes(t *testing.T) {
	fake := &fakeDenyList{}
	fake.set(nil, nil)
	c := ops.NewDenyCache(fake, ops.DenyCacheOptions{Refresh: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	fake.set([]guard.DenyEntry{{ID: 1, Pattern: "+1415"}}, nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := c.Denied("+14155550100", time.Now()); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a new entry was not enforced within 5s with a 10ms refresh")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
