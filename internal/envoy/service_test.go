package envoy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
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
	in := startWith(t, limit.New(rules.Policies, fb, nil), rules, envoy.Options{Recorder: rec})

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
	if rec.n[[2]string{"outage.closed", string(problem.CodeStoreUnavailable)}] != 1 {
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
	in := startWith(t, limit.New(nil, nil, nil), rulesOf(t, basicYAML), envoy.Options{})
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

// TestMutualTLS: with a client CA, a gateway without a certificate it
// signed is refused; one with it is answered.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "test CA")
	serverCert, serverKey := newCert(t, ca, caKey, "127.0.0.1")
	clientCert, clientKey := newCert(t, ca, caKey, "gateway")
	files := map[string][]byte{"ca.pem": pemOf("CERTIFICATE", ca.Raw), "server.pem": pemOf("CERTIFICATE", serverCert.Raw),
		"server.key": pemKey(t, serverKey)}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	svc := envoy.NewService(rulesOf(t, basicYAML), limit.New(nil, nil, nil), envoy.Options{})
	srv, err := envoy.Listen(envoy.ServerConfig{Addr: "127.0.0.1:0", CertFile: filepath.Join(dir, "server.pem"),
		KeyFile: filepath.Join(dir, "server.key"), ClientCAFile: filepath.Join(dir, "ca.pem")}, svc)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := srv.Serve(); err != nil {
			t.Error(err)
		}
	}()
	defer srv.Stop(context.Background())
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	dial := func(certs []tls.Certificate) error {
		conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(
			&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("foo", [][][2]string{{{"a", "b"}}}, 1))
		return err
	}
	if err := dial(nil); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if err := dial([]tls.Certificate{{Certificate: [][]byte{clientCert.Raw}, PrivateKey: clientKey}}); err != nil {
		t.Errorf("a client with a certificate the CA signed: %v", err)
	}
}

// newCert makes a certificate for name, signed by parent (self-signed, a
// CA, when parent is nil).
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		parent, parentKey = tmpl, key
	} else if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func pemOf(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func pemKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("EC PRIVATE KEY", der)
}

// TestTraceFromMetadata: a call carrying the gateway's traceparent is a
// span of the gateway's trace.
func TestTraceFromMetadata(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	in := startWith(t, limit.New(nil, nil, nil), rulesOf(t, basicYAML),
		envoy.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if _, err := in.client.ShouldRateLimit(ctx, request("foo", [][][2]string{{{"a", "b"}}}, 1)); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("spans %v, want one in trace 4bf92f35...", spans)
	}
}
