package resilience

import (
	"context"
	"errors"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// takeSendByNode is takeByNode for a send, with the number's trust mark
// (guard/trust.go) read first when vol carries one. A send's parts go node
// by node and stop at the first denial, so an automatic rule (a prefix or
// country window, limit.Take.Automatic) on an earlier node would refuse a
// trusted send before vol's node could find its mark: the store's own
// per-slot send reads the mark first for the same reason
// (store.clusterTrust). The read goes through vol's node's breaker; when
// it cannot answer, the send goes on as untrusted (the automatic rules
// judge it). A trusted send's automatic takes are answered allowed and not
// counted.
//
// A send found untrusted with the velocity rule off (NewOff) counts
// nothing in its country: vol's keys are then not touched at all.
func (d *decider) takeSendByNode(ctx context.Context, takes []limit.Take, vol *guard.VolumeTake) ([]limit.Result, *guard.VolumeResult, error) {
	vol, trusted, asked := d.trustFirst(ctx, vol)
	if !trusted && vol != nil && vol.NewOff && !vol.Trusted && vol.Solved == nil && (asked || vol.Mark.ID == "") {
		res, _, err := d.takeByNode(ctx, takes, nil, true)
		if err != nil {
			return nil, nil, err
		}
		return res, &guard.VolumeResult{Allowed: true}, nil // not counted
	}
	if !trusted {
		return d.takeByNode(ctx, takes, vol, true)
	}
	var kept []limit.Take
	var idx []int
	for i, t := range takes {
		if !t.Automatic {
			kept, idx = append(kept, t), append(idx, i)
		}
	}
	got, vr, err := d.takeByNode(ctx, kept, vol, true)
	if err != nil {
		return nil, nil, err
	}
	res := make([]limit.Result, len(takes))
	for i := range res {
		res[i] = limit.Result{Allowed: true} // an automatic take: not counted
	}
	for j, i := range idx {
		res[i] = got[j]
	}
	return res, vr, nil
}

// trustFirst reads vol's trust mark, when it carries one and the store
// keeps marks: vol known trusted (the mark cleared) and true when it is
// set; asked says the mark was read (or its node did not answer: the send
// is then untrusted, as a shared rule decided from memory).
func (d *decider) trustFirst(ctx context.Context, vol *guard.VolumeTake) (_ *guard.VolumeTake, trusted, asked bool) {
	tr, ok := d.counter.(guard.Trusts)
	if !ok || vol == nil || vol.Trusted || vol.Mark.ID == "" {
		return vol, false, false
	}
	var set bool
	n := d.nodes.of(vol.Key)
	err := d.calls.call(ctx, n, func(ctx context.Context) (err error) {
		set, err = tr.Trusted(ctx, vol.Mark, vol.Now)
		return err
	})
	if err != nil && !errors.Is(err, problem.ErrOverloaded) {
		d.shared.fell(n, vol.Mark.Space) // the mark's name is the number's HMAC: not a rule's
	}
	if err != nil || !set {
		return vol, false, true
	}
	v := *vol
	v.Trusted, v.Mark = true, limit.Key{}
	return &v, true, true
}
