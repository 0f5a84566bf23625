package guard

import "github.com/otpguard/otpguard/internal/limit"

// A number's own counters (spend.go's sendLimits), named in its service
// (room.go).

// PhoneCounterKeys are the keys Send counts a number's own sends under,
// the default service's and then each of services' (room.go): its
// cooldown, its per-number window and its channels' windows. The cooldown
// key is listed even when the policy has no cooldown, as a policy in force
// earlier may have set one. The per-IP counter is the address's, not the
// number's, and is not listed. The ops desk deletes these keys to unblock
// a number.
func PhoneCounterKeys(e164 string, services ...string) []limit.Key {
	var out []limit.Key
	for _, s := range append([]string{DefaultService}, services...) {
		if s == DefaultService && len(out) > 0 {
			continue
		}
		p := Phone{E164: e164}.of(s)
		out = append(out, cooldownKey(p), phoneSendsKey(p), channelSendsKey(p, ChannelWhatsApp), channelSendsKey(p, ChannelCall))
	}
	return out
}

func cooldownKey(p Phone) limit.Key {
	return limit.Key{Space: "otp", ID: p.E164, Name: p.own("cooldown")}
}

func phoneSendsKey(p Phone) limit.Key {
	return limit.Key{Space: "otp", ID: p.E164, Name: p.own("sends")}
}

// channelSendsKey counts a number's sends by channel (not SMS), beside
// its per-number window: the same hash tag, so one slot.
func channelSendsKey(p Phone, channel string) limit.Key {
	return limit.Key{Space: "otp", ID: p.E164, Name: p.own(channel + "_sends")}
}
