package guard

import (
	"errors"
	"regexp"
	"strconv"
	"sync"

	"github.com/nyaruka/phonenumbers"
)

// errNotE164 tells parseNumber that parseE164 cannot vouch for its answer
// and libphonenumber must parse the number.
var errNotE164 = errors.New("guard: not a number parseE164 answers for")

// parseNumber is phonenumbers.Parse(raw, region), by a shorter road for
// canonical E.164 ("+919812345678"), which nearly every client sends: the
// library runs a dozen regular expressions over any input (a visible
// share of a send's CPU, docs/benchmarks.md), most of them to find out
// what "+" followed by digits already says.
func parseNumber(raw, region string) (*phonenumbers.PhoneNumber, error) {
	num, err := parseE164(raw, region)
	if err == errNotE164 {
		return phonenumbers.Parse(raw, region)
	}
	return num, err
}

// parseE164 builds what phonenumbers.Parse(raw, region) (nyaruka/phonenumbers
// v1.8.1, parseHelper) returns for raw of "+" and ASCII digits, or
// errNotE164 for every input or branch it does not follow step by step;
// TestParseE164AsLibphonenumber holds it to the library's answers.
//
// For such input the library's steps reduce to these: no extension, RFC 3966
// context or punctuation can be there to strip; the "+" makes the number
// international whatever the default region, so the country calling code
// is the first 1-3 digits that name one, and the region's metadata is that
// code's (not the default region's). What is left after it is the national
// number, less the national prefix when the region's pattern for it matches;
// the library then keeps or discards the stripped number by its possible
// lengths, which is not repeated here: a match goes to the library.
func parseE164(raw, region string) (*phonenumbers.PhoneNumber, error) {
	if len(raw) < 2 || raw[0] != '+' || region == phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY {
		// "001" as the default region has no metadata, where the code's
		// own would apply: the library parses against none.
		return nil, errNotE164
	}
	digits := raw[1:]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return nil, errNotE164
		}
	}
	if len(digits) < 3 {
		// Viable numbers (VALID_PHONE_NUMBER) are two digits alone or a
		// "+" and at least three.
		return nil, phonenumbers.ErrNotANumber
	}
	if digits[0] == '0' {
		// No calling code starts with 0: the library then reads the
		// digits again after the default region's international prefix
		// ("+0091..." from India is +91).
		return nil, errNotE164
	}
	codes := callingCodes()
	cc, national := 0, ""
	for i := 1; i <= phonenumbers.MAX_LENGTH_COUNTRY_CODE; i++ {
		c, _ := strconv.Atoi(digits[:i]) // ASCII digits, at most three: no error
		if codes[c].known {
			cc, national = c, digits[i:]
			break
		}
	}
	if cc == 0 {
		return nil, errNotE164 // the library tries the region's international prefix again
	}
	if len(national) < phonenumbers.MIN_LENGTH_FOR_NSN {
		return nil, phonenumbers.ErrTooShortNSN
	}
	if p := codes[cc].nationalPrefix; p != nil && p.MatchString(national) {
		return nil, errNotE164
	}
	if len(national) > phonenumbers.MAX_LENGTH_FOR_NSN {
		return nil, phonenumbers.ErrNumTooLong
	}
	nsn, _ := strconv.ParseUint(national, 10, 64) // at most 17 digits: fits
	code := int32(cc)
	num := &phonenumbers.PhoneNumber{CountryCode: &code, NationalNumber: &nsn}
	setLeadingZeros(num, national)
	return num, nil
}

// setLeadingZeros records the national number's leading zeros, which its
// integer form loses, as the library's setItalianLeadingZerosForPhoneNumber
// does: the flag when there is one, the count when there are more, and an
// all-zero number's last zero is the number, not a leading zero.
func setLeadingZeros(num *phonenumbers.PhoneNumber, national string) {
	if len(national) < 2 || national[0] != '0' {
		return
	}
	yes := true
	num.ItalianLeadingZero = &yes
	n := 1
	for n < len(national)-1 && national[n] == '0' {
		n++
	}
	if n != 1 {
		count := int32(n)
		num.NumberOfLeadingZeros = &count
	}
}

// callingCode is what parseE164 needs of one country calling code.
type callingCode struct {
	known bool
	// nationalPrefix is ^(?:NationalPrefixForParsing) of the code's main
	// region (GetRegionCodeForCountryCode), the metadata the library
	// parses an international number with; nil when the region has none.
	nationalPrefix *regexp.Regexp
}

// callingCodes indexes every calling code (1-999) once, at the first parse
// (WarmPhoneMetadata, at start-up), from libphonenumber's own tables, which
// never change: it is not state, only a faster way to read them.
var callingCodes = sync.OnceValue(func() *[1000]callingCode {
	geo := map[string]*phonenumbers.PhoneMetadata{}
	nonGeo := map[int32]*phonenumbers.PhoneMetadata{}
	var codes [1000]callingCode
	coll, err := phonenumbers.MetadataCollection()
	if err != nil {
		// Cannot happen (the library loaded this very collection when
		// it was imported, and panicked then if it could not); were it
		// to, no code is known and every number goes to the library.
		return &codes
	}
	// Later entries win, as in the library's own maps.
	for _, m := range coll.GetMetadata() {
		if m.GetId() == phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY {
			nonGeo[m.GetCountryCode()] = m
		} else {
			geo[m.GetId()] = m
		}
	}
	for cc := range codes {
		regions := phonenumbers.GetRegionCodesForCountryCode(cc)
		if len(regions) == 0 {
			continue
		}
		codes[cc].known = true
		m := geo[regions[0]]
		if regions[0] == phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY {
			m = nonGeo[int32(cc)]
		}
		if p := m.GetNationalPrefixForParsing(); p != "" {
			codes[cc].nationalPrefix = regexp.MustCompile("^(?:" + p + ")")
		}
	}
	return &codes
})
