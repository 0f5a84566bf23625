package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// The verification of a solved send carries a keyed mark in its ID (its
// last two bytes are a MAC of the others), so that its verify counts in
// the solved tier's conversion watch without a field in the code's record.
const solvedMarkLen = 2

// solvedMarks make and read the mark; key is the service's HMAC key.
type solvedMarks struct{ key []byte }

func (s solvedMarks) mark(b []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("otpguard solved verification\x00"))
	m.Write(b)
	return m.Sum(nil)[:solvedMarkLen]
}

// apply rewrites a new verification ID's last bytes into the mark.
func (s solvedMarks) apply(id string) string {
	b, err := hex.DecodeString(id[len(verificationIDPrefix):])
	if err != nil || len(b) <= solvedMarkLen {
		return id
	}
	n := len(b) - solvedMarkLen
	copy(b[n:], s.mark(b[:n]))
	return verificationIDPrefix + hex.EncodeToString(b)
}

// solved reports whether id was issued to a solved send (one
// in 65,536 other IDs carries the mark by chance).
func (s solvedMarks) solved(id string) bool {
	if !ValidVerificationID(id) {
		return false
	}
	b, err := hex.DecodeString(id[len(verificationIDPrefix):])
	if err != nil {
		return false
	}
	n := len(b) - solvedMarkLen
	return hmac.Equal(b[n:], s.mark(b[:n]))
}
