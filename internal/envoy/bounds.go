package envoy

import (
	"fmt"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What one call may ask, and how many calls are decided at once. A call is
// the gateway's, but nothing in the protocol bounds it: a request of
// 100,000 descriptors would be 5,000 round trips to Redis (limit.MaxBatch
// checks a trip), and any number of calls could each hold a goroutine and
// a share of Redis while the HTTP API sheds its own requests. So a call
// past a bound is refused before anything is matched or counted, and
// every call takes one of the slots the HTTP API's decisions take.

// DefaultMaxDescriptors is how many descriptors a call may carry unless
// Options say otherwise: Envoy sends one per rate_limits action of the
// route, a handful; 64 leave room for any route one writes and cost at
// most a few round trips (limit.MaxBatch a round trip).
const DefaultMaxDescriptors = 64

// DefaultMaxEntries is how many entries one descriptor may carry unless
// Options say otherwise: a rule's path is as deep as the files nest their
// descriptors, rarely more than four; the entries also make the key.
const DefaultMaxEntries = 16

// Admission bounds the decisions an instance works on at once. Enter takes
// a slot for a call on route, or says false (the call is shed, and the
// admission counts it); Leave gives the slot back with the call's error.
// otpguard passes the HTTP API's (OTPGUARD_MAX_IN_FLIGHT), so that a
// gateway's calls and the API's requests share one bound: neither can
// take the instance from the other.
type Admission interface {
	Enter(route string) bool
	Leave(err error, route string)
}

// shedRoute names ShouldRateLimit to the admission: its gRPC method, the
// route label of what it sheds.
const shedRoute = "/" + ServiceName + "/ShouldRateLimit"

// errOverloaded is a shed call's answer. UNAVAILABLE is what gRPC maps an
// HTTP 503 to and what a client may retry; the gateway's
// failure_mode_deny decides the request meanwhile.
var errOverloaded = status.Error(codes.Unavailable, "overloaded: more decisions in flight than this instance takes; retry")

// checkBounds refuses a request of more descriptors, or a descriptor of
// more entries, than s accepts: the gateway's mistake, INVALID_ARGUMENT,
// as the peer answers a request it cannot read.
func (s *Service) checkBounds(req *ratelimitv3.RateLimitRequest) error {
	descs := req.GetDescriptors()
	if len(descs) > s.maxDescriptors {
		return status.Error(codes.InvalidArgument, fmt.Sprintf("rate limit request carries %d descriptors, more than the %d accepted", len(descs), s.maxDescriptors))
	}
	for i, d := range descs {
		if n := len(d.GetEntries()); n > s.maxEntries {
			return status.Error(codes.InvalidArgument, fmt.Sprintf("descriptor %d carries %d entries, more than the %d accepted", i, n, s.maxEntries))
		}
	}
	return nil
}
