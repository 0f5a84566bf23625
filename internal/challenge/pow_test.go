package challenge_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/challenge"
	"github.com/otpguard/otpguard/internal/guard"
)

var key = []byte("0123456789abcdef0123456789abcdef")

func TestPoW(t *testing.T) {
	now := time.Unix(1_767_225_600, 0)
	p := challenge.NewPoW(key, 1000, 5*time.Minute)
	c, err := p.Issue("+447400100001", now)
	if err != nil {
		t.Fatal(err)
	}
	sol := challenge.Solve(c)
	other := challenge.NewPoW([]byte("another key, another deployment"), 1000, 5*time.Minute)
	cases := []struct {
		name     string
		p        *challenge.PoW
		phone    string
		solution string
		at       time.Time
		ok       bool
	}{
		{"solved", p, "+447400100001", sol, now, true},
		{"another number", p, "+447400100002", sol, now, false},
		{"expired", p, "+447400100001", sol, now.Add(5 * time.Minute), false},
		{"another key", other, "+447400100001", sol, now, false},
		{"garbage", p, "+447400100001", "not base64!", now, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.p.Check(context.Background(), tc.phone, tc.solution, "", tc.at)
			if tc.ok && (err != nil || s.ID == "") {
				t.Fatalf("got %v, %v; want a solution", s, err)
			}
			if !tc.ok && !errors.Is(err, guard.ErrBadSolution) {
				t.Fatalf("got %v; want ErrBadSolution", err)
			}
		})
	}
}

// BenchmarkSolve is the cost of the default difficulty to a Go solver,
// and of ten times it: what a challenge that cost more under pressure
// would ask of a bot (docs/abuse.md, "Challenges").
func BenchmarkSolve(b *testing.B) {
	for _, times := range []int64{1, 10} {
		b.Run(fmt.Sprintf("max_number=%dx", times), func(b *testing.B) {
			p := challenge.NewPoW(key, times*guard.DefaultChallengeMaxNumber, time.Minute)
			for b.Loop() {
				c, _ := p.Issue("+447400100001", time.Now())
				challenge.Solve(c)
			}
		})
	}
}
