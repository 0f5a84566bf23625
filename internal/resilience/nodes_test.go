package resilience_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// nodeStore is a Counter spread over named nodes, as Redis Cluster spreads
// keys over masters: a key's node is nodeOf's answer, a call fails when
// it touches a down node, and every call records the nodes it touched.
type nodeStore struct {
	mu    sync.Mutex
	of    map[string]string // key ID -> node
	down  map[string]bool
	fw    map[limit.Key]int64
	calls [][]string // per call, the nodes of its keys
}

func newNodeStore(of map[string]string) *nodeStore {
	return &nodeStore{of: of, down: map[string]bool{}, fw: map[limit.Key]int64{}}
}

func (s *nodeStore) nodeOf(k limit.Key) string { return s.of[k.ID] }

func (s *nodeStore) enter(takes []limit.Take) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var nodes []string
	for _, t := range takes {
		if n := s.of[t.Key.ID]; !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	s.calls = append(s.calls, nodes)
	for _, n := range nodes {
		if s.down[n] {
			return errors.New("dial tcp " + n + ": connect: connection refused")
		}
	}
	return nil
}

func (s *nodeStore) Take(_ context.Context, takes []limit.Take) ([]limit.Result, error) {
	if err := s.enter(takes); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]limit.Result, len(takes))
	for i, t := range takes {
		s.fw[t.Key] += t.Cost
		c := s.fw[t.Key]
		res[i] = limit.Result{Allowed: c <= t.Limit, Limit: t.Limit, Count: c, Spent: t.Cost > 0}
	}
	return res, nil
}

func (s *nodeStore) Refund(_ context.Context, takes []limit.Take) error {
	if err := s.enter(takes); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range takes {
		s.fw[t.Key] -= t.Cost
	}
	return nil
}

func (s *nodeStore) count(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.fw {
		if k.ID == id {
			return c
		}
	}
	return 0
}

// sendTakes are a send's parts: the number's own limit (closed), its
// per-IP limit (closed) and a country limit (open), each on its node.
func sendTakes() []limit.Take {
	take := func(space, id string, mode limit.FallbackMode) limit.Take {
		return limit.Take{Key: limit.Key{Space: space, ID: id, Name: "fw"}, Algorithm: limit.FixedWindow,
			Limit: 10, Window: time.Minute, Cost: 1, Policy: guard.OTPPolicyName, OnStoreError: mode}
	}
	return []limit.Take{take("otp", "+447911000001", limit.FallbackClosed),
		take("otp:ip", "198.51.100.7", limit.FallbackClosed), take("otp:cc", "GB", limit.FallbackOpen)}
}

func newNodeFallback(s *nodeStore) *resilience.Fallback {
	return resilience.NewFallback(resilience.FallbackOptions{Counter: s, NodeOf: s.nodeOf,
		Breaker: resilience.BreakerOptions{Failures: 3, OpenFor: time.Hour}})
}

// Each store call holds the keys of one node only, and every part is
// decided by the store while every node answers.
func TestTakeSplitsByNode(t *testing.T) {
	s := newNodeStore(map[string]string{"+447911000001": "a", "198.51.100.7": "b", "GB": "c"})
	f := newNodeFallback(s)
	res, err := f.Take(context.Background(), sendTakes())
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Allowed || r.Fallback {
			t.Errorf("take %d: %+v, want allowed by the store", i, r)
		}
	}
	if len(s.calls) != 3 {
		t.Fatalf("%d store calls, want one per node: %v", len(s.calls), s.calls)
	}
	for _, c := range s.calls {
		if len(c) != 1 {
			t.Errorf("a store call touched nodes %v, want one", c)
		}
	}
	// Keys of one node go in one call.
	s.of["GB"] = "a"
	s.calls = nil
	if _, err := f.Take(context.Background(), sendTakes()); err != nil {
		t.Fatal(err)
	}
	if len(s.calls) != 2 {
		t.Errorf("%d store calls for two nodes: %v", len(s.calls), s.calls)
	}
}

// With another node down, only its parts take the fallback: a closed
// per-IP limit there is split (not refused), the number's and the
// country's parts are decided by the store, and only that node's breaker
// opens.
func TestOnlyTheDeadNodesPartsFallBack(t *testing.T) {
	s := newNodeStore(map[string]string{"+447911000001": "a", "198.51.100.7": "b", "GB": "c"})
	f := newNodeFallback(s)
	s.down["b"] = true
	for range 5 {
		res, err := f.Take(context.Background(), sendTakes())
		if err != nil {
			t.Fatalf("a send whose number's node answers failed: %v", err)
		}
		if !res[0].Allowed || res[0].Fallback || res[2].Fallback {
			t.Errorf("the number's or the country's part fell back: %+v", res)
		}
		if !res[1].Fallback {
			t.Errorf("the dead node's per-IP part was not decided by the fallback: %+v", res[1])
		}
	}
	if got := s.count("+447911000001"); got != 5 {
		t.Errorf("the number's limit counted %d in the store, want 5", got)
	}
	st := f.Status()
	for _, n := range st.Nodes {
		if want := map[bool]string{true: "open", false: "closed"}[n.Node == "b"]; n.Breaker != want {
			t.Errorf("node %q breaker %s, want %s", n.Node, n.Breaker, want)
		}
	}
	if st.Breaker != "open" {
		t.Errorf("worst breaker %s, want open", st.Breaker)
	}
}

// When the number's own node is down, a closed send fails, and what its
// other parts spent on live nodes goes back.
func TestNumbersNodeDownRefundsTheOtherParts(t *testing.T) {
	s := newNodeStore(map[string]string{"+447911000001": "a", "198.51.100.7": "b", "GB": "c"})
	f := newNodeFallback(s)
	s.down["a"] = true
	if _, err := f.Take(context.Background(), sendTakes()); err == nil {
		t.Fatal("a closed send whose number's node is down was answered")
	}
	for _, id := range []string{"198.51.100.7", "GB"} {
		if got := s.count(id); got != 0 {
			t.Errorf("%s left spent %d on its live node after the send failed, want 0", id, got)
		}
	}
}

// unindexedCodes saves codes but answers guard.ErrUnindexed, as the store
// does when only the verification id's index (another master) failed.
type unindexedCodes struct{ *guardtest.OutageStore }

func (u unindexedCodes) SaveCode(ctx context.Context, c guard.NewCode) (int, error) {
	if _, err := u.OutageStore.SaveCode(ctx, c); err != nil {
		return 0, err
	}
	return 2, errors.Join(guard.ErrUnindexed, errors.New("connection refused"))
}

// A code saved without its id's index is an answer of the number's node:
// the error reaches the caller with the previous attempts, and the
// node's breaker stays closed however often it happens.
func TestUnindexedCodeKeepsTheBreakerClosed(t *testing.T) {
	st := guardtest.NewOutageStore()
	f := resilience.NewFallback(resilience.FallbackOptions{Counter: st, Codes: unindexedCodes{st},
		Breaker: resilience.BreakerOptions{Failures: 2, OpenFor: time.Hour}})
	for range 10 {
		prev, err := f.SaveCode(context.Background(), guard.NewCode{Phone: "+447911123456", TTL: time.Minute})
		if !errors.Is(err, guard.ErrUnindexed) || prev != 2 {
			t.Fatalf("SaveCode: %d, %v; want 2 and ErrUnindexed", prev, err)
		}
	}
	if b := f.Status().Breaker; b != "closed" {
		t.Errorf("breaker %s after codes saved without their index, want closed", b)
	}
}
