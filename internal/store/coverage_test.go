package store_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestClusterCoverageNamesFullCoverageMasters: a master set to
// cluster-require-full-coverage yes is named; with the rest at no nothing
// else is; a user that may not run CONFIG gets every master as unknown,
// and no error.
func TestClusterCoverageNamesFullCoverageMasters(t *testing.T) {
	c := redistest.SharedCluster(t)
	ctx := context.Background()
	_, rdb, _, _ := clusterStore(t)
	var masters []string
	var mu sync.Mutex
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, n.Options().Addr)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(masters)
	node := redis.NewClient(&redis.Options{Addr: masters[0], DisableIdentity: true})
	defer node.Close()
	if err := node.ConfigSet(ctx, "cluster-require-full-coverage", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.ConfigSet(ctx, "cluster-require-full-coverage", "no") })

	cov, err := store.ClusterCoverage(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cov.Full, masters[:1]) || len(cov.Unknown) != 0 {
		t.Errorf("coverage = %+v, want full %v and nothing unknown", cov, masters[:1])
	}
	if w := cov.Warnings(); len(w) != 1 || !strings.Contains(w[0], masters[0]) || !strings.Contains(w[0], "cluster-require-full-coverage") {
		t.Errorf("warnings = %q, want one naming %s", w, masters[0])
	}

	// A user who may run everything but CONFIG, on every node.
	user := strings.TrimSuffix(redistest.Prefix(), ":")
	for _, a := range c.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: a, DisableIdentity: true})
		if err := n.Do(ctx, "ACL", "SETUSER", user, "on", ">pw-"+user, "~*", "+@all", "-config").Err(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Do(ctx, "ACL", "DELUSER", user); n.Close() })
	}
	u, err := store.NewUniversalClient(store.RedisOptions{Mode: store.RedisCluster, Addrs: c.Addrs(),
		Username: user, Password: "pw-" + user, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	cov, err = store.ClusterCoverage(ctx, u.(*redis.ClusterClient))
	if err != nil {
		t.Fatalf("CONFIG forbidden: %v, want no error", err)
	}
	if len(cov.Full) != 0 || len(cov.Unknown) != len(masters) {
		t.Errorf("CONFIG forbidden: coverage = %+v, want every master unknown", cov)
	}
	if w := cov.Warnings(); len(w) != 1 || !strings.Contains(w[0], "could not read") {
		t.Errorf("CONFIG forbidden: warnings = %q, want one saying it could not read", w)
	}
}
