package opsweb

import (
	"strings"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/httpx"
)

func TestSessions(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ops := httpx.NewKeyring([]string{"ops-key-0123456789"})
	s := newSessions([]byte("session-key-0123456789abcdef0123"), ops)
	s.now = func() time.Time { return now }
	actor, ok := ops.Actor("ops-key-0123456789")
	if !ok || !strings.HasPrefix(actor, "ops:") || len(actor) != len("ops:")+8 {
		t.Fatalf("actor %q (%v), want ops: and 8 hex digits", actor, ok)
	}
	token, exp := s.issue(actor)
	if !exp.Equal(now.Add(SessionTTL)) || strings.Contains(token, "ops-key") {
		t.Errorf("token expires %s, want %s; it must not hold the key", exp, now.Add(SessionTTL))
	}
	if got, ok := s.verify(token); !ok || got != actor {
		t.Errorf("verify fresh token: %q %v", got, ok)
	}
	if other, _ := s.issue(actor); other == token {
		t.Error("two sign-ins got the same token")
	}

	for name, tc := range map[string]struct {
		token string
		at    time.Time
		s     sessions
	}{
		"expired":            {token, now.Add(SessionTTL), s},
		"other key":          {token, now, newSessions([]byte("another-session-key-0123456789ab"), ops)},
		"key removed":        {token, now, newSessions(s.key, httpx.NewKeyring([]string{"new-ops-key-0123456789"}))},
		"truncated":          {token[:len(token)-2], now, s},
		"no signature":       {strings.Split(token, ".")[0], now, s},
		"payload changed":    {"b3BzOjAwMDAwMDAwfDk5OTk5OTk5OTl8MDA" + token[strings.Index(token, "."):], now, s},
		"empty":              {"", now, s},
		"too long":           {strings.Repeat("a", 600) + "." + "b", now, s},
		"signature of other": {strings.Split(token, ".")[0] + "." + strings.Split(s.csrf(token), ".")[0], now, s},
	} {
		t.Run(name, func(t *testing.T) {
			tc.s.now = func() time.Time { return tc.at }
			if got, ok := tc.s.verify(tc.token); ok {
				t.Errorf("verify: accepted as %q", got)
			}
		})
	}

	csrf := s.csrf(token)
	other, _ := s.issue(actor)
	switch {
	case !s.csrfOK(token, csrf):
		t.Error("the session's own CSRF token is refused")
	case s.csrfOK(other, csrf):
		t.Error("a CSRF token works for another session")
	case s.csrfOK(token, ""):
		t.Error("an empty CSRF token is accepted")
	}
}
