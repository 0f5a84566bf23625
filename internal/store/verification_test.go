package store_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

var codeSeq atomic.Int64

// newCode is a code of phone with a fresh verification id, 3 attempts, a
// minute to live.
func newCode(phone string, mac []byte) guard.NewCode {
	return guard.NewCode{Phone: phone, MAC: mac, TTL: time.Minute, MaxAttempts: 3,
		VerificationID: fmt.Sprintf("VE%032x", codeSeq.Add(1)), Now: time.Now(), Retention: guard.VerificationRetention}
}

func verificationStatus(t *testing.T, s *store.Redis, id string) guard.VerificationStatus {
	t.Helper()
	v, err := s.Codes.Verification(context.Background(), id)
	if err != nil {
		t.Fatalf("Verification(%s): %v", id, err)
	}
	return v.Status
}

// codeStores are the stores the lifecycle runs on: real Redis, miniredis
// and the Redis Cluster (where every script must keep to one slot).
func codeStores(t *testing.T) map[string]func(t *testing.T) *store.Redis {
	m := map[string]func(t *testing.T) *store.Redis{
		"cluster": func(t *testing.T) *store.Redis { s, _, _, _ := clusterStore(t); return s },
	}
	for name, mk := range backends(t) {
		m[name] = func(t *testing.T) *store.Redis { b := mk(t); return store.NewRedis(b.rdb, b.prefix) }
	}
	return m
}

// TestVerificationKeepsChannel: a record keeps the channel its code went
// by, read back by id and by its end; an SMS code's record says sms.
func TestVerificationKeepsChannel(t *testing.T) {
	for name, mk := range codeStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			for _, ch := range []string{"", guard.ChannelSMS, guard.ChannelWhatsApp, guard.ChannelCall} {
				c := newCode("+919800000002", []byte("mac-"+ch))
				c.Channel = ch
				if _, err := s.Codes.SaveCode(ctx, c); err != nil {
					t.Fatal(err)
				}
				want := cmp.Or(ch, guard.ChannelSMS)
				if v, err := s.Codes.Verification(ctx, c.VerificationID); err != nil || v.Channel != want {
					t.Errorf("channel %q: read %q, %v; want %q", ch, v.Channel, err, want)
				}
				v, _, err := s.Codes.EndVerification(ctx, guard.Ending{ID: c.VerificationID, Status: guard.StatusCanceled}, time.Now())
				if err != nil || v.Channel != want {
					t.Errorf("channel %q: ended %q, %v; want %q", ch, v.Channel, err, want)
				}
			}
		})
	}
}

// TestVerificationLifecycle walks every transition in the store: pending,
// approved, superseded (canceled), canceled, max_attempts_reached, and
// expired, and the refusals of a verification no longer pending.
func TestVerificationLifecycle(t *testing.T) {
	for name, mk := range codeStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			const phone = "+919800000001"
			now := time.Now()

			if _, err := s.Codes.Verification(ctx, "VE00000000000000000000000000000000"); !errors.Is(err, guard.ErrNotFound) {
				t.Errorf("unknown id: %v, want ErrNotFound", err)
			}
			// pending -> approved
			a := newCode(phone, []byte("mac-a"))
			if _, err := s.Codes.SaveCode(ctx, a); err != nil {
				t.Fatal(err)
			}
			v, err := s.Codes.Verification(ctx, a.VerificationID)
			if err != nil {
				t.Fatal(err)
			}
			if v.Status != guard.StatusPending || v.Phone != phone || v.MaxAttempts != 3 || v.Attempts != 0 ||
				v.ExpiresAt.Sub(v.CreatedAt) != time.Minute || v.CreatedAt.UnixMilli() != a.Now.UnixMilli() {
				t.Errorf("new verification: %+v", v)
			}
			g, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, now)
			if err != nil || g.VerificationID != a.VerificationID {
				t.Fatalf("guess: %+v, %v; want the verification's id", g, err)
			}
			if v, _ := s.Codes.Verification(ctx, a.VerificationID); v.Attempts != 1 {
				t.Errorf("attempts after a guess: %d, want 1", v.Attempts)
			}
			if c, err := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("mac-a"), now); err != nil || c != guard.ConsumedOK {
				t.Fatalf("consume: %v, %v", c, err)
			}
			if st := verificationStatus(t, s, a.VerificationID); st != guard.StatusApproved {
				t.Errorf("after a right guess: %s, want approved", st)
			}
			if _, ok, err := s.Codes.EndVerification(ctx, guard.Ending{ID: a.VerificationID, Status: guard.StatusCanceled}, now); err != nil || ok {
				t.Errorf("cancel of an approved verification: canceled %v, %v; want refused", ok, err)
			}
			if st := verificationStatus(t, s, a.VerificationID); st != guard.StatusApproved {
				t.Errorf("approved, after a refused cancel: %s", st)
			}

			// pending -> canceled by a new send (superseded); the new one pending
			b, c := newCode(phone, []byte("mac-b")), newCode(phone, []byte("mac-c"))
			if _, err := s.Codes.SaveCode(ctx, b); err != nil {
				t.Error(err)
			}
			if _, err := s.Codes.SaveCode(ctx, c); err != nil {
				t.Fatal(err)
			}
			if st := verificationStatus(t, s, b.VerificationID); st != guard.StatusCanceled {
				t.Errorf("superseded: %s, want canceled", st)
			}
			if cons, _ := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("mac-b"), now); cons == guard.ConsumedOK {
				t.Errorf("the superseded code was consumed")
			}
			// pending -> canceled: the code dies with it
			v, ok, err := s.Codes.EndVerification(ctx, guard.Ending{ID: c.VerificationID, Status: guard.StatusCanceled}, now)
			if err != nil || !ok || v.Status != guard.StatusCanceled {
				t.Fatalf("cancel: %+v, %v, %v", v, ok, err)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, now); !errors.Is(err, guard.ErrNotFound) {
				t.Errorf("guess after cancel: %v, want no code", err)
			}
			if v, ok, _ := s.Codes.EndVerification(ctx, guard.Ending{ID: c.VerificationID, Status: guard.StatusCanceled}, now); ok || v.Status != guard.StatusCanceled {
				t.Errorf("second cancel: %+v, %v; want refused, canceled", v, ok)
			}

			// pending -> max_attempts_reached (the caller locks at the last wrong guess)
			d := newCode(phone, []byte("mac-d"))
			if _, err := s.Codes.SaveCode(ctx, d); err != nil {
				t.Error(err)
			}
			for range 3 {
				if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, now); err != nil {
					t.Error(err)
				}
			}
			if err := s.Codes.LockCode(ctx, phone, guard.DefaultService, d.VerificationID, now); err != nil {
				t.Fatal(err)
			}
			v, _ = s.Codes.Verification(ctx, d.VerificationID)
			if v.Status != guard.StatusMaxAttempts || v.Attempts != 3 {
				t.Errorf("locked: %+v, want max_attempts_reached after 3", v)
			}
			if cons, _ := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("mac-d"), now); cons != guard.ConsumedLocked {
				t.Errorf("consume of a locked code: %v, want locked", cons)
			}
			// pending -> expired: the code is gone, the record stays.
			f := newCode("+919800000002", []byte("mac-f"))
			if _, err := s.Codes.SaveCode(ctx, f); err != nil {
				t.Error(err)
			}
			if err := s.Codes.DeleteCodeKeyForTest(ctx, f.Phone); err != nil {
				t.Fatal(err)
			}
			if st := verificationStatus(t, s, f.VerificationID); st != guard.StatusExpired {
				t.Errorf("code gone: %s, want expired", st)
			}
			if v, ok, _ := s.Codes.EndVerification(ctx, guard.Ending{ID: f.VerificationID, Status: guard.StatusCanceled}, now); ok || v.Status != guard.StatusExpired {
				t.Errorf("cancel of an expired verification: %+v, %v; want refused, expired", v, ok)
			}
			// An SMS that never left takes its verification with it.
			h := newCode("+919800000003", []byte("mac-h"))
			if _, err := s.Codes.SaveCode(ctx, h); err != nil {
				t.Error(err)
			}
			if err := s.Codes.DeleteCode(ctx, h.Phone, guard.DefaultService); err != nil {
				t.Error(err)
			}
			if _, err := s.Codes.Verification(ctx, h.VerificationID); !errors.Is(err, guard.ErrNotFound) {
				t.Errorf("verification of an undelivered code: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestVerificationRaces: of 20 concurrent right guesses one approves; of a
// cancel racing a right guess exactly one wins, and the code is dead after.
func TestVerificationRaces(t *testing.T) {
	for name, mk := range codeStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			const phone = "+919800000004"
			now := time.Now()
			c := newCode(phone, []byte("mac"))
			if _, err := s.Codes.SaveCode(ctx, c); err != nil {
				t.Error(err)
			}
			var wins atomic.Int64
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					if cons, err := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("mac"), now); err == nil && cons == guard.ConsumedOK {
						wins.Add(1)
					}
				})
			}
			wg.Wait()
			if wins.Load() != 1 {
				t.Errorf("concurrent right guesses: %d approvals, want 1", wins.Load())
			}
			for i := range 20 {
				c := newCode(phone, []byte("mac"))
				if _, err := s.Codes.SaveCode(ctx, c); err != nil {
					t.Error(err)
				}
				var approved, canceled bool
				var wg sync.WaitGroup
				wg.Go(func() {
					cons, err := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("mac"), now)
					approved = err == nil && cons == guard.ConsumedOK
				})
				wg.Go(func() {
					_, ok, err := s.Codes.EndVerification(ctx, guard.Ending{ID: c.VerificationID, Status: guard.StatusCanceled}, now)
					canceled = err == nil && ok
				})
				wg.Wait()
				st := verificationStatus(t, s, c.VerificationID)
				switch {
				case approved == canceled:
					t.Fatalf("round %d: approved %v, canceled %v; want exactly one", i, approved, canceled)
				case approved && st != guard.StatusApproved, canceled && st != guard.StatusCanceled:
					t.Fatalf("round %d: approved %v canceled %v, status %s", i, approved, canceled, st)
				}
				if cons, _ := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, []byte("mac"), now); cons == guard.ConsumedOK {
					t.Fatalf("round %d: the code lived on", i)
				}
			}
		})
	}
}

// TestIdempotencyClaim: of 30 concurrent claims of one key exactly one
// claims it; the others see it pending, another body sees it reused, and
// once finished every claim replays the answer. A released claim is free.
func TestIdempotencyClaim(t *testing.T) {
	for name, mk := range codeStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			var claimed, pending atomic.Int64
			var wg sync.WaitGroup
			for i := range 30 {
				wg.Go(func() {
					st, _, err := s.IdempotencyKeys.ClaimIdempotencyKey(ctx, "k1", "body", fmt.Sprint("t", i), time.Minute)
					switch {
					case err != nil:
						t.Error(err)
					case st == store.IdempotencyClaimed:
						claimed.Add(1)
					case st == store.IdempotencyPending:
						pending.Add(1)
					}
				})
			}
			wg.Wait()
			if claimed.Load() != 1 || pending.Load() != 29 {
				t.Fatalf("30 claims: %d claimed, %d pending; want 1 and 29", claimed.Load(), pending.Load())
			}
			if st, _, _ := s.IdempotencyKeys.ClaimIdempotencyKey(ctx, "k1", "other", "x", time.Minute); st != store.IdempotencyReused {
				t.Errorf("another body: %s, want reused", st)
			}
			// Only the claim's owner finishes it: find it by trying them all.
			stored := 0
			for i := range 30 {
				if ok, err := s.IdempotencyKeys.FinishIdempotencyKey(ctx, "k1", fmt.Sprint("t", i), []byte("answer"), time.Hour); err != nil {
					t.Fatal(err)
				} else if ok {
					stored++
				}
			}
			if stored != 1 {
				t.Fatalf("answers stored: %d, want 1", stored)
			}
			if st, a, _ := s.IdempotencyKeys.ClaimIdempotencyKey(ctx, "k1", "body", "y", time.Minute); st != store.IdempotencyDone || string(a) != "answer" {
				t.Errorf("after the answer: %s %q, want done \"answer\"", st, a)
			}
			if _, _, err := s.IdempotencyKeys.ClaimIdempotencyKey(ctx, "k2", "body", "a", time.Minute); err != nil {
				t.Error(err)
			}
			if err := s.IdempotencyKeys.ReleaseIdempotencyKey(ctx, "k2", "not-a"); err != nil {
				t.Fatal(err)
			}
			if st, _, _ := s.IdempotencyKeys.ClaimIdempotencyKey(ctx, "k2", "body", "b", time.Minute); st != store.IdempotencyPending {
				t.Errorf("released by another token: %s, want still pending", st)
			}
			if err := s.IdempotencyKeys.ReleaseIdempotencyKey(ctx, "k2", "a"); err != nil {
				t.Error(err)
			}
			if st, _, _ := s.IdempotencyKeys.ClaimIdempotencyKey(ctx, "k2", "body", "b", time.Minute); st != store.IdempotencyClaimed {
				t.Errorf("after release: %s, want claimed", st)
			}
		})
	}
}

// TestSaveCodeCoalesced: on a single Redis a code's save is one command,
// which the Coalescer carries: the saves of concurrent sends that wait
// while a pipeline is on the wire go out together in the next one (a
// MULTI would go out on its own, one round trip each). Each save still
// maps its id to its number for the record's retention, as the MULTI's
// SET did, also when the server lost its scripts (EVAL).
func TestSaveCodeCoalesced(t *testing.T) {
	srv, rdb, c, rt := coalescedClient(t)
	prefix := redistest.Prefix()
	s := store.NewRedis(rdb, prefix)
	ctx := context.Background()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	// saved checks what a save of code left: the id's key, and the record
	// that the id finds through it.
	saved := func(code guard.NewCode) {
		t.Helper()
		idKey := prefix + "ver:{" + code.VerificationID + "}:p"
		if got, err := rdb.Get(ctx, idKey).Result(); err != nil || got != code.Phone {
			t.Errorf("GET %s = %q, %v; want the number %s", idKey, got, err, code.Phone)
		}
		// Set with the record's retention, which no test run comes near
		// spending: a minute's slack only for a slow machine.
		if ttl, err := rdb.PTTL(ctx, idKey).Result(); err != nil || ttl <= code.Retention-time.Minute || ttl > code.Retention {
			t.Errorf("PTTL %s = %v, %v; want the retention %v", idKey, ttl, err, code.Retention)
		}
		if v, err := s.Codes.Verification(ctx, code.VerificationID); err != nil || v.Phone != code.Phone || v.Status != guard.StatusPending {
			t.Errorf("Verification(%s) = %+v, %v; want %s's, pending", code.VerificationID, v, err, code.Phone)
		}
	}

	const senders = 30
	codes := make([]guard.NewCode, senders)
	errs := make([]error, senders)
	for i := range codes {
		codes[i] = newCode(fmt.Sprintf("+9198000200%02d", i), []byte("mac"))
	}
	rt.Reset()
	srv.Pause(300 * time.Millisecond) // the first save waits on the wire; the rest queue behind it
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() { _, errs[i] = s.Codes.SaveCode(ctx, codes[i]) })
	}
	wg.Wait()
	pipelines, cmds := c.Stats()
	if cmds != senders || pipelines > 3 || rt.N() != pipelines {
		t.Errorf("%d saves: %d commands coalesced in %d pipelines, %d round trips; want %d commands in at most 3 pipelines and no other round trip",
			senders, cmds, pipelines, rt.N(), senders)
	}
	for i, code := range codes {
		if errs[i] != nil {
			t.Fatalf("save %d: %v", i, errs[i])
		}
		saved(code)
	}

	if err := rdb.ScriptFlush(ctx).Err(); err != nil { // a private server: no other test's scripts
		t.Fatal(err)
	}
	code := newCode("+919800020099", []byte("mac"))
	if _, err := s.Codes.SaveCode(ctx, code); err != nil {
		t.Fatalf("save after SCRIPT FLUSH: %v", err)
	}
	saved(code)
}
