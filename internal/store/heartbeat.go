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

// heartbeatScript records one instance as alive and counts the live ones, in
// one atomic step on Redis's clock (one clock for every instance, so a skewed
// host neither ages nor revives the others) (lua/beat.lua).
var heartbeatScript = script("beat")

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
	// Now is the clock of how long N is held after Redis comes back
	// (time.Now when nil).
	Now func() time.Time
}

// Heartbeat announces this instance in Redis and learns how many are live
// (N, which the split limit divides by). While Redis is away it keeps the
// last good N and reports Redis down.
//
// N errs on the safe side (a larger N is a smaller share each): when Redis
// comes back, empty or after forgetting everyone (an outage longer than
// StaleAfter), the instances re-announce themselves one beat at a time and
// the count climbs from 1. So for StaleAfter after Redis is seen back, N is
// never below the last N seen before: an instance that did not come back is
// let go only once it has been missing for a full StaleAfter.
type Heartbeat struct {
	rdb beater
	key string
	o   HeartbeatOptions

	mu    sync.Mutex
	n     int       // last good count; 0 before the first good beat
	up    bool      // the last beat succeeded
	since time.Time // when up last changed
	seen  time.Time // the last good beat
	// hold is the N kept until holdUntil, after Redis came back.
	hold      int
	holdUntil time.Time
	vanished  int64 // instances forgotten without leaving, seen by this one
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
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Heartbeat{rdb: rdb, key: prefix + "{instances}", o: o}
}

// Beat announces this instance once and updates N.
func (h *Heartbeat) Beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, h.o.Timeout)
	defer cancel()
	n, added, gone, err := h.beat(ctx)
	h.o.OnBeat(err)

	now := h.o.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold > 0 && h.up && !now.Before(h.holdUntil) {
		h.hold = 0 // held for a full StaleAfter with Redis up: let it go
	}
	up := err == nil
	// back: Redis answers again after failing, or answers without this
	// instance in the set although it had beaten (it came back empty, or
	// forgot everyone): the count starts over and climbs one beat at a time.
	back := up && h.n > 0 && (!h.up || added)
	if up != h.up || h.since.IsZero() {
		switch {
		case up && !h.since.IsZero():
			h.o.Logger.Info("redis answers heartbeats again", "instances", n, "down_for", now.Sub(h.since).Round(time.Millisecond).String())
		case !up:
			// Info: the breaker's WARN tells the outage (the failed beat
			// reaches it through OnBeat).
			h.o.Logger.Info("redis does not answer heartbeats: keeping the last instance count", "instances", h.instances(), "err", err)
		}
		h.up, h.since = up, now
	}
	if !up {
		return err
	}
	if back {
		// A hold not yet run out (Redis failed again within it) carries on.
		h.hold, h.holdUntil = max(h.hold, h.n), now.Add(h.o.StaleAfter)
		if n < h.hold {
			h.o.Logger.Info("instance count lost in redis: keeping the last one until the others have had time to beat",
				"instances", h.hold, "counted", n, "for", h.o.StaleAfter.String())
		}
	}
	switch {
	case len(gone) == 0:
	case back:
		// Everyone looks stale after an outage: the live ones re-announce
		// themselves; this is not a crash.
		h.o.Logger.Info("forgot instances not seen since before the outage", "count", len(gone))
	default:
		h.vanished += int64(len(gone))
		h.o.Logger.Warn("instances stopped beating without leaving: their unsynced hot-key counts may be lost (a possible under-count, at most one sync interval of their share)",
			"count", len(gone), "ids", gone)
	}
	h.n, h.seen = n, now
	return nil
}

// beat runs heartbeatScript: the live count, whether this instance was
// added (it was not in the set), and the other instances it forgot.
func (h *Heartbeat) beat(ctx context.Context) (n int, added bool, gone []string, err error) {
	v, err := heartbeatScript.Run(ctx, h.rdb, []string{h.key}, h.o.ID, h.o.StaleAfter.Milliseconds()).Slice()
	if err != nil {
		return 0, false, nil, fmt.Errorf("store: heartbeat: %w", err)
	}
	if len(v) != 3 {
		return 0, false, nil, fmt.Errorf("store: heartbeat: script returned %d values, want 3", len(v))
	}
	count, ok1 := v[0].(int64)
	add, ok2 := v[1].(int64)
	ids, ok3 := v[2].([]any)
	if !ok1 || !ok2 || !ok3 {
		return 0, false, nil, fmt.Errorf("store: heartbeat: unexpected reply %T %T %T", v[0], v[1], v[2])
	}
	for _, id := range ids {
		if s, ok := id.(string); ok && s != h.o.ID {
			gone = append(gone, s)
		}
	}
	return int(count), add == 1, gone, nil
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

// Instances is the last good count of live instances, at least 1, and
// for StaleAfter after Redis came back, at least the count before.
func (h *Heartbeat) Instances() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.instances()
}

// instances is N: the last count, or the hold while it lasts. A hold
// lasts StaleAfter of Redis answering: while Redis is away it does not run
// out.
func (h *Heartbeat) instances() int {
	n := max(1, h.n)
	if h.hold > n && (!h.up || h.o.Now().Before(h.holdUntil)) {
		return h.hold
	}
	return n
}

// Vanished is how many instances this one saw forgotten without leaving
// (stopped beating for StaleAfter: a crash, a SIGKILL, a partition). Each
// is counted by exactly one instance, the one whose beat forgot it.
func (h *Heartbeat) Vanished() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.vanished
}

// State reports what the heartbeat knows.
func (h *Heartbeat) State() HeartbeatState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HeartbeatState{ID: h.o.ID, Up: h.up, Since: h.since, LastSeen: h.seen, Instances: h.instances()}
}
