package guardtest

import (
	"sync"

	"github.com/otpguard/otpguard/internal/guard"
)

// Events is a guard.EventSink that keeps every event it is given.
type Events struct {
	mu  sync.Mutex
	all []guard.Event
}

var _ guard.EventSink = (*Events)(nil)

// Record keeps e.
func (s *Events) Record(e guard.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all = append(s.all, e)
}

// Of returns the events of action, in the order they came.
func (s *Events) Of(action string) []guard.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []guard.Event
	for _, e := range s.all {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}
