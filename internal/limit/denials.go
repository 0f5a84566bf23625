package limit

import (
	"math"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// DefaultDenials bounds the denials one instance remembers (about 150
// bytes each), the least recently used forgotten first.
const DefaultDenials = 10_000

// Denials remembers exact denials that are known to hold until a time T,
// so that a key hammered while it is denied is answered from memory, with
// no round trip to Redis, until T: under attack most requests are such
// repeats. It stays exact: nothing but T passing turns a denial into an
// allow, because before T Redis would deny it too.
//
//   - A fixed window (one that spends only if it allows, as /limits/check's)
//     that denied a cost c holds count > limit - c until it resets: its
//     count only grows (other instances' hits) until the key expires. So
//     every cost >= limit - count + 1 is denied until the window resets.
//   - A token bucket that denied cost c with retry_after R has fewer than c
//     tokens until R has passed: others can only take more. So every cost
//     >= c is denied until then (a smaller cost may be allowed sooner, and
//     is asked of Redis).
//
// T is counted from the moment the request was sent, before Redis decided,
// less a millisecond for Redis's rounding to whole milliseconds, so T comes
// no later than Redis's own. The exceptions only ever deny a little more,
// never allow more: a refund (the other part of a batch that spans Redis
// Cluster slots) gives back tokens a remembered denial does not see until
// T. Forgetting (eviction, a restart) only sends the next check to Redis,
// and a Limiter forgets everything when Redis fails to answer: Redis may
// come back (restarted empty, failed over) without the counters behind the
// denials, and limits then start over there. An instance that saw no
// request during such an outage keeps its denials until their T: it
// denies more, never allows more.
type Denials struct {
	keys *lru.Cache[Key, denial]
	now  func() time.Time
}

type denial struct {
	cost      int64     // costs from this one up are denied
	until     time.Time // T
	limit     int64
	remaining int64
	reset     time.Time // when the counter is back to its full limit
	rate      float64   // a bucket's refill per second, for a larger cost's retry
}

// NewDenials remembers at most size denials (DefaultDenials when 0), on
// the clock now (time.Now when nil).
func NewDenials(size int, now func() time.Time) *Denials {
	if size <= 0 {
		size = DefaultDenials
	}
	if now == nil {
		now = time.Now
	}
	keys, err := lru.New[Key, denial](size)
	if err != nil { // only for a size <= 0, excluded above
		panic(err)
	}
	return &Denials{keys: keys, now: now}
}

// lookup answers t from memory if a remembered denial covers it.
func (d *Denials) lookup(t Take) (Result, bool) {
	if t.Cost <= 0 || !memorable(t) {
		return Result{}, false // a peek is never a denial
	}
	e, ok := d.keys.Get(t.Key)
	if !ok {
		return Result{}, false
	}
	now := d.now()
	if !now.Before(e.until) {
		d.keys.Remove(t.Key)
		return Result{}, false
	}
	if t.Cost < e.cost {
		return Result{}, false
	}
	retry := e.until.Sub(now)
	if t.Algorithm == TokenBucket && e.rate > 0 && t.Cost > e.cost {
		retry += time.Duration(math.Ceil(float64(t.Cost-e.cost) / e.rate * float64(time.Second)))
	}
	return Result{Limit: e.limit, Remaining: e.remaining, RetryAfter: retry,
		ResetAfter: max(e.reset.Sub(now), retry)}, true
}

// remember keeps r, the store's exact denial of t sent at sent, if it
// holds until a known time. A denial still remembered for a smaller cost
// stays: it covers more.
func (d *Denials) remember(t Take, r Result, sent time.Time) {
	if r.Allowed || r.Fallback || t.Cost <= 0 || r.RetryAfter <= 0 || !memorable(t) {
		return
	}
	e := denial{cost: t.Cost, until: sent.Add(r.RetryAfter - time.Millisecond), limit: r.Limit,
		remaining: r.Remaining, reset: sent.Add(r.ResetAfter)}
	if t.Algorithm == FixedWindow {
		e.cost = max(1, min(t.Cost, r.Limit-r.Count+1))
	} else {
		e.rate = t.Rate
	}
	if !e.until.After(d.now()) {
		return
	}
	if old, ok := d.keys.Peek(t.Key); ok && old.cost < e.cost && d.now().Before(old.until) {
		return
	}
	d.keys.Add(t.Key, e)
}

// forget drops every remembered denial (Redis failed to answer: it may
// come back without the counters they stood for).
func (d *Denials) forget() { d.keys.Purge() }

// learn takes in what the store answered for takes exact (sent at sent;
// at maps each to its check, nil when exact are every check in order,
// pols are the checks' policies). When the store did not answer, or a
// fallback decided for it, Redis may come back from a restart or a
// failover without the counters behind the remembered denials, and counts
// then start over there: forget them rather than deny what Redis would
// allow. Otherwise each answer is remembered, but for a sync-mode check's
// and for one sharing its key with another take of the batch: such an
// answer depends on the other checks (the store decides them in order),
// and is not Redis's alone to remember.
func (d *Denials) learn(exact []Take, got []Result, err error, sent time.Time, at []int, pols []checkPolicy) {
	if err != nil || anyFallback(got) {
		d.forget()
	}
	if err != nil {
		return
	}
	for j := range exact {
		i := j
		if at != nil {
			i = at[j]
		}
		if pols[i].Mode != ModeSync && !sharesKey(exact, j) {
			d.remember(exact[j], got[j], sent)
		}
	}
}

func anyFallback(res []Result) bool {
	for _, r := range res {
		if r.Fallback {
			return true
		}
	}
	return false
}

// sharesKey reports whether another take of takes has takes[j]'s key.
func sharesKey(takes []Take, j int) bool {
	for i, t := range takes {
		if i != j && t.Key == takes[j].Key {
			return true
		}
	}
	return false
}

// memorable: only takes whose denial holds until a known time. A fixed
// window that counts every hit (OTP) is not asked here.
func memorable(t Take) bool {
	return t.Algorithm == TokenBucket || (t.Algorithm == FixedWindow && t.SpendIfAllowed)
}

// Len is the number of denials remembered (some may have expired).
func (d *Denials) Len() int { return d.keys.Len() }
