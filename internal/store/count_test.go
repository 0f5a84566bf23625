package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// counting is a take of an Envoy rule (limit.Policy.Independent): a
// fixed window that counts every hit, decided on its own.
func counting(id string, limit, cost int64) limit.Take {
	t := fw(id, limit, time.Minute, cost)
	t.Independent = true
	return t
}

// TestCountingWindow: alone (count_window) or in a batch (take_many), a
// counting window counts the hit that denies too, starts its window at the
// first hit, and one take's denial does not hold another; both paths
// agree, in one round trip.
func TestCountingWindow(t *testing.T) {
	s, trips, _ := redistest.Store(t)
	type step struct {
		cost      int64
		allowed   bool
		remaining int64
	}
	seq := []step{{3, true, 2}, {2, true, 0}, {1, false, 0}, {0, false, 0}, {5, false, 0}}
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			id := fmt.Sprintf("c%v", batch)
			for i, st := range seq {
				takes := []limit.Take{counting(id, 5, st.cost)}
				if batch { // beside a take that is over its limit: no hold, no refund
					takes = append(takes, counting(id+"-other", 0, 1))
				}
				trips.Reset()
				res := takeAll(t, s, takes...)
				if trips.N() != 1 {
					t.Errorf("step %d: %d round trips, want 1", i, trips.N())
				}
				r := res[0]
				if r.Allowed != st.allowed || r.Remaining != st.remaining {
					t.Errorf("step %d (cost %d): allowed %v remaining %d, want %v %d", i, st.cost, r.Allowed, r.Remaining, st.allowed, st.remaining)
				}
				if r.ResetAfter <= 0 || r.ResetAfter > time.Minute {
					t.Errorf("step %d: reset after %s, want within the minute's window", i, r.ResetAfter)
				}
			}
			// 3+2+1+0+5 counted: the next hit of 0 reads 11.
			if r := takeAll(t, s, counting(id, 5, 0))[0]; r.Count != 11 {
				t.Errorf("count %d after the sequence, want 11 (denied hits count)", r.Count)
			}
		})
	}
}
