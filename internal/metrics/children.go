package metrics

import "sync"

// children caches a metric vector's children by their label values (up
// to three; a vector with fewer ignores the rest),
// so that a request finds its counter (or histogram) with one map read
// under a read lock, instead of the vector hashing and checking the label
// values, and allocating their slice, on every call. For the per-request
// metrics of the hot path (decisions by policy and outcome; a request
// count or latency by route and status belongs here too). The label values
// must come from a small set (policy names, codes, routes, statuses),
// never from the caller's input: each pair is kept for the process's life.
type children[M any] struct {
	mu  sync.RWMutex
	m   map[[3]string]M
	new func(a, b, c string) M // the vector's WithLabelValues
}

func newChildren[M any](new func(a, b, c string) M) *children[M] {
	return &children[M]{m: map[[3]string]M{}, new: new}
}

// with returns the child for the label values a, b, c.
func (c *children[M]) with(a, b, d string) M {
	k := [3]string{a, b, d}
	c.mu.RLock()
	m, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return m
	}
	m = c.new(a, b, d)
	c.mu.Lock()
	c.m[k] = m
	c.mu.Unlock()
	return m
}
