package ops

import "strings"

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
