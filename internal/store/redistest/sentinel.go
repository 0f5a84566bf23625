package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name the Sentinel setup monitors.
const SentinelMaster = "otpguard"

// Sentinel is a private Sentinel setup: one master, one replica and three
// sentinels (quorum 2) that declare the master down after 500 ms.
type Sentinel struct {
	Master, Replica *Server
	sentinels       []*exec.Cmd
	ports           []int
}

// Addrs are the sentinels' host:port.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.ports))
	for i, p := range s.ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out
}

// MasterAddr asks a sentinel where the master is now.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, a := range s.Addrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, DisableIdentity: true, MaxRetries: -1})
		v, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		sc.Close()
		if err == nil && len(v) == 2 {
			return net.JoinHostPort(v[0], v[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel named the master: %v", last)
}

// StartSentinel starts the setup for this test; everything is killed when
// the test ends. Skips (or fails, see Required) without redis-server.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server is not installed (it runs the sentinels too, with --sentinel)")
	}
	s := &Sentinel{Master: Start(t)}
	s.Replica = Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port))
	ctx := context.Background()
	rc := Client(t, s.Replica.URL())
	waitFor(t, 15*time.Second, "the replica to sync", func() bool {
		info, _ := rc.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	dir := t.TempDir()
	for i := range 3 {
		port := freePort(t)
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[3]s 500\n"+
			"sentinel failover-timeout %[3]s 5000\n"+
			"sentinel parallel-syncs %[3]s 1\n", port, dir, SentinelMaster, s.Master.Port)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sentinel: %v", err)
		}
		s.sentinels, s.ports = append(s.sentinels, cmd), append(s.ports, port)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if err := waitPing(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// Ready when every sentinel knows the replica and the two others:
	// only then can they agree on a failover.
	for _, a := range s.Addrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a, DisableIdentity: true, MaxRetries: -1})
		waitFor(t, 20*time.Second, "sentinel "+a+" to see the replica and the other sentinels", func() bool {
			r, _ := sc.Replicas(ctx, SentinelMaster).Result()
			o, _ := sc.Sentinels(ctx, SentinelMaster).Result()
			return len(r) == 1 && len(o) == 2
		})
		sc.Close()
	}
	return s
}

func waitFor(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
