package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeService answers OVER_LIMIT for odd values, an error for value 7,
// and records the requests it saw. Each answer carries 4 KiB of headers
// to add: the connection's 1 MiB window is used up in 256 answers, so
// that the client must give it back for the calls to go on.
var pad = string(bytes.Repeat([]byte("p"), 4096))

type fakeService struct {
	pb.UnimplementedRateLimitServiceServer
	seen chan *pb.RateLimitRequest
}

func (f *fakeService) ShouldRateLimit(_ context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	f.seen <- req
	v, _ := strconv.Atoi(strings.TrimPrefix(req.Descriptors[0].Entries[0].Value, "v"))
	switch {
	case v == 7:
		return nil, status.Error(codes.InvalidArgument, "seven")
	case v%2 == 1:
		return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OVER_LIMIT,
			Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OVER_LIMIT}}}, nil
	}
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK,
		Statuses:             []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: 5}},
		ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x-pad", Value: pad}}}, nil
}

// The lean client's calls reach a grpc-go server as the request they
// encode, and it reads each answer's code and status, many calls on one
// connection (several connection windows of answers).
func TestLeanClientAgainstGRPCServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	fake := &fakeService{seen: make(chan *pb.RateLimitRequest, 1)}
	pb.RegisterRateLimitServiceServer(srv, fake)
	go func() {
		if err := srv.Serve(lis); err != nil {
			t.Error(err)
		}
	}()
	defer srv.Stop()

	c := config{addr: lis.Addr().String(), domain: "bench", key: "user", values: 10}
	cl, err := dial(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3000 { // over 4 MiB of answers: 4 connection windows
		v := i % c.values
		code, err := cl.call(v)
		req := <-fake.seen
		if got := req.Descriptors[0].Entries[0]; req.Domain != "bench" || got.Key != "user" || got.Value != "v"+strconv.Itoa(v) {
			t.Fatalf("call %d: server saw %v", i, req)
		}
		switch {
		case v == 7:
			if err == nil || strings.HasPrefix(err.Error(), "connection") {
				t.Fatalf("call %d: err %v, want a call's error", i, err)
			}
		case err != nil:
			t.Fatalf("call %d: %v", i, err)
		case v%2 == 1 && code != pb.RateLimitResponse_OVER_LIMIT, v%2 == 0 && code != pb.RateLimitResponse_OK:
			t.Fatalf("call %d (value %d): code %v", i, v, code)
		}
	}
}

func TestOverallCode(t *testing.T) {
	for _, tc := range []struct {
		msg  []byte
		want pb.RateLimitResponse_Code
		ok   bool
	}{
		{[]byte{0, 0, 0, 0, 0}, pb.RateLimitResponse_UNKNOWN, true},
		{[]byte{0, 0, 0, 0, 2, 0x08, 2}, pb.RateLimitResponse_OVER_LIMIT, true},
		// a status first (field 2, length 2), then overall_code OK
		{[]byte{0, 0, 0, 0, 6, 0x12, 2, 0x08, 2, 0x08, 1}, pb.RateLimitResponse_OK, true},
		{[]byte{0, 0, 0, 0, 3, 0x08, 2}, 0, false}, // length prefix wrong
		{[]byte{1, 0, 0, 0, 2, 0x08, 2}, 0, false}, // compressed
		{[]byte{0, 0, 0, 0, 1, 0x08}, 0, false},    // truncated varint
	} {
		got, err := overallCode(tc.msg)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("overallCode(%x) = %v, %v; want %v, ok %v", tc.msg, got, err, tc.want, tc.ok)
		}
	}
}
