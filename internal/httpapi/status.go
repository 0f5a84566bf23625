package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/opsweb"
	"github.com/otpguard/otpguard/internal/problem"
	"github.com/otpguard/otpguard/internal/resilience"
)

// StoreStatus is the shared store as one instance sees it, for GET /readyz
// and GET /ops/status.
type StoreStatus struct {
	RedisUp    bool
	RedisSince time.Time // since when RedisUp has held
	resilience.FallbackStatus
	// InstancesFrom says where Instances comes from: "heartbeat" (live
	// instances seen in Redis, the last good count while it is away) or
	// "config" (OTPGUARD_INSTANCES).
	InstancesFrom string
	// Database is the ops database's state; nil without the ops desk.
	Database *DatabaseStatus
	// PolicyFile is the policy file's and the overrides' state (live.go);
	// nil: not reported.
	PolicyFile *PolicyFileStatus
	// StoreShed and StoreLate count the store calls given up on, and
	// answered past the timeout, while Redis was healthy (resilience.Fallback's
	// Shed and Late): a saturated host, not an outage.
	StoreShed, StoreLate int64
}

// DatabaseStatus is the ops database as one instance sees it.
type DatabaseStatus struct {
	// State is "up", "down" (its last read failed) or "connecting" (it has
	// not answered since this instance started; it keeps trying).
	State string
	Since time.Time // since when State has held; zero when unknown
	// DenyListLoaded is false until the deny-list was first loaded: until
	// then this instance enforces an empty one.
	DenyListLoaded bool
	DenyEntries    int
}

// health answers whether this instance and its store are up: GET
// /healthz, GET /readyz and GET /ops/status, and the state the ops desk's
// attack view shows.
type health struct {
	ready  func(ctx context.Context) (down []string, err error)
	status func() StoreStatus
	shed   *atomic.Int64 // requests shed by admission since start
	shedAt *atomic.Int64 // when admission last shed one (unix ns; 0: never)
	log    *slog.Logger
}

// healthz: GET /healthz. The process is alive.
func (h *health) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz: GET /readyz. The shared store answers within its budget: on
// Redis Cluster, some master does (a dead master costs only its own keys'
// decisions, which its replica's promotion gives back); the body names
// the masters that did not answer.
func (h *health) readyz(c echo.Context) error {
	var down []string
	if h.ready != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), time.Second)
		defer cancel()
		var err error
		if down, err = h.ready(ctx); err != nil {
			return h.notReady(c, err, down)
		}
	}
	r := h.readyBody()
	r.Down = down
	return c.JSON(http.StatusOK, r)
}

type readyJSON struct {
	Status     string     `json:"status"`
	Redis      string     `json:"redis,omitempty"`
	Breaker    string     `json:"breaker,omitempty"`
	Nodes      []nodeJSON `json:"nodes,omitempty"`
	Down       []string   `json:"down,omitempty"`
	Instances  int        `json:"instances,omitempty"`
	InFallback []string   `json:"in_fallback,omitempty"`
}

// readyBody is /readyz's answer when the store answers.
func (h *health) readyBody() readyJSON {
	r := readyJSON{Status: "ready"}
	if h.status != nil {
		st := h.status()
		r.Redis, r.Breaker, r.Instances, r.InFallback = redisState(st.RedisUp), st.Breaker, st.Instances, st.InFallback()
		r.Nodes = nodesJSON(st.Nodes)
	}
	return r
}

// nodeJSON is one Redis Cluster master's breaker (or "*", the calls whose
// keys span masters).
type nodeJSON struct {
	Node    string `json:"node"`
	Breaker string `json:"breaker"`
}

// nodesJSON lists the named nodes: none on a single Redis or Sentinel,
// whose one node is the breaker itself.
func nodesJSON(ns []resilience.NodeStatus) []nodeJSON {
	var out []nodeJSON
	for _, n := range ns {
		if n.Node != "" {
			out = append(out, nodeJSON{Node: n.Node, Breaker: n.Breaker})
		}
	}
	return out
}

// notReadyJSON is /readyz's 503: the store_unavailable problem, with what
// an operator paged by it wants next (the breaker, N, the policies in
// fallback), as problem extension members.
type notReadyJSON struct {
	httpx.Problem
	Redis      string     `json:"redis"`
	Breaker    string     `json:"breaker,omitempty"`
	Nodes      []nodeJSON `json:"nodes,omitempty"`
	Down       []string   `json:"down,omitempty"`
	Instances  int        `json:"instances,omitempty"`
	InFallback []string   `json:"in_fallback,omitempty"`
}

// readyRetryAfter is when a load balancer should ask /readyz again.
const readyRetryAfter = 5 * time.Second

func (h *health) notReady(c echo.Context, err error, down []string) error {
	h.log.DebugContext(c.Request().Context(), "readyz: the limit store does not answer", "err", err)
	r := h.readyBody()
	retry := httpx.RetrySeconds(readyRetryAfter)
	body := notReadyJSON{
		Problem: httpx.Problem{
			Type: "urn:otpguard:problem:" + string(problem.CodeStoreUnavailable), Title: http.StatusText(http.StatusServiceUnavailable),
			Status: http.StatusServiceUnavailable, Detail: "the limit store does not answer",
			Code: string(problem.CodeStoreUnavailable), RequestID: httpx.RequestID(c), RetryAfter: &retry,
		},
		Redis: "down", Breaker: r.Breaker, Nodes: r.Nodes, Down: down, Instances: r.Instances, InFallback: r.InFallback,
	}
	c.Response().Header().Set("Retry-After", strconv.Itoa(retry))
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	c.Response().WriteHeader(http.StatusServiceUnavailable)
	return httpx.WriteJSON(c.Response(), body)
}

func redisState(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

type policyStatusJSON struct {
	Policy            string     `json:"policy"`
	OnStoreError      string     `json:"on_store_error"`
	InFallback        bool       `json:"in_fallback"`
	Since             *time.Time `json:"since,omitempty"`
	FallbackDecisions int64      `json:"fallback_decisions"`
}

type databaseJSON struct {
	State          string     `json:"state"`
	Since          *time.Time `json:"since,omitempty"`
	DenyListLoaded bool       `json:"deny_list_loaded"`
	DenyEntries    int        `json:"deny_entries"`
}

type statusJSON struct {
	// Status is "ok", or "degraded" while Redis is down, the ops database
	// is not up or the deny-list has not been loaded.
	Status           string             `json:"status"`
	Redis            string             `json:"redis"`
	RedisSince       *time.Time         `json:"redis_since,omitempty"`
	Breaker          string             `json:"breaker"`
	Nodes            []nodeJSON         `json:"nodes,omitempty"`
	Instances        int                `json:"instances"`
	InstancesFrom    string             `json:"instances_from"`
	LastStoreFailure *time.Time         `json:"last_store_failure,omitempty"`
	LocalCounters    int                `json:"local_counters"`
	InFallback       []string           `json:"in_fallback"`
	Policies         []policyStatusJSON `json:"policies"`
	Database         *databaseJSON      `json:"database,omitempty"`
	// The policy file and the emergency overrides in force (live.go).
	PolicyFile *policyFileJSON      `json:"policy_file,omitempty"`
	Overrides  *overridesStatusJSON `json:"overrides,omitempty"`
}

// opsStatus: GET /ops/status. Redis's state, the breaker's, the instance
// count the split limits divide by, which policies are in fallback, and
// the ops database's state (with whether the deny-list is loaded).
func (h *health) opsStatus(c echo.Context) error {
	if h.status == nil {
		return problem.Errorf(problem.CodeNotFound, "this server reports no store status")
	}
	st := h.status()
	out := statusJSON{
		Status: "ok", Redis: redisState(st.RedisUp), RedisSince: timePtr(st.RedisSince),
		Breaker: st.Breaker, Nodes: nodesJSON(st.Nodes), Instances: st.Instances, InstancesFrom: st.InstancesFrom,
		LastStoreFailure: timePtr(st.LastFailure), LocalCounters: st.MemoryKeys,
		InFallback: st.InFallback(), Policies: []policyStatusJSON{},
	}
	for _, p := range st.Policies {
		out.Policies = append(out.Policies, policyStatusJSON{
			Policy: p.Policy, OnStoreError: string(p.OnStoreError), InFallback: p.InFallback,
			Since: timePtr(p.Since), FallbackDecisions: p.Fallbacks,
		})
	}
	if d := st.Database; d != nil {
		out.Database = &databaseJSON{State: d.State, Since: timePtr(d.Since), DenyListLoaded: d.DenyListLoaded, DenyEntries: d.DenyEntries}
		if d.State != "up" || !d.DenyListLoaded {
			out.Status = "degraded"
		}
	}
	var reloadFailed bool
	out.PolicyFile, out.Overrides, reloadFailed = policyFileStatus(st.PolicyFile)
	if !st.RedisUp || reloadFailed {
		out.Status = "degraded"
	}
	return c.JSON(http.StatusOK, out)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// instanceState is this instance's health as the ops desk's attack view
// shows it (opsweb.Options.State).
func (h *health) instanceState() opsweb.State {
	st := opsweb.State{Status: "ok", InFallback: []string{}, Shed: h.shed.Load()}
	if at := h.shedAt.Load(); at != 0 {
		st.ShedAt = time.Unix(0, at)
	}
	if h.status == nil {
		return st
	}
	ss := h.status()
	st.Redis, st.Breaker, st.Instances, st.InFallback = redisState(ss.RedisUp), ss.Breaker, ss.Instances, ss.InFallback()
	st.StoreShed, st.StoreLate = ss.StoreShed, ss.StoreLate
	// A master's breaker half-open is its outage being probed: its slots'
	// decisions still go to the fallback. "*" (calls across masters) is no
	// master.
	for _, n := range ss.Nodes {
		if n.Node == "" || n.Node == "*" {
			continue
		}
		st.Masters++
		if n.Breaker != "closed" {
			st.NodesDown = append(st.NodesDown, n.Node)
		}
	}
	if d := ss.Database; d != nil {
		st.Database = d.State
		if d.State != "up" || !d.DenyListLoaded {
			st.Status = "degraded"
		}
	}
	if !ss.RedisUp || ss.Breaker != "closed" || len(st.InFallback) > 0 {
		st.Status = "degraded"
	}
	return st
}
