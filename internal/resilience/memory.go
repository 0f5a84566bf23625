package resilience

import (
	"math"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/otpguard/otpguard/internal/limit"
)

// DefaultMemoryKeys bounds the in-memory fallback limiter: at most this many
// counters live in one instance (about 200 bytes each), the least recently
// used evicted first, so a flood of distinct keys during an outage costs
// memory once and no more.
const DefaultMemoryKeys = 100_000

// memory decides takes on this instance while the store cannot answer:
// each under the limit its policy's mode gives it here (localLimit), in
// the in-memory limiter.
type memory struct {
	limits    *memoryLimits
	instances func() int
}

// Instances is the live instance count the split limit divides by.
func (m *memory) Instances() int { return max(1, m.instances()) }

// take decides t from memory.
func (m *memory) take(t limit.Take, now time.Time) limit.Result {
	lim, rate := m.localLimit(t)
	return m.limits.take(t, lim, rate, now)
}

// refund gives back what take spent for t.
func (m *memory) refund(t limit.Take, now time.Time) {
	lim, rate := m.localLimit(t)
	m.limits.refund(t, lim, rate, now)
}

// localLimit is what t may spend on this instance: LocalLimit (local) or
// the split limit (open), with a bucket's refill scaled alike, so that an
// empty bucket takes as long to refill as the shared one.
func (m *memory) localLimit(t limit.Take) (lim int64, rate float64) {
	switch mode(t) {
	case limit.FallbackLocal:
		lim = max(1, t.LocalLimit)
	default:
		lim = max(1, t.Limit/int64(m.Instances()))
	}
	if t.Algorithm == limit.TokenBucket && t.Limit > 0 {
		rate = t.Rate * float64(lim) / float64(t.Limit)
	}
	return lim, rate
}

// memoryLimits is the in-memory limiter the Fallback decides with while the
// shared store cannot answer: per key a fixed window or a token bucket, the
// same arithmetic as the store's, on this instance's clock.
//
// Eviction forgets a counter, which can only let its key through sooner; a
// key must go unused for DefaultMemoryKeys other keys to be evicted, so an
// attacker pays that many requests to reset one counter once.
type memoryLimits struct {
	mu   sync.Mutex
	keys *simplelru.LRU[localKey, *localCounter]
}

type localKey struct {
	limit.Key
	alg limit.Algorithm
}

// localCounter is a fixed window (count until reset) or a token bucket
// (tokens as of at).
type localCounter struct {
	count  int64
	reset  time.Time
	tokens float64
	at     time.Time
}

func newMemoryLimits(maxKeys int) *memoryLimits {
	if maxKeys <= 0 {
		maxKeys = DefaultMemoryKeys
	}
	keys, err := simplelru.NewLRU[localKey, *localCounter](maxKeys, nil)
	if err != nil { // only for a size <= 0, excluded above
		panic(err)
	}
	return &memoryLimits{keys: keys}
}

// take spends t.Cost from t's counter under limit (a window's events or a
// bucket's capacity) and rate (tokens per second). Unlike the store's fixed
// window, a denied hit is not counted: locally nothing needs refunding then.
func (l *memoryLimits) take(t limit.Take, lim int64, rate float64, now time.Time) limit.Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := localKey{t.Key, t.Algorithm}
	c, ok := l.keys.Get(k)
	if !ok {
		c = &localCounter{}
		if t.Cost > 0 { // a peek at a missing key creates nothing
			l.keys.Add(k, c)
		}
	}
	res := limit.Result{Limit: lim, Fallback: true}
	if t.Algorithm == limit.TokenBucket {
		c.refill(lim, rate, now)
		if float64(t.Cost) <= c.tokens {
			c.tokens -= float64(t.Cost)
			res.Allowed, res.Spent = true, t.Cost > 0
		} else {
			res.RetryAfter = seconds((float64(t.Cost) - c.tokens) / rate)
		}
		res.Remaining = int64(math.Floor(c.tokens))
		res.ResetAfter = seconds((float64(lim) - c.tokens) / rate)
		return res
	}
	if !now.Before(c.reset) {
		c.count, c.reset = 0, now.Add(t.Window)
	}
	if c.count+t.Cost <= lim {
		c.count += t.Cost
		res.Allowed, res.Spent = true, t.Cost > 0
	} else {
		res.RetryAfter = c.reset.Sub(now)
	}
	res.Count = c.count
	res.Remaining = max(0, lim-c.count)
	res.ResetAfter = c.reset.Sub(now)
	res.WindowID = c.reset.UnixNano() // a later window ends later
	return res
}

// refund gives back what take spent, if the counter is still there.
func (l *memoryLimits) refund(t limit.Take, lim int64, rate float64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.keys.Peek(localKey{t.Key, t.Algorithm})
	if !ok {
		return
	}
	if t.Algorithm == limit.TokenBucket {
		c.refill(lim, rate, now)
		c.tokens = min(float64(lim), c.tokens+float64(t.Cost))
		return
	}
	// Only in the window the hit counted in (t.WindowID, when named): a
	// window started since counts other requests' hits.
	if now.Before(c.reset) && (t.WindowID == 0 || t.WindowID == c.reset.UnixNano()) {
		c.count = max(0, c.count-t.Cost)
	}
}

// len is the number of counters held.
func (l *memoryLimits) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys.Len()
}

// refill brings a bucket up to now; a new one starts full. A smaller limit
// (more instances came up) caps what it holds.
func (c *localCounter) refill(lim int64, rate float64, now time.Time) {
	if c.at.IsZero() {
		c.tokens, c.at = float64(lim), now
		return
	}
	if el := now.Sub(c.at); el > 0 {
		c.tokens += el.Seconds() * rate
		c.at = now
	}
	c.tokens = min(c.tokens, float64(lim))
}

func seconds(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}
