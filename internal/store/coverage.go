package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Coverage is what the masters of a Redis Cluster say of
// cluster-require-full-coverage.
type Coverage struct {
	// Full are the masters set to "yes" (Redis's default): once any master
	// is marked failed they answer CLUSTERDOWN for every slot, so a dead
	// master stops every decision, not only its own keys'.
	Full []string
	// Unknown are the masters that would not say (CONFIG renamed or
	// forbidden to otpguard's user, or no answer), with why.
	Unknown map[string]string
}

// ClusterCoverage asks every master of c for cluster-require-full-coverage
// (CONFIG GET), at once. A master that cannot be asked is listed in
// Unknown, not an error: CONFIG is often renamed or denied to an
// application's user, and the check only informs.
func ClusterCoverage(ctx context.Context, c *redis.ClusterClient) (Coverage, error) {
	cov := Coverage{Unknown: map[string]string{}}
	var mu sync.Mutex
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		v, err := node.ConfigGet(ctx, "cluster-require-full-coverage").Result()
		mu.Lock()
		defer mu.Unlock()
		switch val, ok := v["cluster-require-full-coverage"]; {
		case err != nil:
			cov.Unknown[addr] = err.Error()
		case !ok:
			cov.Unknown[addr] = "CONFIG GET answered no value"
		case strings.EqualFold(val, "yes"):
			cov.Full = append(cov.Full, addr)
		}
		return nil
	})
	if err != nil {
		return cov, fmt.Errorf("store: redis cluster coverage: %w", err)
	}
	slices.Sort(cov.Full)
	return cov, nil
}

// Warnings are what an operator is told of cov: the masters that require
// full coverage, and those that could not be asked.
func (cov Coverage) Warnings() []string {
	var out []string
	if len(cov.Full) > 0 {
		out = append(out, fmt.Sprintf("redis cluster masters %s have cluster-require-full-coverage yes: "+
			"while one master is down every node answers CLUSTERDOWN and every decision takes its on_store_error; "+
			"set it to no on every node (CONFIG SET cluster-require-full-coverage no, and in redis.conf)",
			strings.Join(cov.Full, ", ")))
	}
	if len(cov.Unknown) > 0 {
		addrs := make([]string, 0, len(cov.Unknown))
		for a := range cov.Unknown {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		out = append(out, fmt.Sprintf("could not read cluster-require-full-coverage from redis cluster masters %s (%s): "+
			"make sure it is no on every node", strings.Join(addrs, ", "), cov.Unknown[addrs[0]]))
	}
	return out
}
