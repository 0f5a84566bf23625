package envoy_test

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/otpguard/otpguard/internal/envoy"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// withLimit gives descriptor i its own limit (RateLimitDescriptor.limit).
func withLimit(req *pb.RateLimitRequest, i int, rpu uint32, unit typev3.RateLimitUnit) *pb.RateLimitRequest {
	req.Descriptors[i].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return req
}

// TestLimitOverride: a descriptor's own limit decides it in place of the
// rules, as the peer's GetLimit has it: in a known domain, matched by a
// rule or not, without the rule's name, shadow mode or replaces, each
// descriptor (all its entries) counted in the override's window; in a
// domain no file names, OK without a limit.
func TestLimitOverride(t *testing.T) {
	st, _, _ := redistest.Store(t)
	in := start(t, st.Counters, rulesOf(t, basicYAML, `
domain: shadowed
descriptors:
  - key: k
    rate_limit: {name: mine, unit: second, requests_per_unit: 100, replaces: [{name: other}]}
    shadow_mode: true
  - key: other
    rate_limit: {name: other, unit: second, requests_per_unit: 100}
`), envoy.Options{})

	override := func(domain string, entries [][2]string, rpu uint32, unit typev3.RateLimitUnit) *pb.RateLimitRequest {
		return withLimit(request(domain, [][][2]string{entries}, 1), 0, rpu, unit)
	}
	// key1 has a rule of 50 a second; its override of 2 a minute decides.
	for i, want := range []*pb.RateLimitResponse{
		response(OK, status(OK, 2, MIN, 1)), response(OK, status(OK, 2, MIN, 0)), response(OVER, status(OVER, 2, MIN, 0)),
	} {
		expect(t, in.client, "key1 overridden, call "+string(rune('1'+i)), override("basic", [][2]string{{"key1", "u"}}, 2, typev3.RateLimitUnit_MINUTE), want)
	}
	// Another value is another counter; a descriptor no rule matches is
	// limited by its override all the same.
	expect(t, in.client, "key1 other value", override("basic", [][2]string{{"key1", "v"}}, 2, typev3.RateLimitUnit_MINUTE),
		response(OK, status(OK, 2, MIN, 1)))
	expect(t, in.client, "no rule", override("basic", [][2]string{{"nope", "x"}, {"deeper", "y"}}, 1, typev3.RateLimitUnit_HOUR),
		response(OK, status(OK, 1, HOUR, 0)))
	expect(t, in.client, "no rule again", override("basic", [][2]string{{"nope", "x"}, {"deeper", "y"}}, 1, typev3.RateLimitUnit_HOUR),
		response(OVER, status(OVER, 1, HOUR, 0)))
	// 0 requests refuses, as a rule of 0 does.
	expect(t, in.client, "zero", override("basic", [][2]string{{"key1", "w"}}, 0, typev3.RateLimitUnit_SECOND),
		response(OVER, status(OVER, 0, SEC, 0)))
	// The rule's shadow mode does not carry over, nor its replaces: the
	// other rule still counts.
	req := withLimit(request("shadowed", [][][2]string{{{"k", "a"}}, {{"other", "b"}}}, 1), 0, 0, typev3.RateLimitUnit_SECOND)
	expect(t, in.client, "not shadowed", req,
		response(OVER, status(OVER, 0, SEC, 0), named(status(OK, 100, SEC, 99), "other")))
	// An unknown domain: no limit, override or not.
	expect(t, in.client, "unknown domain", override("nosuch", [][2]string{{"key1", "u"}}, 1, typev3.RateLimitUnit_SECOND),
		response(OK, noLimit()))

	// A unit the peer cannot divide time by fails the call.
	_, err := in.client.ShouldRateLimit(context.Background(), override("basic", [][2]string{{"key1", "u"}}, 1, typev3.RateLimitUnit_UNKNOWN))
	if got := grpcstatus.Code(err); got != codes.InvalidArgument {
		t.Errorf("unknown unit: got code %v (%v), want InvalidArgument", got, err)
	}
}
