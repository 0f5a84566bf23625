package resilience

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// takeByNode decides takes (and vol, when not nil) on Redis Cluster: one
// store call per node, each through that node's breaker, so a take whose
// master is alive is decided exactly by the store whatever happens to the
// other masters, and only the takes of a failed node take their fallback.
//
// The call's own subject is its first take's (the number, for a send):
// when a node holding none of its keys cannot answer, that node's closed
// takes (a send's per-IP limit) are decided by the split limit on this
// instance, like open, rather than refusing the call; OTP's closed
// refuses a send only when the number's own keys are unreachable. A part
// that fails with the subject's keys fails the call, and what the other
// parts spent goes back.
//
// A send's parts (send, with or without vol) go one after another, in the
// order of its limits, and stop at the first denial, as the store's own
// per-slot send does (store.TakeSend): the rest are not counted, nor is
// vol. vol goes last, alone, on its node, as the store takes it after
// every limit allowed. Were a send's parts taken concurrently, every
// request a number's own limit refuses would also count, for a moment,
// against the shared limits (per prefix, per country) on other nodes, and
// a send the number's limit allowed could meet that passing count and be
// refused. A check's parts (not send) go concurrently.
func (d *decider) takeByNode(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake, send bool) ([]limit.Result, *guard.VolumeResult, error) {
	groups := d.nodes.groups(takes)
	if vol != nil { // last, alone: counted only when every limit allowed
		groups = append(groups, group{n: d.nodes.of(vol.Key)})
	}
	lead := ""
	if len(takes) > 0 {
		lead = takes[0].Key.ID
	}
	parts := make([]part, len(groups))
	for i, g := range groups {
		parts[i] = part{group: g, takes: pick(takes, g.idx), send: send}
		parts[i].side = !slices.ContainsFunc(parts[i].takes, func(t limit.Take) bool { return t.Key.ID == lead })
		if vol != nil && i == len(groups)-1 {
			parts[i].vol = vol
		}
	}
	if send {
		d.runUntilDenied(ctx, parts)
	} else {
		d.runConcurrently(ctx, parts)
	}
	res := make([]limit.Result, len(takes))
	var vr *guard.VolumeResult
	var failed error
	for _, p := range parts {
		if p.err != nil {
			failed = cmp.Or(failed, p.err)
			continue
		}
		for j, i := range p.idx {
			res[i] = p.res[j]
		}
		if p.vr != nil {
			vr = p.vr
		}
	}
	if failed != nil {
		d.refundSpent(ctx, takes, parts)
		return nil, nil, failed
	}
	return res, vr, nil
}

// part is the takes of one node and what deciding them gave.
type part struct {
	group
	takes []limit.Take
	side  bool
	send  bool // a send's part: its slots in order, as store.TakeSend takes them
	vol   *guard.VolumeTake
	res   []limit.Result
	vr    *guard.VolumeResult
	err   error
}

// run decides p on its node.
func (d *decider) run(ctx context.Context, p *part) {
	sc, _ := d.counter.(guard.SendCounter)
	// A plain Take, not a TakeSend: only those may abandon (Abandoner).
	plain := sc == nil || (p.vol == nil && !p.send)
	var vr *guard.VolumeResult // read only when the store answered
	res, stored, err := d.take(ctx, p.n, p.takes, p.side, plain && d.abandons(p.takes), func(ctx context.Context) ([]limit.Result, error) {
		if plain {
			return d.counter.Take(ctx, p.takes)
		}
		r, v, err := sc.TakeSend(ctx, p.takes, p.vol)
		vr = v
		return r, err
	})
	p.res, p.err = res, err
	switch {
	case stored && p.vol != nil:
		p.vr = vr
		d.shared.rememberVolume(p.vol, vr)
	case err == nil && p.vol != nil:
		// vol's node did not answer (its part holds no key of the
		// number's): the rule decides from memory, as any shared key.
		p.vr = d.shared.volumeFromMemory(p.n, p.vol)
	}
}

func (d *decider) runConcurrently(ctx context.Context, parts []part) {
	if len(parts) == 1 {
		d.run(ctx, &parts[0])
		return
	}
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() { d.run(ctx, &parts[i]) })
	}
	wg.Wait()
}

// runUntilDenied decides the parts in order; after a denial (or a
// failure) the rest are answered allowed and not counted, and vol, when
// not taken yet, is answered not counted.
func (d *decider) runUntilDenied(ctx context.Context, parts []part) {
	stop := false
	for i := range parts {
		p := &parts[i]
		if stop {
			p.res = make([]limit.Result, len(p.takes))
			for j := range p.res {
				p.res[j] = limit.Result{Allowed: true} // not counted: nothing to refund
			}
			if p.vol != nil {
				p.vr = &guard.VolumeResult{}
			}
			continue
		}
		d.run(ctx, p)
		stop = p.err != nil || slices.ContainsFunc(p.res, func(r limit.Result) bool { return !r.Allowed })
	}
}

// refundSpent gives back what the parts that answered spent, for a call
// that failed as a whole.
func (d *decider) refundSpent(ctx context.Context, takes []limit.Take, parts []part) {
	var back []limit.Take
	for _, p := range parts {
		if p.err != nil {
			continue
		}
		for j, i := range p.idx {
			if r := p.res[j]; r.Spent {
				t := takes[i]
				t.Fallback, t.WindowID = r.Fallback, r.WindowID
				back = append(back, t)
			}
		}
	}
	if len(back) == 0 {
		return
	}
	if err := d.refund(context.WithoutCancel(ctx), back); err != nil && !errors.Is(err, limit.ErrStoreUnavailable) {
		d.log.Debug("refund of a failed call's other parts failed", "err", err)
	}
}
