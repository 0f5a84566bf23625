package ops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// The attack view's solved tier: a send after a solved challenge meets the
// solved-challenge cap per country and hour instead of the automatic rules
// (guard/solved.go), and the cap refuses with unusual_volume, as the
// country velocity rule does. The audit event of each marks it
// (guard.Event.Solved), and the recorder counts both under their country
// and carrier, so that a row says how many codes solved challenges sent
// and whether the cap is spent, and the desk's status names the countries
// whose cap refused this hour:
//
//	"<REGION>|solved"      sent after a solved challenge (among "s")
//	"<REGION>|solved_cap"  refused by the solved cap (among "r" and "r:unusual_volume")
//
// and the same kinds after a carrier's head ("<REGION>|<key>|<name>|").
const (
	kindSolved    = "solved"
	kindSolvedCap = "solved_cap"
)

// solvedKinds are the kinds an event of a send after a solved challenge
// adds to base, its others (sent: "s"; refused: "r", "r:<code>").
func solvedKinds(base []string, sent bool) []string {
	if sent {
		return append(base, kindSolved)
	}
	return append(base, kindSolvedCap)
}

// solvedSpentNow are the countries ("NG") and carriers ("NG|mtn") the
// solved cap refused in the clock hour under way (h: its counts).
func solvedSpentNow(h AbuseHour) (countries, carriers map[string]bool) {
	countries, carriers = map[string]bool{}, map[string]bool{}
	for f, n := range h.Countries {
		if region, ok := strings.CutSuffix(f, "|"+kindSolvedCap); ok && n > 0 && region != OtherField {
			countries[region] = true
		}
	}
	for f, n := range h.Carriers {
		parts := strings.Split(f, "|")
		if len(parts) == 4 && parts[3] == kindSolvedCap && n > 0 {
			carriers[parts[0]+"|"+parts[1]] = true
		}
	}
	return countries, carriers
}

// SolvedCap is the solved cap in force on a country or carrier in the
// clock hour under way, as a send's take would meet it now (the same
// figures: guard.SolvedCapTake and the store's shared script functions):
// Limit, the sends it holds this hour (Used: those sent after a solved
// challenge, less those their verifies back), Full when the next send
// after a solved challenge would be refused, and Cut while the solved
// tier's conversion watch has cut it to a tenth.
type SolvedCap struct {
	Limit, Used int64
	Full, Cut   bool
}

// solvedSubject is a row whose solved cap is read: a country, or one of
// its carriers (carrier: its key).
type solvedSubject struct{ country, carrier string }

// addSolvedCaps gives each country row of windows, and each of its
// carriers when the carriers split the country's room, the solved cap in
// force, in one more round trip; none when p's challenges are off.
func (d *AbuseDesk) addSolvedCaps(ctx context.Context, windows []AbuseWindow, p guard.OTPPolicy, now time.Time) error {
	if !p.Challenge.On() {
		return nil
	}
	index := map[solvedSubject]int{}
	var takes []guard.VolumeTake
	ask := func(s solvedSubject) {
		if _, ok := index[s]; ok {
			return
		}
		t := guard.SolvedCapTake(p, s.country, guard.DefaultService, s.carrier, now)
		if s.carrier != "" && t.Carrier.FloorShare == 0 {
			return // no split: the country's cap is the carrier's
		}
		index[s] = len(takes)
		takes = append(takes, t)
	}
	for _, w := range windows {
		for _, c := range w.Countries {
			if c.Country == OtherField {
				continue
			}
			ask(solvedSubject{c.Country, ""})
			for _, k := range c.Carriers {
				if k.Key != OtherCarrier {
					ask(solvedSubject{c.Country, k.Key})
				}
			}
		}
	}
	if len(takes) == 0 {
		return nil
	}
	caps, err := d.o.Store.ReadSolvedCaps(ctx, takes)
	if err != nil {
		return limit.StoreUnavailable(err, 5*time.Second)
	}
	if len(caps) != len(takes) {
		return limit.StoreUnavailable(fmt.Errorf("ops: solved caps: %d answers for %d", len(caps), len(takes)), 5*time.Second)
	}
	capOf := func(s solvedSubject) *SolvedCap {
		i, ok := index[s]
		if !ok {
			return nil
		}
		c := caps[i]
		return &c
	}
	for _, w := range windows {
		for ci := range w.Countries {
			c := &w.Countries[ci]
			c.SolvedCap = capOf(solvedSubject{c.Country, ""})
			for ki := range c.Carriers {
				k := &c.Carriers[ki]
				k.SolvedCap = capOf(solvedSubject{c.Country, k.Key})
			}
		}
	}
	return nil
}
