package resilience

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/otpguard/otpguard/internal/limit"
)

// A node is one Redis server the decisions reach: the one server of a
// single Redis or Sentinel (named ""), or one master of a Redis Cluster
// (named by its address). The unit of failure is the node: each has its
// own breaker and the probe's verdict on it, so one master's death opens
// the breaker of its own slots only, while every slot of a live master
// stays exact. After a failover the slots move to the promoted replica,
// a new node with a closed breaker; the dead master's node is no longer
// named by any key.
type node struct {
	name    string
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]

	probeSeen atomic.Bool
	// callOK is when a store call last got its reply (unix nanoseconds).
	// vouch is the probe's last verdict and verdictAt when it was given
	// (healthy).
	callOK    atomic.Int64
	vouch     atomic.Bool
	verdictAt atomic.Int64
	// lateRounds counts the probe's timed-out pings in a row with no call
	// answered meanwhile.
	lateRounds atomic.Int32
	// warned are the shared rules logged as decided from memory in this
	// outage of the node (shared.go).
	warnMu sync.Mutex
	warned map[string]bool
}

// node returns the node named name, made (with a closed breaker) on first use.
func (f *Fallback) node(name string) *node {
	f.nodesMu.RLock()
	n := f.nodes[name]
	f.nodesMu.RUnlock()
	if n != nil {
		return n
	}
	f.nodesMu.Lock()
	defer f.nodesMu.Unlock()
	if n = f.nodes[name]; n == nil {
		log := f.log
		if name != "" {
			log = log.With("node", name)
		}
		n = &node{name: name}
		n.breaker = newBreaker(f.breaker, log, func() { f.leaveFallback(); n.recovered() })
		f.nodes[name] = n
	}
	return n
}

// nodeFor is the node that holds k.
func (f *Fallback) nodeFor(k limit.Key) *node {
	if f.nodeOf == nil {
		return f.node("")
	}
	return f.node(f.nodeOf(k))
}

// NodeOf names the node that holds k: its master's address on Redis
// Cluster, "" on a single Redis or Sentinel (one node). Callers that touch
// keys of several subjects group them by it and make one DoFor per node.
func (f *Fallback) NodeOf(k limit.Key) string {
	if f.nodeOf == nil {
		return ""
	}
	return f.nodeOf(k)
}

// multiNode reports whether keys may live on several nodes (Redis Cluster).
func (f *Fallback) multiNode() bool { return f.nodeOf != nil }

// group is the takes of one call that live on one node.
type group struct {
	n   *node
	idx []int // indexes into the call's takes
}

// groups splits takes by node, in order of first appearance.
func (f *Fallback) groups(takes []limit.Take) []group {
	var out []group
	at := map[*node]int{}
	for i, t := range takes {
		n := f.nodeFor(t.Key)
		g, ok := at[n]
		if !ok {
			g = len(out)
			at[n] = g
			out = append(out, group{n: n})
		}
		out[g].idx = append(out[g].idx, i)
	}
	return out
}

func pick(takes []limit.Take, idx []int) []limit.Take {
	out := make([]limit.Take, len(idx))
	for j, i := range idx {
		out[j] = takes[i]
	}
	return out
}

// NodeStatus is one node's breaker, as Status reports it.
type NodeStatus struct {
	Node    string // "" for the one node of a single Redis or Sentinel
	Breaker string // closed, half-open or open
}

// nodeStatus lists the nodes, sorted by name, and the worst breaker state
// among them (open, then half-open, then closed).
func (f *Fallback) nodeStatus() (worst string, out []NodeStatus) {
	f.nodesMu.RLock()
	for _, n := range f.nodes {
		out = append(out, NodeStatus{Node: n.name, Breaker: n.breaker.State().String()})
	}
	f.nodesMu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	rank := map[string]int{"closed": 0, "half-open": 1, "open": 2}
	worst = "closed"
	for _, s := range out {
		if rank[s.Breaker] > rank[worst] {
			worst = s.Breaker
		}
	}
	return worst, out
}

// healthy reports whether the node is known to answer: the probe's last
// verdict vouches for it (see probe.go).
func (n *node) healthy(fresh time.Duration) bool {
	at := n.verdictAt.Load()
	return n.vouch.Load() && at != 0 && time.Since(time.Unix(0, at)) <= staleVerdicts*fresh
}

// ForgetNodes drops the named nodes that are not in live (the masters of
// the current slot map), so that a dead master replaced by its replica
// no longer counts in Status. A key still mapped to a forgotten node (a
// client whose map is not reloaded yet) makes it again, breaker closed.
func (f *Fallback) ForgetNodes(live []string) {
	f.nodesMu.Lock()
	defer f.nodesMu.Unlock()
	for name := range f.nodes {
		if name != "" && name != "*" && !slices.Contains(live, name) {
			delete(f.nodes, name)
		}
	}
}
