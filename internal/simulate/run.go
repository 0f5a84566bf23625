package simulate

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"
)

// Options are how a run reports as it goes.
type Options struct {
	// Progress receives a line every few seconds of a long run, and what
	// the history and the imports did; nil: silence.
	Progress io.Writer
}

// maxImported bounds the users made up for an imported population that
// has no history to take them from.
const maxImported = 50_000

// Run runs the scenario against the real service and returns what each
// population met in the campaign. The same scenario and seed give the
// same report.
func Run(ctx context.Context, s *Scenario, o Options) (*Report, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	started := time.Now()
	begin := s.Start.Add(-time.Duration(s.History))
	d, err := newDeployment(ctx, s.Instances, s.Policy, scenarioServices(s), begin)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	r := &runner{s: s, d: d, rep: newReport(s), progress: o.Progress, wall: time.Now(), hist: map[string]*Counts{}}
	for i := range s.Populations {
		ps, err := newPopState(s, i)
		if err != nil {
			return nil, fmt.Errorf("populations[%d]: %w", i, err)
		}
		r.pops = append(r.pops, ps)
		r.hist[ps.p.Name] = newCounts()
	}
	for i, ps := range r.pops {
		ps.pool = r.pops[s.owner(i)].pool // returning_to: the owner's users
		ps.risk = d.risk
	}
	end := s.Start.Add(time.Duration(s.Duration))
	for m := begin; m.Before(end); m = m.Add(time.Minute) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if m.Equal(s.Start) {
			r.endHistory(ctx)
		}
		r.minute(ctx, m)
	}
	r.verifyUntil(ctx, end.Add(time.Hour)) // the last minute's codes
	r.rep.roundCosts(s.LookupPrice)
	r.rep.summarise(s)
	r.reportMissed()
	fmt.Fprintf(r.progress, "simulate: %d requests in %s\n", r.requests, time.Since(started).Round(time.Second/10))
	return r.rep, nil
}

// runner is one run in progress.
type runner struct {
	s        *Scenario
	d        *deployment
	rep      *Report
	pops     []*popState
	verifies verifyQueue
	ips      int // client addresses handed out
	requests int
	progress io.Writer
	wall     time.Time // of the last progress line
	// hist is what each population met in the history.
	hist map[string]*Counts
}

// event is one try of a population.
type event struct {
	at  time.Time
	pop int
}

// minute runs the tries of the minute from m, in time order, and the
// verifies that fall due in it.
func (r *runner) minute(ctx context.Context, m time.Time) {
	r.d.advance(m)
	r.d.refreshDeny(ctx)
	var events []event
	for i, ps := range r.pops {
		for range ps.tries(r.s, m) {
			events = append(events, event{at: m.Add(time.Duration(ps.rng.Int64N(int64(time.Minute)))), pop: i})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	for _, e := range events {
		r.verifyUntil(ctx, e.at)
		r.d.advance(e.at)
		r.try(ctx, r.pops[e.pop], e.at)
	}
	r.verifyUntil(ctx, m.Add(time.Minute))
	r.report(m)
}

// try is one send of ps at t: with its challenge solved and resent when
// the population solves it, and its code verified a minute later when it
// verifies.
func (r *runner) try(ctx context.Context, ps *popState, t time.Time) {
	p := ps.p
	// Every draw is made, used or not, so that a policy that answers
	// differently leaves the rest of the run's draws where they were.
	returning, account, solves, verifies := ps.rng.Float64() < p.Returning, ps.rng.Float64() < p.Account,
		ps.rng.Float64() < p.Solve, ps.rng.Float64() < p.Verify
	// A population that takes a fallback draws for it, whether one is
	// offered or not; one that does not draws nothing more, so that its
	// runs stay as they were.
	takes := p.Fallback > 0 && ps.rng.Float64() < p.Fallback
	phone, found := ps.pick(returning, t)
	known := ps.pool.known[phone] // a number verified or imported: trusted
	body := sendBody{Phone: phone, ClientIP: r.ipFor(ps, phone), Account: account, Service: p.Service}
	counts := r.rep.counts(r.s, p.Name, t)
	if counts == nil {
		counts = []*Counts{r.hist[p.Name]}
	} else if returning {
		ps.returningDraws++
		ps.missed += b2i(!found)
	}
	add := func(f func(c *Counts)) {
		for _, c := range counts {
			f(c)
		}
	}
	carrier := "" // counted by carrier only when the report has carriers
	if r.rep.byCarrier {
		carrier = carrierOfNumber(phone).Name
	}
	// The lookups of the network's score this try's sends made are its.
	defer func() {
		if n := r.d.risk.take(); n > 0 {
			add(func(c *Counts) { c.Lookups += n })
		}
	}()
	add(func(c *Counts) {
		c.Tried++
		c.Returning += b2i(known)
		c.ofCarrier(carrier).Tried++
	})
	ans := r.send(ctx, body)
	// A user who takes the fallback channel sends again by it at once,
	// rather than solve the challenge; or after a solved send was held.
	fallBack := func() {
		if r.fallBack(ctx, body, ans.problem.Fallback.Channel, add, known, carrier) && verifies {
			heap.Push(&r.verifies, pending{due: t.Add(time.Minute), phone: phone, pop: ps, counts: counts, seq: r.requests})
		}
	}
	if ans.problem.Code == codeChallenge {
		add(func(c *Counts) {
			c.Challenged++
			c.ReturningChallenged += b2i(known)
			c.ofCarrier(carrier).Challenged++
		})
		if takes && ans.problem.Fallback != nil {
			fallBack()
			return
		}
		solution, ok := "", false
		if solves && ans.problem.Challenge != nil {
			solution, ok = r.d.solve(ans.problem.Challenge)
		}
		if !ok {
			return
		}
		body.Challenge = solution
		ans = r.send(ctx, body)
	}
	if takes && ans.problem.Fallback != nil {
		fallBack()
		return
	}
	if ans.status != http.StatusOK {
		add(countRefusal(ans, known, carrier))
		return
	}
	price := r.s.price(p.Country)
	add(func(c *Counts) { c.Sent++; c.Cost += price; c.ofCarrier(carrier).Sent++ })
	if verifies {
		heap.Push(&r.verifies, pending{due: t.Add(time.Minute), phone: phone, pop: ps, counts: counts, seq: r.requests})
	}
}

func (r *runner) send(ctx context.Context, body sendBody) answer {
	r.requests++
	if body.Service != "" {
		return r.d.sendVerify(ctx, body)
	}
	return r.d.do(ctx, http.MethodPost, "/otp/send", apiKey, body)
}

// ipFor is the client address of a try: a new one each time for a
// population that rotates addresses, else the user's own.
func (r *runner) ipFor(ps *popState, phone string) string {
	if ip, ok := ps.pool.ips[phone]; ok && !ps.p.RotateIP {
		return ip
	}
	r.ips++
	ip := ipOf(r.ips)
	if !ps.p.RotateIP {
		ps.pool.ips[phone] = ip
	}
	return ip
}

// reportMissed says on stderr how many of the campaign's returning tries
// of each population found no user free to return and went to a new
// number instead: the scenario asked for returning users it did not get.
func (r *runner) reportMissed() {
	for _, ps := range r.pops {
		if ps.missed > 0 {
			fmt.Fprintf(r.progress, "returning: %s: %d of its %d returning tries in the campaign found no user free to return "+
				"(each returns at most once in %s) and went to new numbers\n", ps.p.Name, ps.missed, ps.returningDraws, returningEvery)
		}
	}
}

// verifyUntil types the codes due before t, in the order they fell due.
func (r *runner) verifyUntil(ctx context.Context, t time.Time) {
	for len(r.verifies) > 0 && r.verifies[0].due.Before(t) {
		v := heap.Pop(&r.verifies).(pending)
		r.d.advance(v.due)
		r.requests++
		var ans answer
		if svc := v.pop.p.Service; svc != "" {
			ans = r.d.checkVerify(ctx, svc, v.phone, r.d.out.code(v.phone))
		} else {
			ans = r.d.do(ctx, http.MethodPost, "/otp/verify", apiKey, map[string]string{"phone": v.phone, "code": r.d.out.code(v.phone)})
		}
		looked := r.d.risk.take()
		for _, c := range v.counts {
			c.Lookups += looked
		}
		if ans.status == http.StatusOK {
			for _, c := range v.counts {
				c.Verified++
			}
			v.pop.pool.remember(v.phone)
		}
	}
}

// endHistory reports the history and imports the imported populations'
// users, just before the campaign starts.
func (r *runner) endHistory(ctx context.Context) {
	for _, ps := range r.pops {
		if h := r.hist[ps.p.Name]; h.Tried > 0 {
			fmt.Fprintf(r.progress, "history: %s: %d tried, %d sent, %d refused %s, %d verified\n",
				ps.p.Name, h.Tried, h.Sent, h.Refused, codes(h.RefusedByCode), h.Verified)
		}
		if !ps.p.Imported {
			continue
		}
		if len(ps.pool.users) == 0 {
			ps.makeUpUsers(r.s)
		}
		n, err := r.d.importTrusted(ctx, ps.pool.users)
		r.d.risk.take() // an import is no population's try
		if err != nil {
			fmt.Fprintf(r.progress, "import: %s: %d of %d users imported; then %v\n", ps.p.Name, n, len(ps.pool.users), err)
			continue
		}
		fmt.Fprintf(r.progress, "import: %s: %d users imported as trusted numbers\n", ps.p.Name, n)
	}
}

// report writes a progress line every few seconds.
func (r *runner) report(m time.Time) {
	if time.Since(r.wall) < 3*time.Second {
		return
	}
	r.wall = time.Now()
	phase := "campaign"
	if m.Before(r.s.Start) {
		phase = "history"
	}
	fmt.Fprintf(r.progress, "simulate: %s, %s, %d requests so far\n", phase, m.Format("2006-01-02 15:04"), r.requests)
}

// pending is a code a user will type.
type pending struct {
	due    time.Time
	phone  string
	pop    *popState
	counts []*Counts
	seq    int
}

// verifyQueue is the pending verifies, soonest first.
type verifyQueue []pending

func (q verifyQueue) Len() int { return len(q) }
func (q verifyQueue) Less(i, j int) bool {
	return cmp.Or(q[i].due.Compare(q[j].due), cmp.Compare(q[i].seq, q[j].seq)) < 0
}
func (q verifyQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *verifyQueue) Push(x any)   { *q = append(*q, x.(pending)) }
func (q *verifyQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// popState is a population's state in a run.
type popState struct {
	p   *Population
	rng *rand.Rand
	src *numberSource
	// scores is the stream its numbers' risk scores are drawn from, and
	// risk the network that keeps them (nil: none kept).
	scores *rand.Rand
	risk   *riskNetwork
	pool   *userPool // its users: its own, or those of the population it returns to
	acc    float64   // tries owed from earlier minutes' fractions
	// returningDraws is how many of its tries in the campaign were
	// returning ones; missed, how many of them found no user free to
	// return and went to a new number.
	returningDraws, missed int
}

// userPool is the users of one population, shared by the populations that
// return to it (returning_to), and what the numbers they tried did.
type userPool struct {
	users []string             // numbers verified (or imported), for returning tries
	known map[string]bool      // users, as a set
	last  map[string]time.Time // when each number last tried
	ips   map[string]string    // each user's address, when it keeps one
}

func newPopState(s *Scenario, i int) (*popState, error) {
	p := &s.Populations[i]
	src, err := populationSource(p)
	if err != nil {
		return nil, err
	}
	// Each population draws from its own stream: adding one leaves the
	// others' draws as they were.
	return &popState{p: p, rng: rand.New(rand.NewPCG(s.Seed, uint64(i)+1)), src: src, acc: 0.5, scores: riskStream(s.Seed, i),
		pool: &userPool{known: map[string]bool{}, last: map[string]time.Time{}, ips: map[string]string{}}}, nil
}

// tries is how many tries the population makes in the minute from m.
func (ps *popState) tries(s *Scenario, m time.Time) int {
	if m.Before(s.Start) {
		if !ps.p.standing() {
			return 0
		}
	} else if from, until := ps.p.bounds(time.Duration(s.Duration)); m.Before(s.Start.Add(from)) || !m.Before(s.Start.Add(until)) {
		return 0
	}
	ps.acc += ps.p.rate(m)
	n := int(ps.acc)
	ps.acc -= float64(n)
	return n
}

// rate is the population's tries per minute at m.
func (p *Population) rate(m time.Time) float64 {
	if p.PerMinute > 0 {
		return p.PerMinute
	}
	return p.PeakPerHour * DayCurve[m.Hour()] / 60
}

// pick is the number of a try at t: one of its users when returning,
// else a new one; found is whether a returning try found a user. A
// returning user signs in at most once a day: a few draws find one who
// has not tried for a day, or the try goes to a new number (early on,
// when the population has few users, most do), so that a small pool does
// not turn into the same few numbers over and over.
func (ps *popState) pick(returning bool, t time.Time) (phone string, found bool) {
	pool := ps.pool
	for range returningDraws {
		if !returning || len(pool.users) == 0 {
			break
		}
		u := pool.users[ps.rng.IntN(len(pool.users))]
		if last, ok := pool.last[u]; !ok || t.Sub(last) >= returningEvery {
			phone, found = u, true
			break
		}
	}
	if phone == "" {
		phone = ps.newNumber()
	}
	pool.last[phone] = t
	return phone, found
}

// A returning user comes back at most once per returningEvery; pick
// tries returningDraws users before it takes a new number.
const (
	returningEvery = 24 * time.Hour
	returningDraws = 5
)

// newNumber draws a new number and has the network score it.
func (ps *popState) newNumber() string {
	phone := ps.src.draw(ps.rng)
	if ps.risk != nil {
		ps.risk.made(phone, func() int { return ps.p.score(ps.scores) })
	}
	return phone
}

// remember adds a verified number to the pool's users.
func (pool *userPool) remember(phone string) {
	if !pool.known[phone] {
		pool.known[phone] = true
		pool.users = append(pool.users, phone)
	}
}

// makeUpUsers gives an imported population without history the users a
// week of its traffic would have made.
func (ps *popState) makeUpUsers(s *Scenario) {
	perDay := ps.p.PerMinute * 24 * 60
	if ps.p.PeakPerHour > 0 {
		for _, share := range DayCurve {
			perDay += ps.p.PeakPerHour * share
		}
	}
	for range min(maxImported, int(7*perDay)) {
		ps.pool.remember(ps.newNumber())
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
