package guard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"

	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/problem"
)

// Trusted numbers (docs/abuse.md, "Trusted numbers"). A send goes to a
// trusted number when the number verified a code within
// otp.trust.verified_within, when the calling app says it belongs to an
// existing account (SendRequest.Account), or when an operator imported it
// (POST /ops/trusted-numbers). A trusted send keeps every per-number,
// per-IP, cooldown and spend limit and every operator action, but the
// automatic rules (country velocity, the prefix and country windows,
// conversion quarantines) do not refuse it: it meets the trusted tier's
// own cap per country and hour instead, so that numbers an attacker
// managed to verify cannot pump without bound.
//
// Verified numbers are remembered in the shared store as a keyed hash of
// the number (HMAC with the service's HMAC key, 128 bits), never in clear,
// each mark a key of its own that expires verified_within after the last
// verify. The mark's key carries the country as its hash tag, the same as
// the country velocity rule's counters: the velocity script then reads the
// mark and takes the right tier's count in one atomic step, in the round
// trip the send's limits already make (store.TakeSend), also on Redis
// Cluster. The price: on Cluster a country's marks live in one slot.

// TrustPolicy is otp.trust. VerifiedWithin 0 turns the marks off: no
// verify sets one, no send reads one, and an import is refused (a mark
// lives VerifiedWithin); only the account flag still trusts.
type TrustPolicy struct {
	VerifiedWithin time.Duration
	// The trusted tier's cap per country and hour: max(Floor, Factor x the
	// busiest credited hour of trusted sends over the velocity lookback).
	Floor  int64
	Factor float64
	// HoldFor (0: never held) is how long a mark earned in an hour whose
	// new numbers ran above their country's normal waits before it
	// counts (pace.go).
	HoldFor time.Duration
}

// Defaults of otp.trust.
const (
	DefaultVerifiedWithin = 90 * 24 * time.Hour
	DefaultTrustFloor     = 100
	DefaultTrustFactor    = 3
	DefaultHoldFor        = 72 * time.Hour
	maxHoldFor            = 30 * 24 * time.Hour
)

// DefaultTrust is otp.trust when the policy file names none.
func DefaultTrust() TrustPolicy {
	return TrustPolicy{VerifiedWithin: DefaultVerifiedWithin, Floor: DefaultTrustFloor, Factor: DefaultTrustFactor, HoldFor: DefaultHoldFor}
}

// Trusts remembers trusted numbers by their marks (TrustMark): keys that
// name no number in clear. Each call is one round trip.
type Trusts interface {
	// MarkTrusted sets the marks, each expiring ttl from now, and counts
	// credit verifies (the marks that were set before, and those of codes
	// sent in the trusted tier) in the trusted tier of their country's
	// hour, and writes a verify's mark held when its hour was abnormal
	// (TrustMark.Hold); it answers how many verifies it credited there
	// (trusted verifies) and how many marks it held; an import's marks
	// with a Tier are counted there as imported. Idempotent but for the
	// credit and the import's count.
	MarkTrusted(ctx context.Context, marks []TrustMark, ttl time.Duration) (Marked, error)
	// Trusted reports whether mark counts at now: set, and not held past
	// now.
	Trusted(ctx context.Context, mark limit.Key, now time.Time) (bool, error)
}

// Marked is what MarkTrusted did: Trusted verifies credited to the
// trusted tier, Held marks written held, ByCarrier marks whose hour was
// judged by their carrier's counts (pace.go), held or not.
type Marked struct {
	Trusted   int
	Held      int
	ByCarrier int
}

// TrustMark is one number's mark: the key to set, and the trusted tier's
// counters of its country and the hour to credit a verify to (Credit
// false: an import, which credits no verify; with Tier set it is counted
// there as imported, and Volume's warmth of the hour is read again). A verify is credited when the
// mark was set before it, or when its code was sent in the trusted tier
// (SentTrusted: the app's account flag, whose number may have no mark
// yet), since that is where its send counted.
type TrustMark struct {
	Key         limit.Key
	Tier        limit.Key
	Hour        int64
	Credit      bool
	SentTrusted bool
	TTL         time.Duration // the tier counters' TTL

	// The hold of a verify's mark (pace.go); Hold 0: never held. Volume is
	// the country's velocity counts (same hash tag as Key), whose hour is
	// abnormal above max(Floor, Factor x its baseline). With
	// CarrierFloorShare > 0, Carrier is the number's carrier's counts
	// within the country (carriershare.go), which judge the hour instead
	// while the carriers split the country's room.
	Hold              time.Duration
	Now               time.Time
	Volume            limit.Key
	Floor             int64
	Factor            float64
	Carrier           limit.Key
	CarrierFloorShare float64
}

// MaxTrustImport is the most numbers one import may name.
const MaxTrustImport = 10000

// trustMarkKey is phone's mark: the first 128 bits of HMAC-SHA256(key,
// "trust:" + E.164), base64url, under its country's hash tag, in its
// service's room (room.go): trust earned with one service is not
// another's.
func trustMarkKey(hmacKey []byte, phone Phone) limit.Key {
	m := hmac.New(sha256.New, hmacKey)
	m.Write([]byte("trust:"))
	m.Write([]byte(phone.E164))
	return limit.Key{Space: "otp:tr", ID: phone.in(region(phone)), Name: base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])}
}

// trust is what a send and a verify do with trusted numbers: read and set
// their marks, and count the trusted tier.
type trust struct {
	trusts  Trusts // nil: only the account flag trusts
	policy  TrustPolicy
	hmacKey []byte
	safe    safeList
	// velocity: the volume count a trusted send completes; its volumes
	// nil: no volume store, the mark is read on its own.
	velocity *velocity
	events   EventSink
	log      *slog.Logger
	now      func() time.Time
	// heldNoted: the hours whose held marks this instance audited (pace.go).
	heldNoted heldNotes
}

// on reports whether marks are read and written.
func (s *trust) on() bool {
	return s.trusts != nil && s.policy.VerifiedWithin > 0
}

// trustedNow reports whether phone is trusted, reading its mark at once
// (one round trip): for a send an automatic block would refuse.
func (s *trust) trustedNow(ctx context.Context, phone Phone, account bool) bool {
	if account {
		return true
	}
	if !s.on() {
		return false
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	ok, err := s.trusts.Trusted(cctx, trustMarkKey(s.hmacKey, phone), s.now())
	return err == nil && ok
}

// rememberVerified marks phone trusted for verified_within from now and
// credits the verify to the trusted tier when its code was sent there
// (sent, the tier its verification carries) or the number was trusted
// (its mark was set before this verify); it reports whether either held:
// a trusted verify, which teaches the new tier's baselines nothing
// (creditable). A trusted send's verify is one whatever the store
// answers, so that it never falls to the new tier.
func (s *trust) rememberVerified(ctx context.Context, phone Phone, sent Tier) bool {
	sentTrusted := sent == TierTrusted
	if !s.on() || s.safe.has(phone.E164) || limit.StoreFailed(ctx) {
		return sentTrusted // a verify the store failed in waits on it no more
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convTimeout)
	defer cancel()
	now := s.now()
	m := TrustMark{Key: trustMarkKey(s.hmacKey, phone), Tier: trustedTierKey(phone.in(region(phone))),
		Hour: hour(now), Credit: true, SentTrusted: sentTrusted, TTL: s.velocity.policy.ttl(), Now: now}
	s.holdIfAbnormal(&m, phone)
	n, err := s.trusts.MarkTrusted(cctx, []TrustMark{m}, s.policy.VerifiedWithin)
	if err != nil {
		s.log.WarnContext(ctx, "trust: remembering a verified number failed", "err", err)
	}
	if n.Held > 0 {
		s.held(ctx, phone, m.Hour, n.ByCarrier > 0)
	}
	return sentTrusted || n.Trusted > 0
}

// importMark is an imported number's mark. With the velocity rule's
// counts, the import is counted in its country's trusted tier (Tier, at
// the hour under way), where it warms the country at once (coldroom.go):
// an operator's import is the one word on a country's users that no ring
// can give.
func (s *trust) importMark(p Phone) TrustMark {
	m := TrustMark{Key: trustMarkKey(s.hmacKey, p)}
	if v := s.velocity; v != nil && v.volumes != nil {
		r := p.in(region(p))
		m.Tier, m.Volume, m.Hour, m.TTL, m.Now = trustedTierKey(r), velocityKey(r), hour(s.now()), v.policy.ttl(), s.now()
	}
	return m
}

// ImportResult is the answer to an import of trusted numbers.
type ImportResult struct {
	Imported int
	Invalid  []int // indexes of the numbers that are not valid E.164
}

// importTrusted marks numbers trusted for verified_within (an operator's
// import of the numbers an app verified before it used otpguard), and
// records it in the audit trail with the counts only (no number).
// Idempotent: importing a number again only renews its mark. Imported
// counts distinct numbers: a number listed twice is marked, and counted,
// once.
func (s *trust) importTrusted(ctx context.Context, numbers []string, actor string) (ImportResult, error) {
	if len(numbers) > MaxTrustImport {
		return ImportResult{}, problem.Errorf(problem.CodeInvalidRequest, "at most %d numbers per import, got %d", MaxTrustImport, len(numbers))
	}
	if !s.on() {
		return ImportResult{}, problem.Errorf(problem.CodeInvalidRequest, "trusted numbers are off (otp.trust.verified_within is 0)")
	}
	var res ImportResult
	marks := make([]TrustMark, 0, len(numbers))
	seen := make(map[string]bool, len(numbers))
	for i, n := range numbers {
		p, err := ParsePhone(n, "")
		if err != nil || p.E164 != n {
			res.Invalid = append(res.Invalid, i)
			continue
		}
		if seen[p.E164] {
			continue
		}
		seen[p.E164] = true
		marks = append(marks, s.importMark(p))
	}
	if len(marks) > 0 {
		if _, err := s.trusts.MarkTrusted(ctx, marks, s.policy.VerifiedWithin); err != nil {
			s.log.Log(ctx, limit.StoreFailureLevel(err), "trust: import failed", "err", err)
			return ImportResult{}, limit.StoreError(err)
		}
	}
	res.Imported = len(marks)
	s.events.Record(Event{At: s.now(), Action: ActionTrustImport, Outcome: "imported", Actor: actor,
		Detail:  fmt.Sprintf("imported=%d invalid=%d", res.Imported, len(res.Invalid)),
		TraceID: TraceID(ctx), RequestID: RequestID(ctx)})
	return res, nil
}
