// Package redistest gives tests a real Redis: a private redis-server on a
// free loopback port, or the server named by OTPGUARD_TEST_REDIS_URL with a
// unique key prefix. Where neither is available the test is skipped, unless
// OTPGUARD_REQUIRE_SERVICES=1 (as in CI), where it fails.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Required reports whether a missing real service must fail the test.
func Required() bool { return os.Getenv("OTPGUARD_REQUIRE_SERVICES") == "1" }

// Unavailable skips the test, or fails it when services are required.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("real service required (OTPGUARD_REQUIRE_SERVICES=1): %s", msg)
	}
	t.Skipf("skipped, no real service: %s", msg)
}

// Prefix returns a key prefix no other test uses.
func Prefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b) + ":"
}

// Target is a Redis a test may use: its URL and the key prefix to use in it.
type Target struct {
	URL    string
	Prefix string
}

// New returns a real Redis for the test: OTPGUARD_TEST_REDIS_URL when set
// (the test must keep to Prefix: never flush a server you did not start),
// or else a private server started for this test.
func New(t testing.TB) Target {
	t.Helper()
	if url := os.Getenv("OTPGUARD_TEST_REDIS_URL"); url != "" {
		c := client(t, url)
		if err := c.Ping(context.Background()).Err(); err != nil {
			Unavailable(t, "OTPGUARD_TEST_REDIS_URL=%s: %v", url, err)
		}
		return Target{URL: url, Prefix: Prefix()}
	}
	s := Start(t)
	return Target{URL: s.URL(), Prefix: Prefix()}
}

// Client returns a go-redis client for url with generous timeouts, closed
// at the end of the test. It never retries a command, as otpguard's own
// client does not: go-redis retries a command whose reply is late (its
// default read timeout is 3 s), and a counting script that ran and is run
// again counts twice. Under -race on a busy 2-core machine a miniredis
// script did answer past 3 s, and TestVelocityBaseline/miniredis let 29
// sends through an hour of 30: one send counted twice. A late reply now
// waits (clientTimeout), and one later still fails the test with a
// timeout instead of a silent double count.
func Client(t testing.TB, url string) *redis.Client { return client(t, url) }

// clientTimeout is each step's budget (dial, pool, read, write) of a test
// client: a Redis that takes longer is stuck, not busy.
const clientTimeout = 30 * time.Second

func client(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redis url %q: %v", url, err)
	}
	opt.DisableIdentity = true
	opt.MaxRetries = -1 // a retried script may count twice
	opt.Protocol = 2    // as otpguard's own clients (store.NewRedisClient)
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = clientTimeout, clientTimeout, clientTimeout, clientTimeout
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Server is a private redis-server process owned by one test.
type Server struct {
	t    testing.TB
	Port int
	cmd  *exec.Cmd
	args []string
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port) }

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// Start starts a private redis-server on a free loopback port; it is killed
// when the test ends. Skips (or fails, see Required) without the binary.
func Start(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server is not installed (or set OTPGUARD_TEST_REDIS_URL)")
	}
	s := &Server{t: t, Port: freePort(t)}
	s.args = append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", t.TempDir()}, extraArgs...)
	s.start(bin)
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer in 10s: %v", s.Addr(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port, empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	bin, _ := exec.LookPath("redis-server")
	s.start(bin)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
