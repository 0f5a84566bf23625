package guard

import (
	"strings"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/problem"
)

// Overrides of one carrier of a country (docs/changing-limits.md): a
// pumping wave rides the ranges of one carrier, so the ops desk can pause,
// or hold to a fixed window, the sends to that carrier alone while the
// country's other carriers, where its real users are too, keep going. A
// carrier is its normalised key within its country (CarrierOf,
// CarrierKey): the subject "NG/mtn" holds whatever libphonenumber names
// "MTN" in Nigeria.

// CarrierSubject is one carrier of one country, as a carrier override
// names it.
type CarrierSubject struct {
	Region string // ISO 3166-1 alpha-2, or 001 for non-geographic numbers
	Key    string // CarrierKey of the carrier's name
}

// String is the subject's canonical form, "NG/mtn": what an override
// stores and a counter's key holds.
func (c CarrierSubject) String() string { return c.Region + "/" + c.Key }

// carrierSubject is the subject phone's carrier falls under, as
// CarrierSubject.String writes it. A send's walk comes here last, after
// the pause and limit it checks (CarrierOf is its last call).
func carrierSubject(p Phone) string {
	region := p.Region
	if region == "" {
		region = "001"
	}
	return region + "/" + CarrierOf(p).Key
}

// ParseCarrierSubject reads a carrier of a country as an operator types
// it: the country, "/", the carrier's name ("NG / MTN", "ng/MTN",
// "NG/mtn"), normalised to the country in capitals and the carrier's key.
// A country with no numbering plan is refused with unknown_country (422),
// anything else malformed with invalid_request; both name the field
// "subject".
func ParseCarrierSubject(s string) (CarrierSubject, error) {
	country, name, ok := strings.Cut(s, "/")
	country, name = strings.ToUpper(strings.TrimSpace(country)), strings.TrimSpace(name)
	key := CarrierKey(name)
	if !ok || country == "" || (key == UnknownCarrier && !strings.EqualFold(name, UnknownCarrier)) {
		return CarrierSubject{}, overrideErr("subject", "must be a country and a carrier such as NG/MTN (the country's ISO code, /, the carrier's name), got %q", s)
	}
	if country != "001" && (len(country) != 2 || phonenumbers.GetCountryCodeForRegion(country) == 0) {
		return CarrierSubject{}, &OverrideError{Field: "subject", Err: problem.Errorf(problem.CodeUnknownCountry,
			"subject: %q is not a country: give its ISO 3166-1 alpha-2 code, such as NG (or 001 for non-geographic numbers), then / and the carrier", country)}
	}
	return CarrierSubject{Region: country, Key: key}, nil
}

// SubjectName is how the desk, the alerts and the audit trail name one
// carrier of a country for people: "NG / MTN". carrier is the carrier's
// name as libphonenumber spells it where it is known, its key otherwise.
func SubjectName(region, carrier string) string {
	if region == "" {
		region = "001"
	}
	return region + " / " + carrier
}

// CarrierSubjectName is a carrier subject in its canonical form
// (CarrierSubject.String, "NG/mtn") for people: SubjectName with the key
// in capitals, "NG / MTN", as the overrides and the alerts keep the key,
// not libphonenumber's spelling. Anything else is returned as is.
func CarrierSubjectName(subject string) string {
	region, key, ok := strings.Cut(subject, "/")
	if !ok || region == "" || key == "" {
		return subject
	}
	return SubjectName(region, strings.ToUpper(key))
}

// OverrideSubjectName is o's subject for people: a carrier override's as
// CarrierSubjectName ("NG / MTN"), any other's as stored.
func OverrideSubjectName(o Override) string {
	if o.Kind != OverrideCarrierPause && o.Kind != OverrideCarrierLimit {
		return o.Subject
	}
	return CarrierSubjectName(o.Subject)
}
