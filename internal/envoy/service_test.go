package envoy_test

import (
	"context"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestPeerSequencesOnCluster replays the peer's sequences on a Redis
// Cluster, over two instances: a request's descriptors live on several
// masters.
func TestPeerSequencesOnCluster(t *testing.T) {
	c := redistest.StartCluster(t)
	cluster := func(t *testing.T, rules func() *envoy.Rules) clients {
		prefix := redistest.Prefix()
		var cs clients
		for range 2 {
			u, err := store.NewUniversalClient(store.RedisOptions{Mode: store.RedisCluster, Addrs: c.Addrs(), Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { u.Close() })
			st := store.NewClusterRedis(u.(*redis.ClusterClient), prefix)
			cs = append(cs, start(t, st, rules(), envoy.Options{}).client)
		}
		return cs
	}
	runPeerSequences(t, map[string]setup{"cluster": cluster})
}

// TestOneRoundTrip: every descriptor of a request goes to Redis in one
// round trip (one slot: a single Redis).
func TestOneRoundTrip(t *testing.T) {
	st, trips, _ := redistest.Store(t)
	in := start(t, st, rulesOf(t, basicYAML, anotherYAML), envoy.Options{})
	trips.Reset()
	expect(t, in.client, "three descriptors", request("another", [][][2]string{{{"key2", "a"}}, {{"key3", "a"}}, {{"key4", "a"}}}, 1),
		response(OK, status(OK, 20, MIN, 19), status(OK, 10, HOUR, 9), status(OK, 20, DAY, 19)))
	if n := trips.N(); n != 1 {
		t.Errorf("round trips = %d, want 1", n)
	}
}

const outageYAML = `
domain: outage
descriptors:
  - key: open
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: closed
    rate_limit: {unit: minute, requests_per_unit: 3}
    metadata: {otpguard: {on_store_error: closed}}
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 100}
    metadata: {otpguard: {on_store_error: local, local_limit: 2}}
`

// TestOutage: with Redis gone, the fallback decides by each rule's
// on_store_error and says so in dynamic_metadata; never a gRPC error.
func TestOutage(t *testing.T) {
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: redistest.RefusedURL(t), Timeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	rec := &recorder{}
	fb := resilience.NewFallback(resilience.FallbackOptions{Counter: store.NewRedis(rdb, redistest.Prefix()), Timeout: 10 * time.Millisecond})
	rules := rulesOf(t, outageYAML)
	in := startWith(t, guard.NewLimiter(rules.Policies, fb, nil), rules, envoy.Options{Recorder: rec})

	for i := range 4 { // open: the split limit, 3 over one instance
		code, rem := OK, uint32(3-(i+1))
		if i == 3 {
			code, rem = OVER, 0
		}
		got := expect(t, in.client, "open", request("outage", [][][2]string{{{"open", "x"}}}, 1), response(code, status(code, 3, MIN, rem)))
		expectMetadata(t, got, []string{"outage.open"}, false)
	}
	for i := range 3 { // local: 2 on this instance
		code, rem := OK, uint32(2-(i+1))
		if i == 2 {
			code, rem = OVER, 0
		}
		st := status(code, 100, MIN, rem)
		got := expect(t, in.client, "local", request("outage", [][][2]string{{{"local", "x"}}}, 1), response(code, st))
		expectMetadata(t, got, []string{"outage.local"}, false)
	}
	got := expect(t, in.client, "closed", request("outage", [][][2]string{{{"closed", "x"}}, {{"open", "y"}}}, 1),
		response(OVER, status(OVER, 3, MIN, 0), status(OVER, 3, MIN, 0)))
	expectMetadata(t, got, []string{"outage.closed", "outage.open"}, true)
	if rec.n[[2]string{"outage.closed", string(guard.CodeStoreUnavailable)}] != 1 {
		t.Errorf("decisions recorded: %v, want one store_unavailable for outage.closed", rec.n)
	}
}

func expectMetadata(t *testing.T, got *pb.RateLimitResponse, policies []string, storeDown bool) {
	t.Helper()
	f := got.GetDynamicMetadata().GetFields()
	if f["otpguard_decided_by"].GetStringValue() != "fallback" {
		t.Fatalf("dynamic_metadata = %v, want otpguard_decided_by: fallback", got.GetDynamicMetadata())
	}
	var names []string
	for _, v := range f["otpguard_fallback_policies"].GetListValue().GetValues() {
		names = append(names, v.GetStringValue())
	}
	if len(names) != len(policies) {
		t.Errorf("fallback policies %q, want %q", names, policies)
	}
	if f["otpguard_store_unavailable"].GetBoolValue() != storeDown {
		t.Errorf("otpguard_store_unavailable = %v, want %v", f["otpguard_store_unavailable"], storeDown)
	}
}

// recorder counts decisions as otpguard's metrics would.
type recorder struct{ n map[[2]string]int }

func (r *recorder) Decision(policy, outcome string) {
	if r.n == nil {
		r.n = map[[2]string]int{}
	}
	r.n[[2]string{policy, outcome}]++
}
func (r *recorder) FromMemory(string) {}

// TestHealthAndReflection: the listener answers gRPC health checks for
// the service and lists it by reflection.
func TestHealthAndReflection(t *testing.T) {
	in := startWith(t, guard.NewLimiter(nil, nil, nil), rulesOf(t, basicYAML), envoy.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := grpc_health_v1.NewHealthClient(in.conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: envoy.ServiceName})
	if err != nil || h.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Errorf("health check = %v, %v; want SERVING", h, err)
	}
	stream, err := reflectionpb.NewServerReflectionClient(in.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.GetName() == envoy.ServiceName
	}
	if !found {
		t.Errorf("reflection lists %v, want %s among them", resp.GetListServicesResponse().GetService(), envoy.ServiceName)
	}
}
