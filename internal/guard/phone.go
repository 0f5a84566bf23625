package guard

import (
	"net/netip"
	"strings"
	"unicode"

	"github.com/nyaruka/phonenumbers"

	"github.com/otpguard/otpguard/internal/problem"
)

// maxPhoneInput bounds what is handed to libphonenumber: no real number,
// however formatted, is longer.
const maxPhoneInput = 64

// Phone is a number normalised to E.164, with the region it belongs to.
type Phone struct {
	E164   string // "+919800000000"
	Region string // ISO 3166-1 alpha-2, "IN"; "" when the number has none (e.g. +800)
	num    *phonenumbers.PhoneNumber
	typ    string // the number's type (Type), found by ParsePhone; "" when not parsed
	// service is the service whose send or verify this is ("" the
	// default service): its automatic rules and limits count in the
	// service's rooms (room.go).
	service string
}

// ParsePhone normalises raw to E.164 with libphonenumber, so that every way of
// writing one number ("+91 98000 00000", "+91-98000-00000") builds the same
// keys. defaultRegion (ISO code or "") is used for numbers written without
// a country calling code. It refuses what does not parse or is not a valid
// number, with the reason in the message.
func ParsePhone(raw, defaultRegion string) (Phone, error) {
	return parsePhone(raw, defaultRegion, parseNumber)
}

// parsePhone is ParsePhone with libphonenumber's parse (phonenumbers.Parse
// or parseNumber, its shortcut) passed in, so that a test and a benchmark
// can hold the two side by side.
func parsePhone(raw, defaultRegion string, parse func(raw, region string) (*phonenumbers.PhoneNumber, error)) (Phone, error) {
	raw = strings.TrimSpace(raw)
	switch {
	case raw == "":
		return Phone{}, problem.Errorf(problem.CodeInvalidPhone, "phone is required")
	case len(raw) > maxPhoneInput:
		return Phone{}, problem.Errorf(problem.CodeInvalidPhone, "phone is longer than %d characters", maxPhoneInput)
	}
	if !twoDigits(raw) {
		// libphonenumber refuses it too (a number needs two decimal
		// digits, \p{Nd}, to be viable), after its regular expressions:
		// junk is refused here for a scan of its bytes.
		return Phone{}, unparsedPhone()
	}
	region := strings.ToUpper(defaultRegion)
	if region == "" {
		region = "ZZ" // unknown region: only numbers with a leading + parse
	}
	num, err := parse(raw, region)
	if err != nil {
		return Phone{}, unparsedPhone()
	}
	// A number is valid when its region's metadata gives it a type
	// (phonenumbers.IsValidNumber asks the same question): finding the
	// type once answers both, and Type later costs nothing. Finding the
	// region is costly for codes shared by many (+1, +44, +7), so it is
	// done once more here and not a third time.
	t := phonenumbers.GetNumberType(num)
	if t == phonenumbers.UNKNOWN {
		return Phone{}, problem.Errorf(problem.CodeInvalidPhone, "phone is not a valid number for its country")
	}
	region = phonenumbers.GetRegionCodeForNumber(num)
	if region == "ZZ" || region == "001" {
		region = ""
	}
	return Phone{E164: phonenumbers.Format(num, phonenumbers.E164), Region: region, num: num, typ: typeName(t)}, nil
}

// unparsedPhone refuses a number libphonenumber cannot parse: a new
// *Error each time, which its receiver may change.
func unparsedPhone() error {
	return &problem.Error{Code: problem.CodeInvalidPhone, Message: "phone does not parse as a number (write it in international format, e.g. +14155550100)"}
}

// twoDigits reports whether s holds at least two decimal digits (Unicode
// category Nd, as libphonenumber counts them: "٠١" is two).
func twoDigits(s string) bool {
	n := 0
	for _, r := range s {
		if r >= '0' && r <= '9' || r > unicode.MaxASCII && unicode.IsDigit(r) {
			if n++; n == 2 {
				return true
			}
		}
	}
	return false
}

// typeName names a libphonenumber type as otp.allowed_number_types does.
func typeName(t phonenumbers.PhoneNumberType) string {
	for name, v := range numberTypes {
		if v == t {
			return name
		}
	}
	return "unknown"
}

// WarmPhoneMetadata makes libphonenumber load its metadata now, at start-up,
// so the first request does not pay for it.
func WarmPhoneMetadata() {
	_, _ = ParsePhone("+14155550100", "")
	warmCarriers()
}

// CleanIP is the end user's address as the audit trail records it: the
// canonical form of an address IPSubject accepted, "" for anything else.
func CleanIP(raw string) string {
	addr, err := netip.ParseAddr(strings.TrimSpace(raw))
	if err != nil || addr.Zone() != "" {
		return ""
	}
	return addr.Unmap().String()
}

// IPSubject turns the end user's address into the subject its limit is
// counted under: an IPv4 address as is, an IPv6 address by its /64, because
// one subscriber usually holds a whole /64 and could rotate through it.
// An empty input gives "" (no per-IP limit applies).
func IPSubject(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", nil
	}
	if len(raw) > 64 {
		return "", problem.Errorf(problem.CodeInvalidRequest, "client_ip is too long")
	}
	addr, err := netip.ParseAddr(raw)
	if err != nil || addr.Zone() != "" { // a zone names a local interface, never a caller
		return "", problem.Errorf(problem.CodeInvalidRequest, "client_ip is not an IP address")
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return addr.String(), nil
	}
	prefix, err := addr.Prefix(64)
	if err != nil {
		return "", problem.Errorf(problem.CodeInvalidRequest, "client_ip is not an IP address")
	}
	return prefix.String(), nil
}

// parseSend reads a send's number (to E.164, in defaultRegion when it has
// no country code) and the end user's address: its per-IP subject ("" for
// none), and as the audit trail records it (CleanIP), which is returned on
// a refusal too, as is the number when it parsed. The locale, when named,
// must be a supported one: req.Locale is left spelt as Twilio spells it.
func parseSend(req *SendRequest, defaultRegion string) (phone Phone, ip, auditIP string, err error) {
	auditIP = CleanIP(req.ClientIP)
	phone, err = ParsePhone(req.Phone, defaultRegion)
	if err != nil {
		return phone, "", auditIP, err
	}
	phone.service = req.Service // its rooms (room.go)
	if len(req.Challenge) > MaxChallengeSolution {
		return phone, "", auditIP, problem.Errorf(problem.CodeInvalidRequest, "challenge is longer than %d bytes", MaxChallengeSolution)
	}
	if ip, err = IPSubject(req.ClientIP); err != nil {
		return phone, "", auditIP, err
	}
	if req.Locale != "" {
		l, ok := CanonicalLocale(req.Locale)
		if !ok {
			return phone, "", auditIP, LocaleProblem("locale", req.Locale)
		}
		req.Locale = l
	}
	return phone, ip, auditIP, nil
}
