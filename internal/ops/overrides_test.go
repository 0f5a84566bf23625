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

// fakeOverrideList is an ops.OverrideList whose list is set by the test.
type fakeOverrideList struct {
	mu   sync.Mutex
	list []guard.Override
	err  error
	asks []time.Time // the clock each load asked with
}

func (f *fakeOverrideList) AddOverride(context.Context, guard.Override) (guard.Override, error) {
	return guard.Override{}, errors.New("not used")
}

func (f *fakeOverrideList) RemoveOverride(context.Context, int64) (guard.Override, error) {
	return guard.Override{}, errors.New("not used")
}

func (f *fakeOverrideList) ListOverrides(_ context.Context, now time.Time) ([]guard.Override, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asks = append(f.asks, now)
	return f.list, f.err
}

func (f *fakeOverrideList) set(list []guard.Override, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list, f.err = list, err
}

// TestOverrideCacheLoadsWithTheDenyList: every deny-list reload loads the
// overrides (DenyCacheOptions.Also), by the service's clock; a failed load
// keeps the last set in force.
func TestOverrideCacheLoadsWithTheDenyList(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	st := &fakeOverrideList{}
	cache := ops.NewOverrideCache(st, func() time.Time { return now }, nil)
	deny := &fakeDenyList{}
	deny.set(nil, nil)
	dc := ops.NewDenyCache(deny, ops.DenyCacheOptions{Also: cache.Reload})

	pause := guard.Override{ID: 1, Kind: guard.OverrideCountryPause, Subject: "NG", ExpiresAt: now.Add(time.Hour)}
	st.set([]guard.Override{pause}, nil)
	if err := dc.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := cache.ActiveOverrides(); len(got) != 1 || got[0].ID != 1 || cache.LoadedAt().IsZero() {
		t.Fatalf("after a reload: %+v (loaded at %v), want the pause", got, cache.LoadedAt())
	}
	if len(st.asks) != 1 || !st.asks[0].Equal(now) {
		t.Errorf("loads asked with %v, want once with the service's clock %v", st.asks, now)
	}

	st.set(nil, errors.New("database down"))
	_ = dc.Reload(context.Background())
	if got := cache.ActiveOverrides(); len(got) != 1 {
		t.Errorf("after a failed load: %+v, want the last set kept", got)
	}
	// The deny-list failing does not stop the overrides from loading.
	deny.set(nil, errors.New("deny-list down"))
	st.set(nil, nil)
	if err := dc.Reload(context.Background()); err == nil {
		t.Error("deny-list reload: no error, want its own")
	}
	if got := cache.ActiveOverrides(); len(got) != 0 {
		t.Errorf("after the removal loaded: %+v, want none", got)
	}
}
