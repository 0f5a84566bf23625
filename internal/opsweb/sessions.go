package opsweb

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/httpx"
)

// The ops sign-in: a browser trades the ops key for a session cookie
// holding a signed, expiring token (never the key). Every state-changing
// request made with the cookie must also carry a CSRF token derived from
// the session, as a form field or the X-CSRF-Token header; SameSite=Strict
// keeps the cookie off cross-site requests besides.
const (
	// SessionCookie is the session cookie's name.
	SessionCookie = "otpguard_ops"
	csrfField     = "csrf_token"
	csrfHeader    = "X-CSRF-Token"
	// SessionTTL is how long an ops sign-in lasts.
	SessionTTL = 8 * time.Hour
)

// Context keys set by requireOps.
const (
	ctxActor   = "ops.actor"
	ctxSession = "ops.session"
)

// sessions issues and checks session tokens: base64(payload) "."
// base64(HMAC-SHA256(key, payload)), payload "actor|expiry unix|nonce".
// The key is shared by every instance (it is derived from the HMAC key),
// so that a session works on whichever instance the balancer picks.
type sessions struct {
	key []byte
	ops httpx.Keyring
	now func() time.Time
	ttl time.Duration
}

func (s sessions) mac(kind, msg string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(kind))
	m.Write([]byte{0})
	m.Write([]byte(msg))
	return m.Sum(nil)
}

// issue returns a new token for actor and when it expires.
func (s sessions) issue(actor string) (string, time.Time) {
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails
	exp := s.now().Add(s.ttl).Truncate(time.Second)
	payload := actor + "|" + strconv.FormatInt(exp.Unix(), 10) + "|" + hex.EncodeToString(nonce)
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(s.mac("session", payload)), exp
}

// verify returns the actor of a valid, unexpired token whose key is still
// configured.
func (s sessions) verify(token string) (string, bool) {
	p64, sig64, ok := strings.Cut(token, ".")
	if !ok || len(token) > 512 {
		return "", false
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p64)
	sig, err2 := enc.DecodeString(sig64)
	if err1 != nil || err2 != nil || !hmac.Equal(sig, s.mac("session", string(payload))) {
		return "", false
	}
	parts := strings.Split(string(payload), "|")
	if len(parts) != 3 {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !s.now().Before(time.Unix(exp, 0)) || !s.ops.HasActor(parts[0]) {
		return "", false
	}
	return parts[0], true
}

// id names a token in the store of signed-out sessions (never the token:
// whoever reads Redis must not be able to sign in with it).
func (s sessions) id(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:16])
}

// expiry is when a token verify accepted expires.
func (s sessions) expiry(token string) time.Time {
	p64, _, _ := strings.Cut(token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(p64)
	parts := strings.Split(string(payload), "|")
	if len(parts) != 3 {
		return s.now().Add(s.ttl)
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return s.now().Add(s.ttl)
	}
	return time.Unix(exp, 0)
}

// csrf is the CSRF token of a session: only a page served to the session's
// holder knows it.
func (s sessions) csrf(token string) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", token))
}

func (s sessions) csrfOK(token, got string) bool {
	return got != "" && hmac.Equal([]byte(got), []byte(s.csrf(token)))
}

func newSessions(key []byte, ops httpx.Keyring) sessions {
	if len(key) == 0 {
		// No shared key: sessions work on this instance only.
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	return sessions{key: key, ops: ops, now: time.Now, ttl: SessionTTL}
}
