package guard

import (
	"strings"

	"github.com/otpguard/otpguard/internal/limit"
)

// Rooms: where a send's limits and automatic rules count. The default
// service's rooms are the deployment's as they were before services: a
// country's room is named by its region ("NG"), a prefix's by its digits,
// an address's by itself, a number's counter by its name. A named service
// (service.go) counts in rooms of its own, so that one service's attacker
// spends neither another's users' limits nor their share of a country's
// automatic rules:
//
//   - a room's keys (country, carrier, prefix, address, the cold room)
//     carry the service in their hash tag: "NG@VA...", so each service's
//     counters of a country share a Cluster slot, as the default's do;
//   - a number's own counters (cooldown, per number, per channel) carry it
//     in their name ("sends@VA..."), beside the service's code (the
//     store's codeKey), so that all of a number's keys stay in its slot.
//
// What every service shares: the deny-list and the conversion watch's
// blocks (an operator's word on a number), the network's risk score of a
// number (its cache and the lookups' budget: the network judges the number,
// not the tenant), and the spend budget, the deployment's shared ceiling.
// The policy of a room (floors, expected volumes, overrides) is its
// region's: region(phone) reads policy, phone.in(region(phone)) names
// keys. A send walks one function of this file (in), so that its steps
// keep to the files of their concepts (doccheck's TestWalkReturns).

// in names subject (a region, a prefix, an address, a counter's name) in
// p's service's room: subject itself for the default service.
func (p Phone) in(subject string) string { return RoomID(subject, p.service) }

// RoomID names subject in service's room; the ops desk reads a service's
// counters of a region by it (VelocityKeys, SolvedCapTake).
func RoomID(subject, service string) string {
	if service == DefaultService {
		return subject
	}
	return subject + "@" + service
}

// of is p sent or verified for service ("" the default service).
func (p Phone) of(service string) Phone {
	p.service = service
	return p
}

// subjectOf is the subject a room's ID names, without its service: the
// prefix an automatic deny-list entry names (the deny-list is every
// service's).
func subjectOf(id string) string {
	subject, _, _ := strings.Cut(id, "@")
	return subject
}

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
