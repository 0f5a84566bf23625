package client

import (
	"container/list"
	"sync"
	"time"
)

// memory remembers exact denials until the time they are known to hold
// (the package documentation says why that is exact). It is bounded: the
// least recently used denial is forgotten first, and forgetting only sends
// the next check to otpguard.
type memory struct {
	mu   sync.Mutex
	size int
	keys map[memKey]*list.Element
	lru  list.List // of *memEntry, most recent first
	// policyHeaders keeps each policy's RateLimit-Policy value as otpguard
	// last wrote it (its quota and window), for answers from memory.
	policyHeaders map[string]string
}

type memKey struct{ policy, key string }

type memEntry struct {
	k memKey
	d denial
}

// denial is one remembered denial: every cost from cost up is denied
// until until.
type denial struct {
	cost         int64
	until        time.Time
	limit        int64
	remaining    int64
	reset        time.Time
	policyHeader string
}

// maxPolicyHeaders bounds policyHeaders (otpguard has a few policies).
const maxPolicyHeaders = 1024

func newMemory(size int) *memory {
	return &memory{size: size, keys: make(map[memKey]*list.Element), policyHeaders: make(map[string]string)}
}

// get returns the denial of policy and key that covers cost at now.
func (m *memory) get(policy, key string, cost int64, now time.Time) (denial, bool) {
	if cost <= 0 {
		return denial{}, false // a peek is never denied
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.keys[memKey{policy, key}]
	if !ok {
		return denial{}, false
	}
	e := el.Value.(*memEntry)
	if !now.Before(e.d.until) {
		m.lru.Remove(el)
		delete(m.keys, e.k)
		return denial{}, false
	}
	if cost < e.d.cost {
		return denial{}, false // a lower cost may be allowed sooner: ask
	}
	m.lru.MoveToFront(el)
	d := e.d
	if h, ok := m.policyHeaders[policy]; ok && d.policyHeader == "" {
		d.policyHeader = h
	}
	return d, true
}

// put remembers d for policy and key, in place of what was there.
func (m *memory) put(policy, key string, d denial) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d.policyHeader != "" && len(m.policyHeaders) < maxPolicyHeaders {
		m.policyHeaders[policy] = d.policyHeader
	}
	k := memKey{policy, key}
	if el, ok := m.keys[k]; ok {
		el.Value.(*memEntry).d = d
		m.lru.MoveToFront(el)
		return
	}
	m.keys[k] = m.lru.PushFront(&memEntry{k: k, d: d})
	for len(m.keys) > m.size {
		last := m.lru.Back()
		m.lru.Remove(last)
		delete(m.keys, last.Value.(*memEntry).k)
	}
}

// notePolicy keeps a policy's RateLimit-Policy value.
func (m *memory) notePolicy(policy, header string) {
	if header == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.policyHeaders[policy]; ok || len(m.policyHeaders) < maxPolicyHeaders {
		m.policyHeaders[policy] = header
	}
}

// clear forgets every denial.
func (m *memory) clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.keys)
	m.lru.Init()
}

// len is how many denials are remembered.
func (m *memory) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}
