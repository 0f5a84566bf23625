package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store"
)

// TestReadCode: the ops desk's read of a live code (read_code.lua) says
// the guesses counted against it of its maximum and whether it is
// locked, and counts nothing: reading twice, and then guessing, counts
// the guesses alone. Past the maximum it says the maximum, locked. A
// named service's code is read as its own: the default service's first,
// then a named one's beside it, which reads as none until it is sent.
func TestReadCode(t *testing.T) {
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			b := mk(t)
			s := store.NewRedis(b.rdb, b.prefix)
			for _, svc := range []string{guard.DefaultService, "VA00000000000000000000000000000003"} {
				readCodeSteps(t, s, svc)
			}
		})
	}
}

func readCodeSteps(t *testing.T, s *store.Redis, svc string) {
	ctx := context.Background()
	const phone = "+14155550177"
	if _, err := s.Codes.ReadCode(ctx, phone, svc); !errors.Is(err, guard.ErrNotFound) {
		t.Fatalf("service %q, no code: got %v, want ErrNotFound", svc, err)
	}
	c := newCode(phone, []byte("mac")) // MaxAttempts 3, TTL a minute
	c.Service = svc
	if _, err := s.Codes.SaveCode(ctx, c); err != nil {
		t.Fatal(err)
	}
	guess := func() {
		t.Helper()
		if _, err := s.Codes.GuessCode(ctx, phone, guard.GuessOf{Service: svc}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	read := func() guard.CodeState {
		t.Helper()
		st, err := s.Codes.ReadCode(ctx, phone, svc)
		if err != nil {
			t.Fatal(err)
		}
		if st.ExpiresIn <= 0 || st.ExpiresIn > c.TTL {
			t.Errorf("expires in %v, want within the code's %v", st.ExpiresIn, c.TTL)
		}
		st.ExpiresIn = 0
		return st
	}
	steps := []struct {
		name string
		do   func()
		want guard.CodeState
	}{
		{"fresh", func() {}, guard.CodeState{Guesses: 0, MaxAttempts: 3}},
		{"read again: nothing counted", func() {}, guard.CodeState{Guesses: 0, MaxAttempts: 3}},
		{"two wrong guesses", func() { guess(); guess() }, guard.CodeState{Guesses: 2, MaxAttempts: 3}},
		{"the last one, locked", func() {
			guess()
			if err := s.Codes.LockCode(ctx, phone, svc, c.VerificationID, time.Now()); err != nil {
				t.Fatal(err)
			}
		}, guard.CodeState{Guesses: 3, MaxAttempts: 3, Locked: true}},
		{"guesses past the max: the max", func() { guess(); guess() }, guard.CodeState{Guesses: 3, MaxAttempts: 3, Locked: true}},
	}
	for _, st := range steps {
		st.do()
		if got := read(); got != st.want {
			t.Errorf("service %q, %s: got %+v, want %+v", svc, st.name, got, st.want)
		}
	}
}
