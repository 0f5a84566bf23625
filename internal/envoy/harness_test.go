package envoy_test

import (
	"context"
	"math"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/resilience"
)

// now is the tests' clock: the middle of a day, so that no window of a
// sequence rolls over under it (the peer's own tests race the clock).
var now = time.Unix(1_800_000_000/86400*86400+43_200+17, 0)

// instance is one otpguard Envoy service on a real loopback listener.
type instance struct {
	svc    *envoy.Service
	client pb.RateLimitServiceClient
	conn   *grpc.ClientConn
	addr   string
}

// rulesOf loads files given as name -> YAML.
func rulesOf(t *testing.T, files ...string) *envoy.Rules {
	t.Helper()
	var fs []envoy.File
	for i, y := range files {
		f, err := envoy.ParseFile("config"+string(rune('a'+i))+".yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	r, err := envoy.Load(fs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// start serves rules over counter (the shared store, through a Fallback
// as otpguard runs it) on 127.0.0.1:0 and dials it.
func start(t *testing.T, counter limit.Counter, rules *envoy.Rules, o envoy.Options) *instance {
	t.Helper()
	fb := resilience.NewFallback(resilience.FallbackOptions{Counter: counter, Timeout: 5 * time.Second})
	return startWith(t, limit.New(rules.Policies, fb, nil), rules, o)
}

func startWith(t *testing.T, lim envoy.Limiter, rules *envoy.Rules, o envoy.Options) *instance {
	t.Helper()
	if o.Now == nil {
		o.Now = func() time.Time { return now }
	}
	svc := envoy.NewService(rules, lim, o)
	srv, err := envoy.Listen(envoy.ServerConfig{Addr: "127.0.0.1:0"}, svc)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := srv.Serve(); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Stop(ctx)
	})
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &instance{svc: svc, client: pb.NewRateLimitServiceClient(conn), conn: conn, addr: srv.Addr().String()}
}

// request is the peer's common.NewRateLimitRequest: descriptors as lists
// of key/value pairs.
func request(domain string, descs [][][2]string, hits uint32) *pb.RateLimitRequest {
	req := &pb.RateLimitRequest{Domain: domain, HitsAddend: hits}
	for _, d := range descs {
		desc := &commonv3.RateLimitDescriptor{}
		for _, e := range d {
			desc.Entries = append(desc.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req
}

// withHits sets descriptor i's own hits_addend.
func withHits(req *pb.RateLimitRequest, i int, hits uint64) *pb.RateLimitRequest {
	req.Descriptors[i].HitsAddend = wrapperspb.UInt64(hits)
	return req
}

var unitSecs = map[pb.RateLimitResponse_RateLimit_Unit]int64{
	pb.RateLimitResponse_RateLimit_SECOND: 1, pb.RateLimitResponse_RateLimit_MINUTE: 60,
	pb.RateLimitResponse_RateLimit_HOUR: 3600, pb.RateLimitResponse_RateLimit_DAY: 86400,
	pb.RateLimitResponse_RateLimit_WEEK: 7 * 86400, pb.RateLimitResponse_RateLimit_MONTH: 30 * 86400,
	pb.RateLimitResponse_RateLimit_YEAR: 365 * 86400,
}

// status is the peer's newDescriptorStatus, its reset computed on the
// tests' clock.
func status(code pb.RateLimitResponse_Code, rpu uint32, unit pb.RateLimitResponse_RateLimit_Unit, remaining uint32) *pb.RateLimitResponse_DescriptorStatus {
	s := unitSecs[unit]
	return &pb.RateLimitResponse_DescriptorStatus{Code: code,
		CurrentLimit:       &pb.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: s - now.Unix()%s}}
}

// named is status with the rule's rate_limit.name.
func named(s *pb.RateLimitResponse_DescriptorStatus, name string) *pb.RateLimitResponse_DescriptorStatus {
	s.CurrentLimit.Name = name
	return s
}

const (
	OK   = pb.RateLimitResponse_OK
	OVER = pb.RateLimitResponse_OVER_LIMIT
	SEC  = pb.RateLimitResponse_RateLimit_SECOND
	MIN  = pb.RateLimitResponse_RateLimit_MINUTE
	HOUR = pb.RateLimitResponse_RateLimit_HOUR
	DAY  = pb.RateLimitResponse_RateLimit_DAY
)

// noLimit is the status of a descriptor no rule covers (or replaced).
func noLimit() *pb.RateLimitResponse_DescriptorStatus {
	return &pb.RateLimitResponse_DescriptorStatus{Code: OK}
}

// unlimited is the status of an unlimited rule.
func unlimited() *pb.RateLimitResponse_DescriptorStatus {
	return &pb.RateLimitResponse_DescriptorStatus{Code: OK, LimitRemaining: math.MaxUint32}
}

func response(overall pb.RateLimitResponse_Code, st ...*pb.RateLimitResponse_DescriptorStatus) *pb.RateLimitResponse {
	return &pb.RateLimitResponse{OverallCode: overall, Statuses: st}
}

// expect sends req and compares the answer with want (dynamic metadata
// left out: expectMetadata reads it).
func expect(t *testing.T, c pb.RateLimitServiceClient, step string, req *pb.RateLimitRequest, want *pb.RateLimitResponse) *pb.RateLimitResponse {
	t.Helper()
	got, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: ShouldRateLimit: %v", step, err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform(), protocmp.IgnoreFields(&pb.RateLimitResponse{}, "dynamic_metadata")); diff != "" {
		t.Fatalf("%s: answer (-want +got):\n%s", step, diff)
	}
	return got
}
