package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// ClientLog carries go-redis's own log lines into the service's JSON log
// (give it to redis.SetLogger). go-redis prints them to stderr unless told
// otherwise, through one logger for the whole process. While Redis, a node or a sentinel is
// down it reports every failed dial; otpguard reports the outage itself
// (the breaker, the heartbeat, /readyz), so those lines are debug. Anything
// else go-redis has to say is a warning.
type ClientLog struct{ Log *slog.Logger }

// routineClientLog are the go-redis messages that only repeat an outage.
var routineClientLog = []string{"failed to dial", "sentinel: ", "nodes are failing", "nodes are marked as failed"}

// Printf is go-redis's logging interface (internal.Logging).
func (l ClientLog) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	level := slog.LevelWarn
	for _, r := range routineClientLog {
		if strings.Contains(msg, r) {
			level = slog.LevelDebug
			break
		}
	}
	l.Log.Log(ctx, level, "go-redis: "+strings.TrimPrefix(msg, "redis: "))
}
