package resilience

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// decider decides a call's takes: by the store when it answers, from
// memory by each take's policy when it does not. On Redis Cluster it
// decides them node by node (nodetake.go), a send's trust mark first
// (trust.go).
type decider struct {
	counter   limit.Counter
	abandoner Abandoner // the counter, when it says which Takes abandon (inline.go)
	calls     *calls
	nodes     *nodes
	memory    *memory
	shared    *sharedRules
	policies  *policies
	log       *slog.Logger
	now       func() time.Time
}

// takeAll is Fallback.Take.
func (d *decider) takeAll(ctx context.Context, takes []limit.Take) ([]limit.Result, error) {
	if d.nodes.multi() {
		res, _, err := d.takeByNode(ctx, takes, nil, false)
		return res, err
	}
	res, _, err := d.take(ctx, d.nodes.get(""), takes, false, d.abandons(takes), nil)
	return res, err
}

// takeSend is Fallback.TakeSend.
func (d *decider) takeSend(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	if d.nodes.multi() {
		return d.takeSendByNode(ctx, takes, vol) // the trust mark first (trust.go)
	}
	sc, ok := d.counter.(guard.SendCounter)
	if !ok || vol == nil {
		res, err := d.takeAll(ctx, takes)
		return res, nil, err
	}
	// vr is written by the call (on this goroutine: wait runs every call
	// on its caller's); it is read only when the store answered.
	var vr *guard.VolumeResult
	res, stored, err := d.take(ctx, d.nodes.get(""), takes, false, false, func(ctx context.Context) ([]limit.Result, error) {
		r, v, err := sc.TakeSend(ctx, takes, vol)
		vr = v
		return r, err
	})
	if err != nil || !stored {
		return res, nil, err
	}
	return res, vr, nil
}

// abandons reports whether the counter abandons Take(ctx, takes).
func (d *decider) abandons(takes []limit.Take) bool {
	return d.abandoner != nil && d.abandoner.TakeAbandons(takes)
}

// take makes one store call (fn) for takes, on node n, and decides them
// from memory when the store cannot answer. stored says the store
// answered. side says none of takes is of the call's own subject (see
// takeByNode): its closed takes are then decided by the split limit
// instead of failing the call. abandons says fn returns as soon as its
// context is cancelled (Abandoner). A nil fn is d.counter.Take(ctx, takes):
// no closure made for it on every check.
func (d *decider) take(ctx context.Context, n *node, takes []limit.Take, side, abandons bool, fn func(ctx context.Context) ([]limit.Result, error)) (_ []limit.Result, stored bool, _ error) {
	// got is written by the call (on this goroutine: wait runs every call
	// on its caller's); it is read only when the store answered (err == nil).
	var got []limit.Result
	err := d.calls.callAs(ctx, n, abandons, func(ctx context.Context) error {
		var r []limit.Result
		var err error
		if fn == nil {
			r, err = d.counter.Take(ctx, takes)
		} else {
			r, err = fn(ctx)
		}
		if err == nil && len(r) != len(takes) {
			err = fmt.Errorf("resilience: store answered %d results for %d takes", len(r), len(takes))
		}
		got = r
		return err
	})
	var res []limit.Result
	if err == nil {
		d.policies.note(takes, false)
		return got, true, nil
	}
	if errors.Is(err, problem.ErrOverloaded) {
		return nil, false, err // shed: never decided from memory, and no outage
	}
	d.policies.note(takes, true)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil, false, err
	}
	for _, t := range takes {
		if mode(t) == limit.FallbackClosed && !side {
			return nil, false, err
		}
	}
	now := d.now()
	res = make([]limit.Result, len(takes))
	for i, t := range takes {
		res[i] = d.memory.take(t, now)
		if side {
			d.shared.fell(n, ruleOf(t.Key))
		}
	}
	return res, false, nil
}

// refund is Fallback.Refund.
func (d *decider) refund(ctx context.Context, takes []limit.Take) error {
	var shared []limit.Take
	now := d.now()
	for _, t := range takes {
		if t.Fallback {
			d.memory.refund(t, now)
		} else {
			shared = append(shared, t)
		}
	}
	if len(shared) == 0 {
		return nil
	}
	var errs []error
	for _, g := range d.nodes.refundGroups(shared) {
		part := pick(shared, g.idx)
		errs = append(errs, d.calls.call(ctx, g.n, func(ctx context.Context) error { return d.counter.Refund(ctx, part) }))
	}
	return errors.Join(errs...)
}

func mode(t limit.Take) limit.FallbackMode {
	if t.OnStoreError == "" {
		return limit.FallbackClosed
	}
	return t.OnStoreError
}
