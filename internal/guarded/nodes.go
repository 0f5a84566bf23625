package guarded

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// The conversion watch counts a send or a verify under several subjects
// (the number, its prefix, its country), each in its own slot. On Redis
// Cluster the counts go one call per master, each through that master's
// breaker (Fallback.DoFor), so a dead master costs only the tallies of
// the subjects in its slots: they are answered zero (not counted, no
// alert) while every other subject is counted exactly. The call fails
// only when no master answered (on one node: when it did not).

// bySubjectNode groups the subjects of every event by the node that holds
// them: per node, per event, the indexes of its subjects there.
func (g Store) bySubjectNode(counts []guard.ConversionCount) (nodes []string, parts []map[int][]int) {
	at := map[string]int{}
	for i, c := range counts {
		for j, k := range c.Subjects {
			n := g.fb.NodeOf(k)
			p, ok := at[n]
			if !ok {
				p = len(nodes)
				at[n] = p
				nodes, parts = append(nodes, n), append(parts, map[int][]int{})
			}
			parts[p][i] = append(parts[p][i], j)
		}
	}
	return nodes, parts
}

// CountConversions counts the events, one batch per node.
func (g Store) CountConversions(ctx context.Context, window, delay time.Duration, counts []guard.ConversionCount) ([][]guard.Tally, error) {
	out := make([][]guard.Tally, len(counts))
	for i, c := range counts {
		out[i] = make([]guard.Tally, len(c.Subjects))
	}
	nodes, parts := g.bySubjectNode(counts)
	errs := make([]error, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range nodes {
		wg.Go(func() {
			var events []int // indexes into counts, in order
			var sub []guard.ConversionCount
			for i, c := range counts {
				if js := parts[p][i]; len(js) > 0 {
					events = append(events, i)
					sub = append(sub, guard.ConversionCount{Kind: c.Kind, Now: c.Now, Subjects: pickKeys(c.Subjects, js)})
				}
			}
			var ts [][]guard.Tally
			errs[p] = g.fb.DoFor(ctx, sub[0].Subjects[0], func(ctx context.Context) (err error) {
				ts, err = g.st.CountConversions(ctx, window, delay, sub)
				return err
			})
			if errs[p] != nil || len(ts) != len(sub) {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for e, i := range events {
				for s, j := range parts[p][i] {
					if s < len(ts[e]) {
						out[i][j] = ts[e][s]
					}
				}
			}
		})
	}
	wg.Wait()
	return out, allFailed(errs)
}

// CountConversion counts one event, one call per node.
func (g Store) CountConversion(ctx context.Context, kind guard.ConversionKind, now time.Time, window, delay time.Duration, subjects []limit.Key) ([]guard.Tally, error) {
	ts, err := g.CountConversions(ctx, window, delay, []guard.ConversionCount{{Kind: kind, Now: now, Subjects: subjects}})
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}

func pickKeys(keys []limit.Key, idx []int) []limit.Key {
	out := make([]limit.Key, len(idx))
	for j, i := range idx {
		out[j] = keys[i]
	}
	return out
}

// allFailed is the joined errors when every node failed, else nil (a
// node's failure costs only its own subjects' tallies).
func allFailed(errs []error) error {
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}
