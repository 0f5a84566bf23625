package guard

import "strings"

// MaskPhone keeps the country code and the last two digits of an E.164 number
// ("+91********00"): enough to tell numbers apart in logs, not enough to
// reach anyone.
func MaskPhone(e164 string) string {
	if len(e164) <= 5 {
		return strings.Repeat("*", len(e164))
	}
	return e164[:3] + strings.Repeat("*", len(e164)-5) + e164[len(e164)-2:]
}
