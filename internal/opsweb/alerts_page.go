package opsweb

import (
	"strconv"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
)

// The page's alerts: each says what it is about, what it did and since
// when, and carries the actions that answer it, as forms posting to the
// routes that already exist (/ops/actions/override, /ops/actions/undeny),
// so that an answer is one tap and audited like any other.

// alertAnswerFor is how long an alert's one-tap override lasts (an
// expires_in of the override form): long enough to look, short enough
// that a forgotten one ends by itself; the overrides section removes it.
const alertAnswerFor = "1h"

// pageAlert is one alert as the page shows it.
type pageAlert struct {
	abuseAlertJSON
	// Did says what the rule did, in words.
	Did string
	// Ago is how long ago it began.
	Ago     string
	Actions []alertAction
}

// alertAction is one form answering an alert: an override (Kind, Subject,
// and a Limit the operator may change when the kind takes one) or the
// removal of the automatic block (UndenyID).
type alertAction struct {
	Label, Confirm string
	Kind, Subject  string
	// TakesLimit: the form has a limit field, filled with Limit.
	TakesLimit bool
	Limit      string
	Reason     string
	ExpiresIn  string
	UndenyID   int64
}

// alertDid says what an alert's rule did, by its outcome.
var alertDid = map[string]string{
	"reported":       "reported only: nothing is refused",
	"blocked":        "blocked: its sends are refused (deny-listed for a while)",
	"quarantined":    "quarantined: its velocity limit is cut to the floor",
	"unusual_volume": "refusing sends past its limit until the hour ends",
}

// pageAlerts builds the alerts of v with their actions; p is the policy
// file, whose limits the tighten actions start from.
func pageAlerts(v *abuseJSON, p guard.OTPPolicy) []pageAlert {
	if v == nil {
		return nil
	}
	out := make([]pageAlert, 0, len(v.Alerts))
	for _, a := range v.Alerts {
		pa := pageAlert{abuseAlertJSON: a, Did: alertDid[a.Outcome], Ago: ago(a.At, v.At)}
		if pa.Did == "" {
			pa.Did = a.Outcome
		}
		pa.Actions = alertActions(a, v.AutoBlocks, p)
		out = append(out, pa)
	}
	return out
}

// alertActions are the answers to a: pause or tighten its subject (a
// country, a carrier, or a prefix and its country), and lift the
// automatic block it raised.
func alertActions(a abuseAlertJSON, blocks []abuseAutoJSON, p guard.OTPPolicy) []alertAction {
	reason := "answering the " + a.Rule + " alert on " + a.Subject
	act := func(label, kind, subject string, takesLimit bool) alertAction {
		x := alertAction{Label: label, Kind: kind, Subject: subject, TakesLimit: takesLimit, Reason: reason,
			ExpiresIn: alertAnswerFor}
		if takesLimit {
			x.Limit = tightenFrom(p, kind, subject)
		}
		x.Confirm = label + " for an hour? It is an override: the overrides section lists and removes it."
		return x
	}
	var out []alertAction
	switch a.Scope {
	case "country":
		out = append(out, act("Pause "+a.Subject, string(guard.OverrideCountryPause), a.Subject, false),
			act("Limit "+a.Subject, string(guard.OverrideCountryLimit), a.Subject, true))
	case "carrier":
		out = append(out, act("Pause "+a.Subject, string(guard.OverrideCarrierPause), a.Subject, false),
			act("Limit "+a.Subject, string(guard.OverrideCarrierLimit), a.Subject, true))
	case "prefix":
		out = append(out, act("Limit "+a.Subject, string(guard.OverridePrefixLimit), a.Subject, true))
		if a.Country != "" && a.Country != "001" {
			out = append(out, act("Pause "+a.Country, string(guard.OverrideCountryPause), a.Country, false))
		}
		for _, b := range blocks {
			if b.Pattern == a.Subject {
				out = append(out, alertAction{Label: "Lift the block of " + a.Subject, UndenyID: b.ID,
					Confirm: "Lift the automatic block of " + a.Subject + "? Codes may be sent to it again at once."})
			}
		}
	}
	return out
}

// tightenFrom is the limit a tighten action starts from: half the policy
// file's for the subject, or 10 when the file sets none (any limit
// tightens then).
func tightenFrom(p guard.OTPPolicy, kind, subject string) string {
	o, err := guard.NormalizeOverride(guard.Override{Kind: guard.OverrideKind(kind), Subject: subject, Limit: 1})
	if err == nil {
		if file, _, ok := guard.FileLimit(p, o); ok && file > 1 {
			return strconv.FormatInt(file/2, 10)
		}
	}
	return "10"
}

// ago says how long before now t was: "just now", "12m 05s ago".
func ago(t, now time.Time) string {
	if now.Sub(t) < time.Second {
		return "just now"
	}
	return timeLeft(now, t) + " ago"
}
