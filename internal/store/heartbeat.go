package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// heartbeatScript records one instance as alive and counts the live ones,
// in one atomic step on Redis's clock (one clock for every instance, so a
// skewed host neither ages nor revives the others):
//
//	ZADD     the instance, scored by now (ms)
//	ZREMRANGEBYSCORE  whoever was last seen StaleAfter ago or earlier
//	PEXPIRE  the set, so it dies with the last instance: no key without TTL
//	ZCARD    the live count, this instance included
//
// KEYS[1] the set; ARGV[1] instance id; ARGV[2] StaleAfter in ms.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - stale)
redis.call('PEXPIRE', KEYS[1], stale * 2)
return redis.call('ZCARD', KEYS[1])
`)

// beater is what a Heartbeat needs of a go-redis client.
type beater interface {
	redis.Scripter
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
}

// HeartbeatOptions tune a Heartbeat; zero values mean the defaults.
type HeartbeatOptions struct {
	ID         string        // this instance; random when ""
	Every      time.Duration // between beats (default 1s)
	StaleAfter time.Duration // an instance not seen for this long is gone (default 4s)
	Timeout    time.Duration // of one beat (default 1s; the client's own timeouts still apply)
	// OnBeat is told the result of every beat (nil: a success), so the
	// breaker's owner learns of an outage even with no traffic.
	OnBeat func(err error)
	Logger *slog.Logger
}

// Heartbeat announces this instance in Redis and learns how many are live
// (N, which the split limit divides by). While Redis is away it keeps the
// last good N and reports Redis down.
type Heartbeat struct {
	rdb beater
	key string
	o   HeartbeatOptions

	mu    sync.Mutex
	n     int       // last good count; 0 before the first good beat
	up    bool      // the last beat succeeded
	since time.Time // when up last changed
	seen  time.Time // the last good beat
}

// HeartbeatState is what the heartbeat knows.
type HeartbeatState struct {
	ID        string
	Up        bool      // Redis answered the last beat
	Since     time.Time // since when Up has held (zero before the first beat)
	LastSeen  time.Time // the last good beat (zero: none yet)
	Instances int       // the last good count, at least 1
}

// NewHeartbeat returns a heartbeat in the set prefix + "{instances}".
func NewHeartbeat(rdb beater, prefix string, o HeartbeatOptions) *Heartbeat {
	if o.ID == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		o.ID = hex.EncodeToString(b)
	}
	if o.Every <= 0 {
		o.Every = time.Second
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = 4 * o.Every
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.OnBeat == nil {
		o.OnBeat = func(error) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Heartbeat{rdb: rdb, key: prefix + "{instances}", o: o}
}

// Beat announces this instance once and updates N.
func (h *Heartbeat) Beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.o.Timeout)
	defer cancel()
	n, err := heartbeatScript.Run(ctx, h.rdb, []string{h.key}, h.o.ID, h.o.StaleAfter.Milliseconds()).Int()
	if err != nil {
		err = fmt.Errorf("store: heartbeat: %w", err)
	}
	h.o.OnBeat(err)

	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	up := err == nil
	if up != h.up || h.since.IsZero() {
		switch {
		case up && !h.since.IsZero():
			h.o.Logger.Info("redis answers heartbeats again", "instances", n, "down_for", now.Sub(h.since).Round(time.Millisecond).String())
		case !up:
			h.o.Logger.Warn("redis does not answer heartbeats: keeping the last instance count", "instances", max(1, h.n), "err", err)
		}
		h.up, h.since = up, now
	}
	if up {
		h.n, h.seen = n, now
	}
	return err
}

// Run beats every Every until ctx ends, then takes this instance out of
// the set, so that the others' N drops at once rather than StaleAfter later.
func (h *Heartbeat) Run(ctx context.Context) {
	t := time.NewTicker(h.o.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.o.Timeout)
			_ = h.rdb.ZRem(lctx, h.key, h.o.ID).Err()
			cancel()
			return
		case <-t.C:
			_ = h.Beat(ctx)
		}
	}
}

// Instances is the last good count of live instances, at least 1.
func (h *Heartbeat) Instances() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(1, h.n)
}

// State reports what the heartbeat knows.
func (h *Heartbeat) State() HeartbeatState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HeartbeatState{ID: h.o.ID, Up: h.up, Since: h.since, LastSeen: h.seen, Instances: max(1, h.n)}
}
