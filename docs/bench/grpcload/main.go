// Command grpcload drives envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit, as Envoy's rate-limit filter calls it, on any service
// that speaks it (otpguard, envoyproxy/ratelimit) and prints what it
// measured: calls per second, p50/p99/p999 latency, the answers by
// overall code, and its own CPU per call. Each of -conns connections
// carries one call at a time, in a closed loop; each call has one
// descriptor (-key, a value drawn at random from -values values) in
// -domain. docs/bench/grpc-peers.sh runs it; docs/benchmarks.md has the
// figures.
//
// By default it speaks gRPC's wire format itself (h2.go): requests encoded
// once, one write per call, no transport goroutines, so that less of the
// two cores it shares with the services goes to the client. -grpcgo drives
// grpc-go's client instead (the load client until 3 Dec 2026), with static
// HTTP/2 flow-control windows, as Envoy's: Envoy's HTTP/2 codec sends no
// BDP pings, where grpc-go's client, by default, pings the server on nearly
// every response (with one call in flight on a connection), a read and a
// write more for the server on each call. -grpcgo -bdp turns grpc-go's
// default back on.
//
//	grpcload -addr 127.0.0.1:18190 -conns 64 -duration 10s
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	if err := run(context.Background(), os.Args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "grpcload:", err)
		os.Exit(1)
	}
}

type config struct {
	addr, domain, key string
	conns, values     int
	duration          time.Duration
	grpcgo, bdp       bool
	requests          [][]byte // the lean client's, value i at index i
}

// tally is one connection's count.
type tally struct {
	ok, over, errs int
	lat            []time.Duration
	firstErr       error
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	var c config
	fs.StringVar(&c.addr, "addr", "127.0.0.1:18190", "the service's gRPC host:port")
	fs.StringVar(&c.domain, "domain", "bench", "the request's domain")
	fs.StringVar(&c.key, "key", "user", "the descriptor's key")
	fs.IntVar(&c.conns, "conns", 64, "connections, one call in flight on each")
	fs.IntVar(&c.values, "values", 10000, "distinct descriptor values, drawn at random")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to run")
	fs.BoolVar(&c.grpcgo, "grpcgo", false, "drive grpc-go's client (and proto codec) instead of the lean one")
	fs.BoolVar(&c.bdp, "bdp", false, "with -grpcgo: grpc-go's dynamic flow control (BDP pings), which Envoy does not do")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if c.bdp && !c.grpcgo {
		return fmt.Errorf("-bdp is grpc-go's: use it with -grpcgo")
	}
	callers := make([]caller, c.conns)
	for i := range callers {
		cl, err := dial(ctx, c)
		if err != nil {
			return err
		}
		defer cl.Close()
		callers[i] = cl
		// One call first: the connection is up before the clock starts.
		if _, err := cl.call(rand.IntN(c.values)); err != nil {
			return fmt.Errorf("first call: %w", err)
		}
	}
	tallies := make([]tally, c.conns)
	cpu0, io0 := cpuTime(), syscalls()
	start := time.Now()
	end := start.Add(c.duration)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { tallies[i] = drive(callers[i], c, end) })
	}
	wg.Wait()
	took := time.Since(start)
	io1 := syscalls()
	report(out, c, tallies, took, cpuTime()-cpu0)
	if n := calls(tallies); n > 0 && io0 != nil && io1 != nil {
		fmt.Fprintf(out, "client syscalls %.2f reads %.2f writes per call\n",
			float64(io1["syscr"]-io0["syscr"])/float64(n), float64(io1["syscw"]-io0["syscw"])/float64(n))
	}
	return nil
}

// caller makes calls on one connection, one at a time: value v's request,
// the answer's overall code.
type caller interface {
	call(v int) (pb.RateLimitResponse_Code, error)
	Close() error
}

// dial opens one connection, lean or grpc-go's (-grpcgo).
func dial(ctx context.Context, c config) (caller, error) {
	if !c.grpcgo {
		if c.requests == nil {
			var err error
			if c.requests, err = encodeRequests(c); err != nil {
				return nil, err
			}
		}
		h, err := dialH2(c.addr)
		if err != nil {
			return nil, err
		}
		return leanCaller{h, c.requests}, nil
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if !c.bdp {
		opts = append(opts, grpc.WithStaticStreamWindowSize(64<<10), grpc.WithStaticConnWindowSize(1<<20))
	}
	conn, err := grpc.NewClient(c.addr, opts...)
	if err != nil {
		return nil, err
	}
	return grpcCaller{ctx, conn, pb.NewRateLimitServiceClient(conn), c}, nil
}

type leanCaller struct {
	*h2conn
	requests [][]byte // encoded once, shared by every connection
}

func (l leanCaller) call(v int) (pb.RateLimitResponse_Code, error) { return l.roundTrip(l.requests[v]) }

type grpcCaller struct {
	ctx    context.Context
	conn   *grpc.ClientConn
	client pb.RateLimitServiceClient
	c      config
}

func (g grpcCaller) call(v int) (pb.RateLimitResponse_Code, error) {
	resp, err := g.client.ShouldRateLimit(g.ctx, call(g.c, v))
	return resp.GetOverallCode(), err
}

func (g grpcCaller) Close() error { return g.conn.Close() }

func call(c config, v int) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: c.domain, Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: c.key, Value: "v" + strconv.Itoa(v)}}}}}
}

// drive calls in a closed loop until end.
func drive(cl caller, c config, end time.Time) tally {
	var t tally
	t.lat = make([]time.Duration, 0, 1<<16)
	for {
		v := rand.IntN(c.values)
		at := time.Now()
		if !at.Before(end) {
			return t
		}
		code, err := cl.call(v)
		t.lat = append(t.lat, time.Since(at))
		switch {
		case err != nil:
			t.errs++
			if t.firstErr == nil {
				t.firstErr = err
			}
			if _, broken := err.(*connError); broken {
				return t
			}
		case code == pb.RateLimitResponse_OVER_LIMIT:
			t.over++
		default:
			t.ok++
		}
	}
}

// syscalls is this process's read and write system calls so far
// (/proc/self/io: syscr, syscw); nil where there is none.
func syscalls() map[string]int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return nil
	}
	m := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			m[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return m
}

func calls(tallies []tally) (n int) {
	for _, t := range tallies {
		n += len(t.lat)
	}
	return n
}

// cpuTime is the CPU (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(out io.Writer, c config, tallies []tally, took, cpu time.Duration) {
	var all tally
	for _, t := range tallies {
		all.ok, all.over, all.errs = all.ok+t.ok, all.over+t.over, all.errs+t.errs
		all.lat = append(all.lat, t.lat...)
		if all.firstErr == nil {
			all.firstErr = t.firstErr
		}
	}
	slices.Sort(all.lat)
	q := func(p float64) time.Duration {
		if len(all.lat) == 0 {
			return 0
		}
		return all.lat[min(len(all.lat)-1, int(p*float64(len(all.lat))))]
	}
	n := len(all.lat)
	fmt.Fprintf(out, "calls %d in %s: %.0f calls/s over %d connections\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), c.conns)
	fmt.Fprintf(out, "latency p50 %s p99 %s p999 %s\n", q(0.5), q(0.99), q(0.999))
	fmt.Fprintf(out, "answers OK %d OVER_LIMIT %d errors %d\n", all.ok, all.over, all.errs)
	if n > 0 {
		fmt.Fprintf(out, "client CPU %.1f µs/call\n", float64(cpu.Microseconds())/float64(n))
	}
	if all.firstErr != nil {
		fmt.Fprintf(out, "first error: %v\n", all.firstErr)
	}
}
