package resilience

import (
	"log/slog"
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

// nodes are the store's nodes, each with its breaker and the probe's
// verdict on it: one ("") on a single Redis or Sentinel, a master each on
// Redis Cluster. nodeOf names a key's node (nil: one node).
type nodes struct {
	nodeOf  func(limit.Key) string
	breaker BreakerOptions
	log     *slog.Logger
	closed  func() // a node's breaker closed: its outage is over
	mu      sync.RWMutex
	m       map[string]*node
}

func newNodes(nodeOf func(limit.Key) string, b BreakerOptions, log *slog.Logger, closed func()) *nodes {
	return &nodes{nodeOf: nodeOf, breaker: b.withDefaults(), log: log, closed: closed, m: map[string]*node{}}
}

// get returns the node named name, made (with a closed breaker) on first use.
func (ns *nodes) get(name string) *node {
	ns.mu.RLock()
	n := ns.m[name]
	ns.mu.RUnlock()
	if n != nil {
		return n
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if n = ns.m[name]; n == nil {
		log := ns.log
		if name != "" {
			log = log.With("node", name)
		}
		n = &node{name: name}
		n.breaker = newBreaker(ns.breaker, log, func() { ns.closed(); n.recovered() })
		ns.m[name] = n
	}
	return n
}

// of is the node that holds k.
func (ns *nodes) of(k limit.Key) *node {
	if ns.nodeOf == nil {
		return ns.get("")
	}
	return ns.get(ns.nodeOf(k))
}

// name names the node that holds k (Fallback.NodeOf).
func (ns *nodes) name(k limit.Key) string {
	if ns.nodeOf == nil {
		return ""
	}
	return ns.nodeOf(k)
}

// code is the node that holds the number's code and records: the node of
// its own keys (the hash tag is the number).
func (ns *nodes) code(phone string) *node {
	return ns.of(limit.Key{Space: "otp", ID: phone, Name: "code"})
}

// multi reports whether keys may live on several nodes (Redis Cluster).
func (ns *nodes) multi() bool { return ns.nodeOf != nil }

// group is the takes of one call that live on one node.
type group struct {
	n   *node
	idx []int // indexes into the call's takes
}

// groups splits takes by node, in order of first appearance.
func (ns *nodes) groups(takes []limit.Take) []group {
	var out []group
	at := map[*node]int{}
	for i, t := range takes {
		n := ns.of(t.Key)
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

// refundGroups splits takes to refund by node (one group on one node).
func (ns *nodes) refundGroups(takes []limit.Take) []group {
	if !ns.multi() {
		idx := make([]int, len(takes))
		for i := range idx {
			idx[i] = i
		}
		return []group{{n: ns.get(""), idx: idx}}
	}
	return ns.groups(takes)
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

// status lists the nodes, sorted by name, and the worst breaker state
// among them (open, then half-open, then closed).
func (ns *nodes) status() (worst string, out []NodeStatus) {
	ns.mu.RLock()
	for _, n := range ns.m {
		out = append(out, NodeStatus{Node: n.name, Breaker: n.breaker.State().String()})
	}
	ns.mu.RUnlock()
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

// forget drops the named nodes that are not in live (Fallback.ForgetNodes).
func (ns *nodes) forget(live []string) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for name := range ns.m {
		if name != "" && name != "*" && !slices.Contains(live, name) {
			delete(ns.m, name)
		}
	}
}
