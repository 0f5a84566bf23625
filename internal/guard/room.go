package guard

import "strings"

// Rooms: where a send's limits and automatic rules count. The default
// service's rooms are the deployment's as they were before services: a
// country's room is named by its region ("NG"), a prefix's by its digits,
// an address's by itself. A named service (service.go) counts in rooms of
// its own, so that one service's attacker spends neither another's users'
// limits nor their share of a country's automatic rules:
//
//   - a room's keys (country, carrier, prefix, address, the cold room)
//     carry the service in their hash tag: "NG@VA...", so each service's
//     counters of a country share a Cluster slot, as the default's do;
//   - a number's own counters (cooldown, per number, per channel) carry it
//     in their name, beside the service's code (store's codeKey), so that
//     all of a number's keys stay in its slot.
//
// What every service shares: the deny-list and the conversion watch's
// blocks (an operator's word on a number), the network's risk score of a
// number (its cache and the lookups' budget: the network judges the number,
// not the tenant), and the spend budget, the deployment's shared ceiling.
// The policy of a room (floors, expected volumes, overrides) is its
// region's: region(phone) reads policy, room(phone) names keys.

// of is p sent or verified for service ("" the default service).
func (p Phone) of(service string) Phone {
	p.service = service
	return p
}

// in names subject (a region, a prefix, an address) in p's service's
// room: subject itself for the default service.
func (p Phone) in(subject string) string { return roomID(subject, p.service) }

// room is the ID of p's country's room: its region, in its service's.
func room(p Phone) string { return p.in(region(p)) }

// roomID names subject in service's room.
func roomID(subject, service string) string {
	if service == DefaultService {
		return subject
	}
	return subject + "@" + service
}

// subjectOf is the subject a room's ID names, without its service: the
// prefix an automatic deny-list entry names (the deny-list is every
// service's).
func subjectOf(id string) string {
	subject, _, _ := strings.Cut(id, "@")
	return subject
}

// RoomID is the ID the ops desk reads a service's counters of a region by
// (VelocityKeys, SolvedCapTake): the region itself for the default
// service.
func RoomID(region, service string) string { return roomID(region, service) }

// own is the name of one of the number's own counters (name) in p's
// service: the name itself for the default service, else the service's
// SID after it, as the service's code is named.
func (p Phone) own(name string) string {
	if p.service == DefaultService {
		return name
	}
	return name + ":" + p.service
}
