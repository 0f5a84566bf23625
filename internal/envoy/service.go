package envoy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// Limiter decides checks in one round trip per Redis slot
// (limit.Limiter.Check).
type Limiter interface {
	Check(ctx context.Context, checks []limit.Check) (limit.Batch, error)
}

// Recorder counts decisions in otpguard's metrics, as /limits/check does
// (otpguard_decisions_total and its memory count).
type Recorder interface {
	Decision(policy, outcome string)
	FromMemory(policy string)
}

// Options configure a Service.
type Options struct {
	Recorder Recorder // nil: none
	Metrics  *Metrics // nil: none
	Log      *slog.Logger
	Now      func() time.Time // the clock that aligns windows; nil: time.Now
	// TracerProvider and Propagator continue the gateway's trace from the
	// call's metadata (traceparent); nil: no spans.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	// MaxDescriptors and MaxEntries bound a call: descriptors per request,
	// entries per descriptor (bounds.go); 0: DefaultMaxDescriptors and
	// DefaultMaxEntries.
	MaxDescriptors, MaxEntries int
	// Admission is the bound on decisions in flight that every call takes
	// a slot of (bounds.go); nil: no bound.
	Admission Admission
}

// Service answers ShouldRateLimit from the rules in force.
type Service struct {
	ratelimitv3.UnimplementedRateLimitServiceServer
	set    atomic.Pointer[ruleSet]
	rec    Recorder
	m      *Metrics
	log    *slog.Logger
	now    func() time.Time
	tracer trace.Tracer // nil: no spans, and nothing spent on them
	prop   propagation.TextMapPropagator

	maxDescriptors, maxEntries int
	admission                  Admission // nil: no bound
}

type ruleSet struct {
	rules   *Rules
	limiter Limiter
}

// NewService returns a Service deciding by rules through limiter, whose
// policies must be rules.Policies.
func NewService(rules *Rules, limiter Limiter, o Options) *Service {
	s := &Service{rec: o.Recorder, m: o.Metrics, log: o.Log, now: o.Now, prop: o.Propagator,
		maxDescriptors: o.MaxDescriptors, maxEntries: o.MaxEntries, admission: o.Admission}
	if s.maxDescriptors <= 0 {
		s.maxDescriptors = DefaultMaxDescriptors
	}
	if s.maxEntries <= 0 {
		s.maxEntries = DefaultMaxEntries
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if o.TracerProvider != nil {
		s.tracer = o.TracerProvider.Tracer("github.com/otpguard/otpguard/internal/envoy")
	}
	s.Swap(rules, limiter)
	return s
}

// Swap puts new rules and their limiter in force (a reload): a request
// already under way finishes on the set it started with.
func (s *Service) Swap(rules *Rules, limiter Limiter) {
	s.set.Store(&ruleSet{rules: rules, limiter: limiter})
	s.m.prepare(rules)
}

// Rules are the rules in force.
func (s *Service) Rules() *Rules { return s.set.Load().rules }

// maxCost is the largest hits_addend counted; a larger one is over any
// limit and is answered so without a round trip.
const maxCost = 1_000_000_000

// item is one descriptor of a request on its way to a decision.
type item struct {
	rule  *Rule
	key   string
	cost  int64
	state itemState
	check int // its index in the checks, when state is itemChecked
}

type itemState uint8

const (
	itemUnmatched itemState = iota
	itemUnlimited
	itemReplaced
	itemTooCostly
	itemChecked
)

// ShouldRateLimit decides every descriptor of a request (envoy.service.
// ratelimit.v3.RateLimitService/ShouldRateLimit): each is one decision of
// the policy its rule maps to, all of them in one round trip per Redis
// slot. A Redis that cannot answer is met by each policy's on_store_error,
// never by an error: dynamic_metadata says which policies the fallback
// decided. A request past the bounds is INVALID_ARGUMENT, and one that
// finds no slot free in the admission UNAVAILABLE, both before anything
// is counted.
func (s *Service) ShouldRateLimit(ctx context.Context, req *ratelimitv3.RateLimitRequest) (_ *ratelimitv3.RateLimitResponse, err error) {
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.startSpan(ctx)
		defer span.End()
	}
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if err := s.checkBounds(req); err != nil {
		return nil, err
	}
	if s.admission != nil {
		if !s.admission.Enter(shedRoute) {
			return nil, errOverloaded
		}
		defer func() { s.admission.Leave(err, shedRoute) }()
	}
	set := s.set.Load()
	now := s.now().Unix()
	items, checks, err := s.plan(set.rules, req, now)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	decisions, unavailable, err := decide(ctx, set.limiter, checks)
	if err != nil {
		s.log.ErrorContext(ctx, "envoy: limiter failed", "err", err)
		return nil, status.Error(codes.Internal, "internal error")
	}
	return s.respond(req.GetDomain(), items, decisions, unavailable, now), nil
}

// plan matches each descriptor to its rule and lists the checks to make,
// as the peer's constructLimitsToCheck: a rule named in another matched
// rule's replaces is dropped.
func (s *Service) plan(rules *Rules, req *ratelimitv3.RateLimitRequest, now int64) ([]item, []limit.Check, error) {
	items := make([]item, len(req.Descriptors))
	var replacing map[string]bool
	for i, d := range req.Descriptors {
		var rule *Rule
		var key string
		if d.GetLimit() != nil {
			var err error
			if rule, key, err = rules.override(req.Domain, d); err != nil {
				return nil, nil, fmt.Errorf("descriptor %d: %w", i, err)
			}
		} else {
			rule, key = rules.Match(req.Domain, d.GetEntries())
		}
		items[i] = item{rule: rule, key: key}
		if rule == nil {
			continue
		}
		for _, name := range rule.Replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[name] = true
		}
		cost := uint64(max(1, req.GetHitsAddend()))
		if h := d.GetHitsAddend(); h != nil {
			cost = h.GetValue()
		}
		items[i].cost = int64(min(cost, maxCost+1))
		switch {
		case rule.Unlimited:
			items[i].state = itemUnlimited
		case cost > maxCost:
			items[i].state = itemTooCostly
		default:
			items[i].state = itemChecked
		}
	}
	checks := make([]limit.Check, 0, len(items))
	for i := range items {
		it := &items[i]
		if it.state == itemChecked && it.rule.Name != "" && replacing[it.rule.Name] {
			it.state = itemReplaced
		}
		if it.state != itemChecked {
			continue
		}
		key := it.key
		if !it.rule.Bucket {
			key = windowKey(key, it.rule.Seconds, now)
		}
		it.check = len(checks)
		c := limit.Check{Policy: it.rule.Policy, Key: key, Cost: it.cost}
		if it.rule.Override {
			c.Override, c.Limit = true, int64(it.rule.Limit.RequestsPerUnit)
		}
		checks = append(checks, c)
	}
	return items, checks, nil
}

// decide asks limiter for checks, at most limit.MaxBatch at a time (the
// checks are Independent: splitting them changes no answer). unavailable
// marks the checks of a batch refused because Redis could not answer and a
// policy of it is closed.
func decide(ctx context.Context, limiter Limiter, checks []limit.Check) ([]limit.Decision, []bool, error) {
	var out []limit.Decision
	var unavailable []bool
	for at := 0; at < len(checks); at += limit.MaxBatch {
		part := checks[at:min(len(checks), at+limit.MaxBatch)]
		b, err := limiter.Check(ctx, part)
		switch {
		case err == nil && len(part) == len(checks) && len(b.Decisions) == len(checks):
			// One batch, nearly every call: its decisions are the answer
			// as they are, without a copy (respond only reads them).
			return b.Decisions, nil, nil
		case err == nil:
		case refusedForStore(err):
			if out == nil {
				out = make([]limit.Decision, len(checks))
			}
			if unavailable == nil {
				unavailable = make([]bool, len(checks))
			}
			for j := range part {
				unavailable[at+j] = true
				out[at+j] = limit.Decision{Policy: part[j].Policy, Key: part[j].Key, Mode: limit.ModeFallback}
			}
			continue
		default:
			return nil, nil, err
		}
		if out == nil {
			out = make([]limit.Decision, len(checks))
		}
		copy(out[at:], b.Decisions)
	}
	if out == nil { // no checks
		out = []limit.Decision{}
	}
	return out, unavailable, nil
}

// refusedForStore reports whether err is the limiter's refusal because
// Redis could not answer (a closed policy) or answered too slowly. Apart
// from decide so that its errors.As target is only allocated on an error.
func refusedForStore(err error) bool {
	var gerr *problem.Error
	return errors.As(err, &gerr) && (gerr.Code == problem.CodeStoreUnavailable || gerr.Code == problem.CodeOverloaded)
}

// respond composes the answer as the peer's shouldRateLimitWorker does:
// OVER_LIMIT when a descriptor outside quota_mode is, or when every
// quota_mode descriptor is.
func (s *Service) respond(domain string, items []item, decisions []limit.Decision, unavailable []bool, now int64) *ratelimitv3.RateLimitResponse {
	a := newAnswer(len(items))
	resp := &a.resp
	failed, quotaTotal, quotaFailed := 0, 0, 0
	var fallback []string
	storeDown := false
	counters := s.m.counters(domain)
	for i, it := range items {
		st := resp.Statuses[i]
		st.Code = ratelimitv3.RateLimitResponse_OK
		if counters != nil {
			counters[it.state].Inc()
		}
		switch it.state {
		case itemUnlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		case itemUnmatched, itemReplaced:
			continue
		case itemTooCostly:
			st.Code, st.CurrentLimit = ratelimitv3.RateLimitResponse_OVER_LIMIT, it.rule.Limit
			st.DurationUntilReset = a.reset(i, it.rule, limit.Decision{}, now)
			if it.rule.Shadow {
				st.Code = ratelimitv3.RateLimitResponse_OK
			}
		case itemChecked:
			d := decisions[it.check]
			st.CurrentLimit = it.rule.Limit
			st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
			st.DurationUntilReset = a.reset(i, it.rule, d, now)
			down := unavailable != nil && unavailable[it.check]
			if !d.Allowed || down {
				st.Code = ratelimitv3.RateLimitResponse_OVER_LIMIT
			}
			s.record(d, down)
			if d.Mode == limit.ModeFallback {
				fallback = append(fallback, it.rule.Policy)
				storeDown = storeDown || down
			}
		}
		if it.rule.Quota {
			quotaTotal++
			if st.Code == ratelimitv3.RateLimitResponse_OVER_LIMIT {
				quotaFailed++
			}
		} else if st.Code == ratelimitv3.RateLimitResponse_OVER_LIMIT {
			failed++
		}
	}
	resp.OverallCode = ratelimitv3.RateLimitResponse_OK
	if failed > 0 || (quotaTotal > 0 && quotaTotal == quotaFailed) {
		resp.OverallCode = ratelimitv3.RateLimitResponse_OVER_LIMIT
	}
	if fallback != nil {
		resp.DynamicMetadata = fallbackMetadata(fallback, storeDown)
	}
	return resp
}

// answer is a response and the messages it points to, allocated together:
// a call's answer costs three allocations, however many descriptors it
// carries.
type answer struct {
	resp      ratelimitv3.RateLimitResponse
	statuses  []ratelimitv3.RateLimitResponse_DescriptorStatus
	durations []durationpb.Duration
}

func newAnswer(n int) *answer {
	a := &answer{
		statuses:  make([]ratelimitv3.RateLimitResponse_DescriptorStatus, n),
		durations: make([]durationpb.Duration, n),
	}
	a.resp.Statuses = make([]*ratelimitv3.RateLimitResponse_DescriptorStatus, n)
	for i := range a.statuses {
		a.resp.Statuses[i] = &a.statuses[i]
	}
	return a
}

// reset is status i's duration_until_reset: to the end of the aligned
// window (whole seconds, as the peer's), or until a bucket is full.
func (a *answer) reset(i int, r *Rule, d limit.Decision, now int64) *durationpb.Duration {
	dur := &a.durations[i]
	if r.Bucket {
		dur.Seconds = int64(math.Ceil(d.ResetAfter.Seconds()))
	} else {
		dur.Seconds = r.Seconds - now%r.Seconds
	}
	return dur
}

// record counts one decision as /limits/check counts its own.
func (s *Service) record(d limit.Decision, down bool) {
	if s.rec == nil {
		return
	}
	switch {
	case down:
		s.rec.Decision(d.Policy, string(problem.CodeStoreUnavailable))
	case d.WouldAllow:
		s.rec.Decision(d.Policy, "allowed")
	default:
		s.rec.Decision(d.Policy, string(problem.CodeRateLimited))
	}
	if d.Mode == limit.ModeMemory {
		s.rec.FromMemory(d.Policy)
	}
}

// fallbackMetadata tells the gateway that Redis did not answer: which
// policies the fallback decided, and whether a closed one refused.
func fallbackMetadata(policies []string, storeDown bool) *structpb.Struct {
	list := make([]*structpb.Value, len(policies))
	for i, p := range policies {
		list[i] = structpb.NewStringValue(p)
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"otpguard_decided_by":        structpb.NewStringValue(string(limit.ModeFallback)),
		"otpguard_fallback_policies": structpb.NewListValue(&structpb.ListValue{Values: list}),
		"otpguard_store_unavailable": structpb.NewBoolValue(storeDown),
	}}
}

// startSpan continues the gateway's trace from the call's metadata.
func (s *Service) startSpan(ctx context.Context) (context.Context, trace.Span) {
	if s.prop != nil {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = s.prop.Extract(ctx, mdCarrier(md))
		}
	}
	return s.tracer.Start(ctx, "ShouldRateLimit", trace.WithSpanKind(trace.SpanKindServer))
}

// mdCarrier reads gRPC metadata as a propagation.TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
