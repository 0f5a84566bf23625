package guard

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// The cold room (docs/abuse.md, "One room for cold countries"). Every
// limit kept per country multiplies by the countries: a campaign that
// sends each of 35 quiet countries a little under its floor every hour is
// refused by none of them. So the untrusted sends of every country
// without verified history also share one room of the deployment,
// cold_per_hour an hour and cold_per_day in any 24 hours, on top of their
// own limits: however many countries a campaign spreads over, it gets at
// most the room. A country declared in expected is never cold; a country
// leaves the room as its verified history grows. Trusted, safe-listed and
// solved sends never touch it.
//
// A country is warm when its warmth (VolumeResult.Warmth) reaches
// cold_below: its busiest credited hour, in the new numbers' tier or the
// trusted tier, among the hours of the lookback that ended a day or more
// ago, or the numbers an operator imported over the lookback. Not the
// hour's baseline: a ring that verifies its own codes would raise it
// within the hour and leave the room. The last day's hours do not count
// in either tier, so verifying (or farming trust) cannot warm a country
// within a day; a new market's real users warm it once its day-old
// new-number hours hold history_min_sends sends at cold_warm_conversion
// (take_volume.lua): two days or more for a market held to the room,
// whose day (cold_per_day) is under history_min_sends. An import warms it
// at once, and so do its returning users' trusted hours a day old.
//
// The room's hour is a fixed window on a key of the deployment, its day a
// sliding one (24 hourly slices of Redis's clock in one hash, the count
// the sum of the last 24: any 24 hours hold at most cold_per_day), both
// counted with the send's other limits in its round trip. Whether a
// country is cold is known for certain only from the velocity script's
// reply in that same round trip (its Warmth), so each instance keeps
// what the replies said of each country for coldReadingFor, and takes the
// room for a country it has no warm reading for. When the reply then shows
// the country warm, the room's count is given back (a refund: one round
// trip, on the first sends of a warm country an instance has no reading
// for), and a refusal by the room does not stand. On a single Redis the
// reply travels in the send's MULTI whatever the room answered, so the
// send is decided without the room from what that round trip counted; on
// Redis Cluster a refusal by the room stops the send before its velocity
// count, so the reply is asked for alone (one more round trip, then).

// coldKeys are the room's windows: deployment-wide for the default
// service, a service's own for a named one (room.go); one hash tag (one
// slot on Cluster). The day is a hash of hourly slices (limit.Take.Slice),
// a key of its own: the fixed window it replaces, "day", was a string.
func coldKeys(phone Phone) (hourKey, dayKey limit.Key) {
	id := phone.in("global")
	return limit.Key{Space: "otp:cold", ID: id, Name: "hour"}, limit.Key{Space: "otp:cold", ID: id, Name: "day:hours"}
}

// coldDaySlice is the slice of the room's sliding day: an hour, so that
// any 24 clock hours of Redis hold at most cold_per_day.
const coldDaySlice = time.Hour

// coldReadingFor is how long an instance holds a country warm after a
// velocity reply said so (the service's clock). A baseline moves by the
// hour, and every send to the country renews the reading.
const coldReadingFor = 10 * time.Minute

// coldRoom is the cold room of an OTP service: its windows, what this
// instance read of each country, and the room's refusals.
type coldRoom struct {
	policy CountryVelocity
	// mode is the windows' on_store_error, the other shared limits':
	// local is per number, so the room is split (limit / N) instead.
	mode    limit.FallbackMode
	counter limit.Counter // asks for a velocity reply alone (replyAlone)
	hooks   AbuseHooks
	conv    Conversions // the alert's claim; nil: no alert
	events  EventSink
	log     *slog.Logger
	now     func() time.Time

	mu sync.Mutex
	// warm is, per country, until when this instance holds it warm; a
	// country not in it is cold. A few hundred countries at most.
	warm map[string]time.Time
}

// takes are the room's windows for a send to phone of tier whose velocity
// count is vol: none when the room is off, for a send that is not
// untrusted or counts no velocity (safe-listed, solved, trusted, the rule
// off), for a declared country, and for one this instance holds warm. The
// windows are automatic (a refusal of an untrusted send is a challenge;
// the store skips them for a number it finds trusted) and give back their
// own refused hit, as the budget does: a full room stays at its limit, so
// a warm country's refund frees a place at once.
func (c *coldRoom) takes(phone Phone, tier Tier, vol *VolumeTake) []limitedTake {
	if c.policy.ColdPerHour <= 0 || tier != TierNew || vol == nil || vol.NewOff || vol.Trusted || vol.Solved != nil {
		return nil
	}
	if c.policy.Expected[region(phone)] > 0 || c.warmNow(phone.in(region(phone))) {
		return nil
	}
	hourKey, dayKey := coldKeys(phone)
	window := func(k limit.Key, lim int64, w time.Duration, what string) limitedTake {
		return limitedTake{take: limit.Take{Key: k, Algorithm: limit.FixedWindow, Limit: lim, Window: w, Cost: 1,
			Policy: OTPPolicyName, OnStoreError: c.mode, Automatic: true},
			denial: problem.CodeUnusualVolume, what: what, refundDenied: true, cold: true}
	}
	ls := []limitedTake{window(hourKey, c.policy.ColdPerHour, time.Hour,
		"new numbers of quiet countries share one room this hour, and it is full; try again later")}
	if c.policy.ColdPerDay > 0 {
		day := window(dayKey, c.policy.ColdPerDay, 24*time.Hour,
			"new numbers of quiet countries share one room a day, and the last 24 hours filled it; try again later")
		day.take.Slice = coldDaySlice
		ls = append(ls, day)
	}
	return ls
}

// warmNow reports whether this instance holds a country's room (its ID,
// room.go) warm.
func (c *coldRoom) warmNow(room string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.warm[room]
	return ok && c.now().Before(until)
}

// learn keeps what a velocity reply said of a country's room: warm when
// its warmth reaches cold_below, else cold (forgotten).
func (c *coldRoom) learn(room string, warmth int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if warmth >= c.policy.ColdBelow {
		c.warm[room] = c.now().Add(coldReadingFor)
		return
	}
	delete(c.warm, room)
}

// warmth is the country's warmth in vres, the velocity rule's reply to
// vol; false when vres is not one: no reply (a limit refused first on
// Cluster), the fallback's, the trusted tier's, the solved cap's, or a
// count the rule did not judge (NewOff). A reply of the rule has its
// hour's limit, never 0.
func warmth(vol *VolumeTake, vres *VolumeResult) (int64, bool) {
	if vol == nil || vres == nil || vol.Solved != nil || vol.NewOff || vres.Trusted || vres.Fallback || vres.Limit <= 0 {
		return 0, false
	}
	return vres.Warmth, true
}

// settle reads the send's velocity reply (vres) for the room, once its
// limits were taken (res): it learns whether the country is cold and, when
// it is warm, answers the room's windows allowed and returns what they
// counted, to give back. A refusal by the room (it comes last among the
// limits) with no reply to read is decided again with the reply asked for
// alone. A refusal that stands is counted and, once per hour, audited. It
// returns the reply to decide the send with.
func (c *coldRoom) settle(ctx context.Context, phone Phone, limits []limitedTake, takes []limit.Take, res []limit.Result,
	vol *VolumeTake, vres *VolumeResult) (*VolumeResult, []limit.Take) {
	r := phone.in(region(phone))
	warm, read := warmth(vol, vres)
	if read {
		c.learn(r, warm)
	}
	room := -1
	for i, l := range limits {
		if l.cold {
			room = i
			break
		}
	}
	if room < 0 {
		return vres, nil
	}
	deny := -1
	for i, got := range res {
		if !got.Allowed {
			deny = i
			break
		}
	}
	refused := deny >= 0 && limits[deny].cold
	if refused && !read && !res[deny].Fallback && (vres == nil || !vres.Trusted && !vres.Fallback) {
		if v := c.replyAlone(ctx, vol); v != nil {
			vres = v
			if warm, read = warmth(vol, vres); read {
				c.learn(r, warm)
			}
		}
	}
	if read && warm >= c.policy.ColdBelow {
		return vres, dropCold(limits, takes, res)
	}
	if refused && (vres == nil || !vres.Trusted) {
		c.refused(ctx, phone, limits[deny], res[deny])
	}
	return vres, nil
}

// replyAlone takes vol alone, for its reply, when the send's round trip
// stopped before it (nil when the counter cannot, or the store did not
// answer: the country stays cold). The send's Idempotency-Key claim went
// with its limits, so this call carries none.
func (c *coldRoom) replyAlone(ctx context.Context, vol *VolumeTake) *VolumeResult {
	sc, ok := c.counter.(SendCounter)
	if !ok || vol == nil {
		return nil
	}
	_, v, err := sc.TakeSend(context.WithValue(ctx, sendClaimKey{}, (*SendClaim)(nil)), nil, vol)
	if err != nil {
		c.log.WarnContext(ctx, "cold room: reading the country's baseline failed", "err", err)
		return nil
	}
	return v
}

// dropCold answers the room's windows allowed and not spent, and returns
// those the store (or the fallback) counted, to give back.
func dropCold(limits []limitedTake, takes []limit.Take, res []limit.Result) []limit.Take {
	var counted []limit.Take
	for i, l := range limits {
		if !l.cold {
			continue
		}
		if res[i].Spent {
			t := takes[i]
			t.Fallback, t.WindowID = res[i].Fallback, res[i].WindowID
			counted = append(counted, t)
		}
		res[i] = limit.Result{Allowed: true}
	}
	return counted
}

// refused notes a send to phone the room refused (l, with its result r):
// the metric, and once per clock hour across instances the audit trail.
func (c *coldRoom) refused(ctx context.Context, phone Phone, l limitedTake, r limit.Result) {
	country := region(phone)
	if f := c.hooks.ColdRoomRefused; f != nil {
		f(country)
	}
	if c.conv == nil {
		return
	}
	now := c.now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	first, err := c.conv.ClaimAlert(cctx, limit.Key{Space: l.take.Key.Space, ID: l.take.Key.ID, Name: fmt.Sprintf("alert:%d", hour(now))},
		time.Hour+time.Minute)
	cancel()
	if err != nil || !first {
		return
	}
	window := map[bool]string{true: "hour", false: "day"}[l.take.Window == time.Hour]
	c.log.WarnContext(ctx, "COLD ROOM SPENT: new numbers of quiet countries are challenged or refused until it frees",
		"window", window, "limit", l.take.Limit, "country", country)
	c.events.Record(Event{At: now, Action: ActionVelocity, Outcome: string(problem.CodeUnusualVolume), Country: country,
		Service: phone.service, Actor: VelocityActor, TraceID: TraceID(ctx), RequestID: RequestID(ctx),
		Detail: fmt.Sprintf("cold room spent: the %s's %d untrusted sends to countries under %d verified sends an hour are used (%s); new numbers of quiet countries meet a challenge",
			window, l.take.Limit, c.policy.ColdBelow, Usage(r.Count, l.take.Limit, l.take.Window))})
}
