package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pause makes the server stop answering every client for d (CLIENT PAUSE
// ALL): connections stay up, commands queue and run only when the pause
// ends, as with a Redis stalled by a slow command or a fork. It cannot be
// ended early: CLIENT UNPAUSE is paused too.
func (s *Server) Pause(d time.Duration) {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	if err := c.Do(context.Background(), "client", "pause", d.Milliseconds(), "all").Err(); err != nil {
		s.t.Fatalf("client pause: %v", err)
	}
}

// Running reports whether the server process is up (not killed).
func (s *Server) Running() bool { return s.cmd != nil }

// RefusedURL is a redis:// URL on a loopback port where nothing listens:
// every dial is refused at once.
func RefusedURL(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("redis://127.0.0.1:%d/0", freePort(t))
}
