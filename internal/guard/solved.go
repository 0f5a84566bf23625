package guard

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// The solved tier (challenge.go): a send whose challenge was solved meets
// the solved cap per country and hour instead of the automatic rules, and
// the verification it makes carries a mark (tiermark.go), so that its
// verify counts in the solved tier's own conversion watch.

// SolvedUse is what a VolumeTake of the solved tier adds: the solution's
// single-use key and how long it must live, and the country's velocity
// counts, whose baseline is the solved cap.
type SolvedUse struct {
	Used limit.Key // same hash tag as the VolumeTake's Key
	TTL  time.Duration
	Base limit.Key // the country's velocity counts (velocityKey); same hash tag
	// Uncut: the cap without the conversion watch's cuts, the country's
	// and its carrier's (vouched.go: a solved send the network vouches
	// for, which the vouched tier's cap refused).
	Uncut bool
	// Vouched (nil: none) is the send's place in the vouched tier's cap
	// (a VolumeTake of vouched.go), tried first in the same atomic step:
	// while that cap has room the send counts there and not in this cap
	// (VolumeResult.Vouched), its solution taken all the same
	// (vouchedplace.go).
	Vouched *VolumeTake
}

// SolvedCapTake is the take of a send of service ("" the default
// service) after a solved challenge to region's numbers of carrier (its
// key, CarrierKey; "" for the country's cap alone) at now under p,
// without a solution: what the ops desk reads the solved cap in force
// with (read only), by the figures the send's own take carries.
func SolvedCapTake(p OTPPolicy, region, service, carrier string, now time.Time) VolumeTake {
	v := p.CountryVelocity
	u := unverifiedTakeOf(v, p.Challenge.On())
	id := RoomID(region, service)
	t := solvedCapTake(v, p.Challenge, p.Conversion.HistoryMinSends, u, region, id, now)
	if carrier != "" && v.carrierSplit() {
		t.Carrier = carrierTakeFor(id, Carrier{Key: carrier}, v.CarrierFloorShare, true)
	}
	return t
}

// solvedCap is the solved tier's cap per country and hour, and its cut.
type solvedCap struct {
	policy     ChallengePolicy
	velocity   *velocity   // the rule whose mechanism the cap reuses
	challenges *challenges // a reused solution gets a new challenge
	volumes    Volumes
	hooks      AbuseHooks
	log        *slog.Logger
	now        func() time.Time
}

// denied is the refusal of a solved send: its solution was used
// already (a new challenge), or the country's solved cap is spent.
func (s *solvedCap) denied(ctx context.Context, phone Phone, t VolumeTake, res VolumeResult) error {
	if res.Reused {
		return s.challenges.newChallenge(ctx, phone, "this solution was used already; solve the new challenge",
			problem.Errorf(problem.CodeChallengeRequired, "solution reused"))
	}
	if f := s.hooks.VelocityRefused; f != nil {
		f(region(phone))
	}
	retry := time.Unix((t.Hour+1)*3600, 0).Sub(t.Now)
	msg := "unusually many challenged codes were sent to this country this hour; try again later"
	if res.Carrier { // the carrier's share of the cap, or its cut (carriershare.go)
		msg = "unusually many challenged codes were sent to this carrier's numbers in this country this hour; try again later"
	}
	return &problem.Error{Code: problem.CodeUnusualVolume, RetryAfter: retry, Usage: Usage(res.Count+1, res.Limit, time.Hour), Message: msg,
		Err: errSolvedCap}
}

// errSolvedCap marks a refusal by the solved cap: its code is the velocity
// rule's (unusual_volume; the API's answer does not change), and the audit
// event is marked Solved by it (recordTier), so the desk can tell the two
// apart.
var errSolvedCap = errors.New("the solved cap")

// cut cuts the solved cap of a country's room (its ID, room.go) to a
// tenth (its solved sends are not verified), or only its carrier's when
// carrier names one (the
// solved tier's conversion watch judges each carrier; carriershare.go).
func (s *solvedCap) cut(ctx context.Context, room, carrier string) bool {
	if s.volumes == nil {
		return false
	}
	d := s.policy.CutFor
	if d <= 0 {
		d = s.velocity.policy.QuarantineFor
	}
	k := solvedCutKey(room)
	if carrier != "" {
		_, _, k = carrierKeys(room, carrier)
	}
	if err := s.volumes.Quarantine(ctx, k, s.now().Add(d), d); err != nil {
		s.log.WarnContext(ctx, "challenge: cutting the solved cap failed", "room", room, "carrier", carrier, "err", err)
		return false
	}
	return true
}

// solvedCountTTL is how long a country's solved counts live after a
// verify's count: the store's own TTL for them (store: solvedTTL).
const solvedCountTTL = 2 * time.Hour

// credit counts the verify of a solved send's code in its country's
// solved counts, which back the hour's solved sends (take_solved.lua).
func (s *solvedCap) credit(ctx context.Context, phone Phone) {
	if s.volumes == nil || s.velocity.unverifiedTake().Floor == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	c := s.velocity.carrierTake(phone, true).Key
	if err := s.volumes.CountVerified(cctx, solvedKey(phone.in(region(phone))), c, hour(s.now()), solvedCountTTL); err != nil {
		s.log.WarnContext(ctx, "challenge: counting a solved verify failed", "err", err)
	}
}
