package simulate

// The network's risk score, faked (docs/simulate.md, "The risk score"):
// every number a population makes gets a score once, drawn from the
// population's risk shares, and the instances ask the fake instead of
// Twilio Lookup (app.WithRiskLookup), which counts each lookup so that
// the report can say what the scores cost.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// riskNetwork is the fake Lookup every instance of a run asks.
type riskNetwork struct {
	now func() time.Time
	mu  sync.Mutex
	// scores are the numbers made in the run and the score each got.
	scores map[string]int
	// asked is how many lookups were made since the runner last took them.
	asked int
}

func newRiskNetwork(now func() time.Time) *riskNetwork {
	return &riskNetwork{now: now, scores: map[string]int{}}
}

var _ guard.RiskLookup = (*riskNetwork)(nil)

// errUnknownNumber answers a lookup of a number no population made: the
// send gets what it would without a score.
var errUnknownNumber = errors.New("simulate: the network knows no such number")

// LookupRisk answers the score e164 got when it was made, and counts the
// lookup.
func (n *riskNetwork) LookupRisk(_ context.Context, e164 string) (guard.RiskAnswer, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.asked++
	score, ok := n.scores[e164]
	if !ok {
		return guard.RiskAnswer{}, errUnknownNumber
	}
	return guard.RiskAnswer{Score: score, At: n.now()}, nil
}

// made gives e164 its score, once: a number made again keeps its first.
// The score comes from draw, the population's own stream for scores, and
// is drawn only for a new number, so the run's other draws stay where
// they were.
func (n *riskNetwork) made(e164 string, draw func() int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.scores[e164]; !ok {
		n.scores[e164] = draw()
	}
}

// take returns the lookups made since it was last called. The runner
// calls it after each request: the lookups a request made are the try's.
func (n *riskNetwork) take() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.asked
	n.asked = 0
	return k
}

// riskStream is the rng a population's scores are drawn from: a stream
// of its own, apart from the one its tries and numbers are drawn from.
func riskStream(seed uint64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 1<<32|uint64(i)))
}

// riskShares are the shares of p's numbers scored high and low.
func (p *Population) riskShares() (high, low float64) {
	if p.Risk == nil {
		return defaultRiskHigh, defaultRiskLow
	}
	if p.Risk.High != nil {
		high = *p.Risk.High
	}
	if p.Risk.Low != nil {
		low = *p.Risk.Low
	}
	return high, low
}

// validateRisk checks p's risk shares.
func (p *Population) validateRisk() error {
	if high, low := p.riskShares(); high < 0 || high > 1 || low < 0 || low > 1 || high+low > 1 {
		return fmt.Errorf("high %v and low %v must be shares between 0 and 1 that add up to at most 1", high, low)
	}
	return nil
}

// score draws one number's score from p's risk shares.
func (p *Population) score(r *rand.Rand) int {
	high, low := p.riskShares()
	switch u := r.Float64(); {
	case u < high:
		return RiskHigh
	case u < high+low:
		return RiskLow
	}
	return RiskMid
}
