package guard

import "github.com/nyaruka/phonenumbers"

// numberTypes are the names of otp.allowed_number_types.
var numberTypes = map[string]phonenumbers.PhoneNumberType{
	"fixed_line":           phonenumbers.FIXED_LINE,
	"mobile":               phonenumbers.MOBILE,
	"fixed_line_or_mobile": phonenumbers.FIXED_LINE_OR_MOBILE,
	"toll_free":            phonenumbers.TOLL_FREE,
	"premium_rate":         phonenumbers.PREMIUM_RATE,
	"shared_cost":          phonenumbers.SHARED_COST,
	"voip":                 phonenumbers.VOIP,
	"personal_number":      phonenumbers.PERSONAL_NUMBER,
	"pager":                phonenumbers.PAGER,
	"uan":                  phonenumbers.UAN,
	"voicemail":            phonenumbers.VOICEMAIL,
	"unknown":              phonenumbers.UNKNOWN,
}

// NumberType is libphonenumber's type of an E.164 number, by its name in
// otp.allowed_number_types ("mobile", "premium_rate", ...).
func NumberType(e164 string) string {
	p, err := ParsePhone(e164, "")
	if err != nil {
		return "unknown"
	}
	return p.Type()
}

// Type is the number's type, as NumberType names it, from the parse
// ParsePhone already did.
func (p Phone) Type() string {
	if p.typ != "" { // ParsePhone found it
		return p.typ
	}
	if p.num == nil {
		return NumberType(p.E164)
	}
	return typeName(phonenumbers.GetNumberType(p.num))
}
