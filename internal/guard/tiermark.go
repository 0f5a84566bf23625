package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// The verification of a solved or a trusted send carries its tier as a
// keyed mark in its ID (its last two bytes are a MAC of the others, under
// a label of the tier), so that its verify is credited to the tier its
// send counted in without a field in the code's record: a solved send's
// to the solved tier's watch and cap, a trusted one's (an account's
// number not yet marked, too) to the trusted tier. A new send's ID
// carries no mark.
const tierMarkLen = 2

// tierMarks make and read the marks; key is the service's HMAC key.
type tierMarks struct{ key []byte }

// tierMarkLabel is the MAC's label of tier t (a mark made under one is
// never read under another); ok is false for the new tier, which has no
// mark.
func tierMarkLabel(t Tier) (label string, ok bool) {
	switch t {
	case TierSolved:
		return "otpguard solved verification\x00", true
	case TierTrusted:
		return "otpguard trusted verification\x00", true
	}
	return "", false
}

// fallbackMarkLabel is the MAC's label of a fallback send's verification
// (fallback.go): a send of the new tier whose verify credits no tier.
const fallbackMarkLabel = "otpguard fallback verification\x00"

func (s tierMarks) mark(t Tier, b []byte) []byte {
	label, _ := tierMarkLabel(t)
	return s.markAs(label, b)
}

func (s tierMarks) markAs(label string, b []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(label))
	m.Write(b)
	return m.Sum(nil)[:tierMarkLen]
}

// apply rewrites a new verification ID's last bytes into tier's mark; a
// new send's ID is returned as it is.
func (s tierMarks) apply(id string, t Tier) string {
	label, ok := tierMarkLabel(t)
	if !ok {
		return id
	}
	return s.applyAs(id, label)
}

// applyFallback rewrites a fallback send's new verification ID's last
// bytes into the fallback's mark.
func (s tierMarks) applyFallback(id string) string { return s.applyAs(id, fallbackMarkLabel) }

func (s tierMarks) applyAs(id, label string) string {
	b, err := hex.DecodeString(id[len(verificationIDPrefix):])
	if err != nil || len(b) <= tierMarkLen {
		return id
	}
	n := len(b) - tierMarkLen
	copy(b[n:], s.markAs(label, b[:n]))
	return verificationIDPrefix + hex.EncodeToString(b)
}

// tier is the tier of the send id was issued to: TierNew when it carries
// no mark (one in 65,536 other IDs carries a tier's mark by chance), and
// for "" (a stateless code, which has no verification).
func (s tierMarks) tier(id string) Tier {
	if !ValidVerificationID(id) {
		return TierNew
	}
	b, err := hex.DecodeString(id[len(verificationIDPrefix):])
	if err != nil {
		return TierNew
	}
	n := len(b) - tierMarkLen
	for _, t := range []Tier{TierSolved, TierTrusted} {
		if hmac.Equal(b[n:], s.mark(t, b[:n])) {
			return t
		}
	}
	return TierNew
}

// fellBack reports whether id carries the fallback's mark (a fallback
// send's verification, fallback.go).
func (s tierMarks) fellBack(id string) bool {
	if !ValidVerificationID(id) {
		return false
	}
	b, err := hex.DecodeString(id[len(verificationIDPrefix):])
	if err != nil {
		return false
	}
	n := len(b) - tierMarkLen
	return hmac.Equal(b[n:], s.markAs(fallbackMarkLabel, b[:n]))
}
