package httpx

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"

	"github.com/labstack/echo/v4"
)

// Keyring holds bearer keys as SHA-256 digests: comparing digests of equal
// length in constant time leaks neither a key's content nor its length.
type Keyring [][sha256.Size]byte

// NewKeyring keeps the digests of keys (empty ones left out).
func NewKeyring(keys []string) Keyring {
	k := make(Keyring, 0, len(keys))
	for _, key := range keys {
		if key != "" {
			k = append(k, sha256.Sum256([]byte(key)))
		}
	}
	return k
}

// Holds reports whether key is on the ring, looking at every key every time.
func (k Keyring) Holds(key string) bool {
	_, ok := k.Actor(key)
	return ok
}

// Actor returns the actor id of key when key is on the ring: a short,
// stable id of the key (its digest's first 4 bytes) for the audit trail,
// never the key.
func (k Keyring) Actor(key string) (string, bool) {
	d := sha256.Sum256([]byte(key))
	found := 0
	for i := range k {
		found |= subtle.ConstantTimeCompare(d[:], k[i][:])
	}
	if found != 1 {
		return "", false
	}
	return actorOf(d), true
}

// HasActor reports whether actor names a key still on the ring, so that a
// session ends when its key is removed from the configuration.
func (k Keyring) HasActor(actor string) bool {
	for i := range k {
		if actorOf(k[i]) == actor {
			return true
		}
	}
	return false
}

func actorOf(digest [sha256.Size]byte) string {
	return "ops:" + hex.EncodeToString(digest[:4])
}

// Bearer extracts the token of "Authorization: Bearer <token>".
func Bearer(c echo.Context) (string, bool) {
	return BearerOf(c.Request().Header.Get(echo.HeaderAuthorization))
}

// BearerOf extracts the token of an Authorization field's value h.
func BearerOf(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return strings.TrimSpace(token), true
}
