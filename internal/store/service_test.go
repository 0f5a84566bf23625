package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
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
