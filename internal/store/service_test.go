package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store"
)

// TestCodesOfServices: a code and its verification belong to the service
// that sent it. Another service's guess finds no code and counts nothing,
// its cancel or approval finds no verification, and a guess for another
// verification of the same service finds none either; the owner's guess,
// read and end work as before.
func TestCodesOfServices(t *testing.T) {
	const (
		a = "VAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		b = "VAbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	)
	for name, mk := range codeStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			const phone = "+919800000077"
			now := time.Now()
			c := newCode(phone, []byte("mac-a"))
			c.Service = a
			if _, err := s.Codes.SaveCode(ctx, c); err != nil {
				t.Fatal(err)
			}
			if v, err := s.Codes.Verification(ctx, c.VerificationID); err != nil || v.Service != a {
				t.Fatalf("read: %+v, %v; want service %s", v, err, a)
			}
			for _, of := range []guard.GuessOf{{}, {Service: b}, {Service: a, VerificationID: "VE" + a[2:]}} {
				if _, err := s.Codes.GuessCode(ctx, phone, of, now); !errors.Is(err, guard.ErrNotFound) {
					t.Errorf("guess of %+v: %v, want ErrNotFound", of, err)
				}
			}
			for _, other := range []string{guard.DefaultService, b} {
				e := guard.Ending{ID: c.VerificationID, Service: other, Status: guard.StatusCanceled}
				if _, _, err := s.Codes.EndVerification(ctx, e, now); !errors.Is(err, guard.ErrNotFound) {
					t.Errorf("cancel by %q: %v, want ErrNotFound", other, err)
				}
			}
			if v, _ := s.Codes.Verification(ctx, c.VerificationID); v.Attempts != 0 || v.Status != guard.StatusPending {
				t.Errorf("after the others' tries: %+v, want pending with 0 attempts", v)
			}
			g, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: a, VerificationID: c.VerificationID}, now)
			if err != nil || g.Attempts != 1 {
				t.Fatalf("owner's guess: %+v, %v; want attempt 1", g, err)
			}
			v, ended, err := s.Codes.EndVerification(ctx, guard.Ending{ID: c.VerificationID, Service: a, Status: guard.StatusApproved}, now)
			if err != nil || !ended || v.Status != guard.StatusApproved || v.Service != a {
				t.Errorf("owner's approval: %+v, %v, %v; want approved", v, ended, err)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: a}, now); !errors.Is(err, guard.ErrNotFound) {
				t.Errorf("guess after approval: %v, want ErrNotFound (the code is gone)", err)
			}
		})
	}
}

// TestCodesOfServicesLiveTogether: each service keeps its own live code
// per number. A send of one service supersedes only its own earlier code;
// the default service's and the other's stay pending and are guessed,
// locked, consumed, canceled and deleted each on its own. The default
// service's code keeps its key of before services (og:otp:{+E164}:code).
func TestCodesOfServicesLiveTogether(t *testing.T) {
	const (
		a = "VAaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		b = "VAbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	)
	for name, mk := range codeStores(t) {
		t.Run(name, func(t *testing.T) {
			s := mk(t)
			ctx := context.Background()
			const phone = "+919800000078"
			now := time.Now()
			save := func(service, mac string) guard.NewCode {
				t.Helper()
				c := newCode(phone, []byte(mac))
				c.Service = service
				if _, err := s.Codes.SaveCode(ctx, c); err != nil {
					t.Fatal(err)
				}
				return c
			}
			def, ca, cb := save(guard.DefaultService, "mac-d"), save(a, "mac-a"), save(b, "mac-b")
			ca2 := save(a, "mac-a2") // supersedes a's first code only
			want := map[string]guard.VerificationStatus{def.VerificationID: guard.StatusPending,
				ca.VerificationID: guard.StatusCanceled, cb.VerificationID: guard.StatusPending, ca2.VerificationID: guard.StatusPending}
			for id, st := range want {
				if got := verificationStatus(t, s, id); got != st {
					t.Errorf("%s: got %s, want %s", id, got, st)
				}
			}
			// Each guess finds its own service's code.
			for _, c := range []guard.NewCode{def, cb, ca2} {
				g, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: c.Service}, now)
				if err != nil || string(g.MAC) != string(c.MAC) || g.VerificationID != c.VerificationID {
					t.Errorf("guess of %q: %+v, %v; want %s's code", c.Service, g, err, c.VerificationID)
				}
			}
			// b's code locked: a's and the default's stay.
			if err := s.Codes.LockCode(ctx, phone, b, cb.VerificationID, now); err != nil {
				t.Fatal(err)
			}
			if got := verificationStatus(t, s, cb.VerificationID); got != guard.StatusMaxAttempts {
				t.Errorf("b after its lock: %s, want max_attempts_reached", got)
			}
			// A MAC of another service's code consumes nothing of this one's.
			if c, err := s.Codes.ConsumeCode(ctx, phone, guard.DefaultService, ca2.MAC, now); err != nil || c != guard.ConsumedNot {
				t.Errorf("default consuming a's MAC: %v, %v; want ConsumedNot", c, err)
			}
			if c, err := s.Codes.ConsumeCode(ctx, phone, a, ca2.MAC, now); err != nil || c != guard.ConsumedOK {
				t.Errorf("a consuming its code: %v, %v; want ConsumedOK", c, err)
			}
			if got := verificationStatus(t, s, def.VerificationID); got != guard.StatusPending {
				t.Errorf("default after a's approval: %s, want pending", got)
			}
			// a's cancel of its approved code is refused; the default's cancel ends only its own.
			if _, ended, err := s.Codes.EndVerification(ctx, guard.Ending{ID: def.VerificationID, Status: guard.StatusCanceled}, now); err != nil || !ended {
				t.Errorf("default's cancel: %v, %v; want ended", ended, err)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{}, now); !errors.Is(err, guard.ErrNotFound) {
				t.Errorf("default's guess after its cancel: %v, want ErrNotFound", err)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: b}, now); err != nil {
				t.Errorf("b's guess after the default's cancel: %v, want b's code still there", err)
			}
			if err := s.Codes.DeleteCode(ctx, phone, b); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: b}, now); !errors.Is(err, guard.ErrNotFound) {
				t.Errorf("b's guess after its delete: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestDefaultCodeKeyKept: the default service's code is where it was
// before services, so a code saved before an upgrade is found after it.
func TestDefaultCodeKeyKept(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			ctx := context.Background()
			const phone = "+919800000079"
			if _, err := s.Codes.SaveCode(ctx, newCode(phone, []byte("mac"))); err != nil {
				t.Fatal(err)
			}
			key := b.prefix + "otp:{" + phone + "}:code"
			if n, err := b.rdb.Exists(ctx, key).Result(); err != nil || n != 1 {
				t.Errorf("EXISTS %s: %d, %v; want 1", key, n, err)
			}
		})
	}
}
