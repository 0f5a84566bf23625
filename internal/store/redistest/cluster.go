package redistest

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a private Redis Cluster of three masters, each with one
// replica, on free loopback ports, with cluster-node-timeout 1000 ms: a
// killed master's replica is promoted a second or two later (KillNode).
type Cluster struct {
	nodes []*exec.Cmd
	ports []int
	dir   string
	owned bool // dir was made here and is removed by Stop
}

// clusterNodes is how many nodes a Cluster runs: three masters and a
// replica each.
const clusterNodes = 6

// Addrs are every node's host:port, the seeds for a cluster client.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.ports))
	for i, p := range c.ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out
}

// KillNode kills the node at addr at once (SIGKILL), as a crash would. It
// reports whether addr was one of the cluster's running nodes.
func (c *Cluster) KillNode(addr string) bool {
	for i, a := range c.Addrs() {
		if a == addr && c.nodes[i].Process != nil && c.nodes[i].ProcessState == nil {
			_ = c.nodes[i].Process.Kill()
			_ = c.nodes[i].Wait()
			return true
		}
	}
	return false
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, cmd := range c.nodes {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	c.nodes = nil
	if c.owned {
		_ = os.RemoveAll(c.dir)
	}
}

// Client returns a cluster client with generous timeouts, closed when the
// test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DisableIdentity: true})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// StartCluster starts a cluster (three masters, a replica each) owned by
// this test: one it may kill nodes of. Tests
// that can share one should use SharedCluster: forming a cluster takes a
// few seconds.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startCluster(t.TempDir(), false)
	if err != nil {
		clusterUnavailable(t, err)
	}
	t.Cleanup(c.Stop)
	return c
}

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// SharedCluster returns the test binary's one Redis Cluster, started by
// the first test that asks. The package's TestMain must call StopShared
// after m.Run. Tests keep to their own key prefix (Prefix).
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "otpguard-cluster-")
		if err != nil {
			shared.err = err
			return
		}
		shared.c, shared.err = startCluster(dir, true)
		if shared.err != nil {
			_ = os.RemoveAll(dir)
		}
	})
	if shared.err != nil {
		clusterUnavailable(t, shared.err)
	}
	return shared.c
}

// StopShared stops the shared cluster, if one was started.
func StopShared() {
	if shared.c != nil {
		shared.c.Stop()
	}
}

// errMissing marks a binary that is not installed.
type errMissing string

func (e errMissing) Error() string { return string(e) + " is not installed" }

func clusterUnavailable(t testing.TB, err error) {
	t.Helper()
	if _, ok := err.(errMissing); ok {
		Unavailable(t, "%v", err)
	}
	t.Fatalf("redis cluster: %v", err)
}

func startCluster(dir string, owned bool) (c *Cluster, err error) {
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errMissing("redis-server")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, errMissing("redis-cli")
	}
	c = &Cluster{dir: dir, owned: owned}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := range clusterNodes {
		port, err := freeClusterPort()
		if err != nil {
			return nil, err
		}
		ndir := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return nil, err
		}
		cmd := exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", ndir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			// Slots of live masters keep answering while one master is down
			// (the default, yes, answers CLUSTERDOWN on every slot).
			"--cluster-require-full-coverage", "no")
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start redis-server: %w", err)
		}
		c.nodes, c.ports = append(c.nodes, cmd), append(c.ports, port)
		if err := waitPing(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second); err != nil {
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	return c, c.waitFormed(30 * time.Second)
}

// waitFormed waits until every node agrees the cluster is up and sees
// every node, and every replica is in sync with its master (a replica
// that never synced is not promoted).
func (c *Cluster) waitFormed(d time.Duration) error {
	deadline := time.Now().Add(d)
	known := fmt.Sprintf("cluster_known_nodes:%d", clusterNodes)
	for _, addr := range c.Addrs() {
		rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
		for {
			info, _ := rc.ClusterInfo(context.Background()).Result()
			repl, _ := rc.Info(context.Background(), "replication").Result()
			if strings.Contains(info, "cluster_state:ok") && strings.Contains(info, known) &&
				strings.Contains(info, "cluster_slots_ok:16384") &&
				(strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				rc.Close()
				return fmt.Errorf("node %s: cluster not ok after %s: %q", addr, d, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rc.Close()
	}
	return nil
}

func waitPing(addr string, d time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(d)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis on %s did not answer in %s: %w", addr, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freeClusterPort finds a free loopback port p whose cluster bus port
// (p+10000) is free too, and so below 55536.
func freeClusterPort() (int, error) {
	for range 100 {
		p := 20000 + mrand.IntN(30000)
		a, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000)))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port pair (p, p+10000) for a cluster node")
}
