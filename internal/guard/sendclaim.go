package guard

import (
	"context"
	"sync"
	"time"
)

// An Idempotency-Key's claim in a send's first round trip: the
// HTTP layer (httpapi/idempotency.go) does not claim the key on a round
// trip of its own before a send; it hands the claim to the send in its
// context (WithSendClaim), and a store that can (store.Redis on a single
// Redis, SendCounter.TakeSend) runs the claim's script first inside the
// MULTI that takes the send's limits: one atomic step, so of concurrent
// duplicates the one that claims also counts first, and the others count
// after it and give back all they counted (spend). A send that carries a
// key then waits on the send's 2 round trips, as one without.
//
// Where the store does not carry it (a store error, a counter that is no
// SendCounter, a send without the velocity rule), the send claims the key
// on a round trip of its own right after its limits (Separate), before
// anything leaves: one more round trip, and a duplicate that counted its
// limits before the claim was decided gives them back as above.

// Idempotency claim states, as the store's claim script answers them
// (store.Idempotency*).
const (
	ClaimClaimed = "claimed"
	ClaimPending = "pending"
	ClaimReused  = "reused"
	ClaimDone    = "done"
)

// SendClaim is one request's Idempotency-Key claim, for its send to take.
type SendClaim struct {
	Digest  string        // names the record (store: og:idem:{digest}:r)
	Body    string        // the request's digest
	Token   string        // the claim's token
	Pending time.Duration // how long an unanswered claim lives
	// Separate claims the key on its own round trip (the store's
	// ClaimIdempotencyKey through the Fallback): for a send whose store
	// did not carry the claim.
	Separate func(ctx context.Context) (state string, answer []byte, err error)

	mu      sync.Mutex
	settled bool // decided: the store's late word no longer counts
	reached bool // the send took its limits (settle)
	tried   bool // the claim reached the store and it answered
	state   string
	answer  []byte
}

type sendClaimKey struct{}

// WithSendClaim returns ctx carrying c to the send's store call.
func WithSendClaim(ctx context.Context, c *SendClaim) context.Context {
	return context.WithValue(ctx, sendClaimKey{}, c)
}

// SendClaimFrom returns the claim ctx carries, or nil.
func SendClaimFrom(ctx context.Context) *SendClaim {
	c, _ := ctx.Value(sendClaimKey{}).(*SendClaim)
	return c
}

// Carry is the store's answer to the claim it ran with the send's
// limits. A call the Fallback already gave up on may answer late: then
// it is ignored (settled).
func (c *SendClaim) Carry(state string, answer []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.settled {
		return
	}
	c.tried, c.state, c.answer = true, state, answer
}

// settle decides the claim once the send's limits were taken: the
// store's answer when it carried it and answered (storeAnswered), none
// when the store did not answer (the request runs as one without a key,
// as when the claim cannot reach Redis), and otherwise a claim of its
// own.
func (c *SendClaim) settle(ctx context.Context, storeAnswered bool) {
	c.mu.Lock()
	c.settled, c.reached = true, true
	carried := c.tried
	if !storeAnswered {
		c.tried, c.state, c.answer = false, "", nil
	}
	c.mu.Unlock()
	if carried || !storeAnswered || c.Separate == nil {
		return
	}
	state, answer, err := c.Separate(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.tried, c.state, c.answer = true, state, answer
	}
}

// Outcome is the claim's fate for the HTTP layer, once the send
// returned: tried is false when no claim was made, and then reached says
// whether the send took its limits (the store could not answer the
// claim) or ended before them; else state is the claim script's
// (ClaimClaimed: this request owns the key) and answer the kept answer
// when ClaimDone.
func (c *SendClaim) Outcome() (state string, answer []byte, tried, reached bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settled = true
	return c.state, c.answer, c.tried, c.reached
}

// ClaimLost is the error of a send whose claim another request holds (or
// held, with another body): the send gave back all it counted and sent
// nothing; the HTTP layer answers from State.
type ClaimLost struct {
	State  string
	Answer []byte
}

func (e *ClaimLost) Error() string { return "otp: idempotency key " + e.State }

// settleClaim settles ctx's claim, if any, once the send's limits were
// taken (storeAnswered: the store answered them, so it may have carried
// the claim), and returns a *ClaimLost when another request holds it: the
// send must then give back everything it counted, the refusing take too
// (a duplicate is not an attempt), and its velocity count.
func settleClaim(ctx context.Context, storeAnswered bool) *ClaimLost {
	c := SendClaimFrom(ctx)
	if c == nil {
		return nil
	}
	c.settle(ctx, storeAnswered)
	state, answer, tried, _ := c.Outcome()
	if !tried || state == ClaimClaimed {
		return nil
	}
	return &ClaimLost{State: state, Answer: answer}
}
