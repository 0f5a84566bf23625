package guardtest

import (
	"sync"

	"github.com/otpguard/otpguard/internal/guard"
)

// Events is an audit sink that keeps what it is given (guard.EventSink).
type Events struct {
	mu     sync.Mutex
	events []guard.Event
}

var _ guard.EventSink = (*Events)(nil)

// Record keeps e.
func (s *Events) Record(e guard.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

// Action is the events recorded with action, in order.
func (s *Events) Action(action string) []guard.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []guard.Event
	for _, e := range s.events {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}
