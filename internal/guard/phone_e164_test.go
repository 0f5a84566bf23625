package guard

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/nyaruka/phonenumbers"
	"github.com/otpguard/otpguard/internal/problem"
	"google.golang.org/protobuf/proto"
)

// e164Inputs are what parseE164 is held to libphonenumber on, each with
// the default region to parse it with: libphonenumber's example numbers of
// every region and type, in E.164 and with the national prefix after the
// calling code (which the library strips, or not, by the region's rules);
// every calling code 1-999 followed by digits of lengths 0-18; seeded
// random digit strings of 2-17 digits after "+"; and the edges: leading
// zeros, unknown codes, too short, too long.
func e164Inputs(t *testing.T) [][2]string {
	t.Helper()
	var in [][2]string
	regions := []string{"ZZ", "IN", "GB", "US", "AR", "IT", "001", "XX"}
	add := func(raw string) { in = append(in, [2]string{raw, regions[len(in)%len(regions)]}) }
	for region := range phonenumbers.GetSupportedRegions() {
		cc := strconv.Itoa(phonenumbers.GetCountryCodeForRegion(region))
		ndd := phonenumbers.GetNddPrefixForRegion(region, true)
		for _, ty := range numberTypes {
			n := phonenumbers.GetExampleNumberForType(region, ty)
			if n == nil {
				continue
			}
			nsn := phonenumbers.GetNationalSignificantNumber(n)
			in = append(in, [2]string{"+" + cc + nsn, "ZZ"}, [2]string{"+" + cc + nsn, region})
			add("+" + cc + ndd + nsn)
			add("+" + cc + "0" + nsn)
		}
	}
	for cc := range phonenumbers.GetSupportedGlobalNetworkCallingCodes() {
		add(phonenumbers.Format(phonenumbers.GetExampleNumberForNonGeoEntity(cc), phonenumbers.E164))
	}
	r := rand.New(rand.NewPCG(26, 1))
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		return b.String()
	}
	for cc := 1; cc < 1000; cc++ {
		for k := range 4 { // lengths 0-18, a different four for each code
			add("+" + strconv.Itoa(cc) + digits((cc+5*k)%19))
		}
	}
	for range 3000 {
		add("+" + digits(2+r.IntN(16)))
	}
	for _, raw := range []string{"+12", "+123", "+9112", "+91123", "+3900", "+39000", "+390000", "+39000000000",
		"+3906698", "+0091 9812345678", "+00919812345678", "+0919812345678", "+999123456", "+80012345678",
		"+91" + strings.Repeat("9", 17), "+91" + strings.Repeat("9", 18), "+1" + strings.Repeat("2", 62),
		"+5491123456789", "+54 9 11 2345-6789", "+919812345678", "++919812345678", "+91981234567８"} {
		for _, region := range regions {
			in = append(in, [2]string{raw, region})
		}
	}
	return in
}

// TestParseE164AsLibphonenumber: wherever parseE164 answers, its number
// (every field, as proto.Equal compares them) and its error are
// phonenumbers.Parse's, for every input of e164Inputs.
func TestParseE164AsLibphonenumber(t *testing.T) {
	in := e164Inputs(t)
	answered := 0
	for _, c := range in {
		raw, region := c[0], c[1]
		got, err := parseE164(raw, region)
		if err == errNotE164 {
			continue
		}
		answered++
		want, wantErr := phonenumbers.Parse(raw, region)
		if err != wantErr {
			t.Errorf("parseE164(%q, %q) error %v, want %v", raw, region, err, wantErr)
		} else if err == nil && !proto.Equal(got, want) {
			t.Errorf("parseE164(%q, %q) = %v, want %v", raw, region, got, want)
		}
	}
	// The comparison means something only where parseE164 answers: most
	// inputs are canonical numbers of known codes.
	if answered < len(in)/2 {
		t.Errorf("parseE164 answered %d of %d inputs, want at least half", answered, len(in))
	}
}

// TestParsePhoneE164AsLibrary: ParsePhone, which takes parseE164's road,
// answers as it does with phonenumbers.Parse for every input of e164Inputs
// parseE164 answers (the others take the library's road in both).
func TestParsePhoneE164AsLibrary(t *testing.T) {
	for _, c := range e164Inputs(t) {
		raw, region := c[0], c[1]
		if _, err := parseE164(raw, region); err == errNotE164 {
			continue
		}
		if region == "ZZ" {
			region = "" // as ParsePhone is called
		}
		got, err := ParsePhone(raw, region)
		want, wantErr := parsePhone(raw, region, phonenumbers.Parse)
		if problem.CodeOf(err) != problem.CodeOf(wantErr) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Errorf("ParsePhone(%q, %q) error %v, want %v", raw, region, err, wantErr)
			continue
		}
		if got.E164 != want.E164 || got.Region != want.Region || got.typ != want.typ || !proto.Equal(got.num, want.num) {
			t.Errorf("ParsePhone(%q, %q) = %+v, want %+v", raw, region, got, want)
		}
	}
}

// TestParseE164Answers: the numbers clients send take the short road; what
// depends on the default region or on the library's length rules for a
// national prefix goes to the library.
func TestParseE164Answers(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		answers   bool
	}{
		{"indian mobile", "+919812345678", true},
		{"us", "+14155550100", true},
		{"italian leading zero", "+390669812345", true},
		{"too long after the code", "+91" + strings.Repeat("9", 18), true},
		{"two digits", "+12", true},
		{"national prefix written", "+4407700900123", false},
		{"argentina's prefix pattern matches anything", "+5491123456789", false},
		{"international prefix after the plus", "+00919812345678", false},
		{"unknown code", "+999123456", false},
		{"punctuation", "+91 98123 45678", false},
		{"other digits", "+91981234567８", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseE164(tc.raw, "ZZ")
			if got := err != errNotE164; got != tc.answers {
				t.Errorf("parseE164(%q) answers %v (%v), want %v", tc.raw, got, err, tc.answers)
			}
		})
	}
}

// BenchmarkParsePhone: ParsePhone on distinct Indian mobile numbers in
// E.164, through phonenumbers.Parse (library, as before) and parseE164.
func BenchmarkParsePhone(b *testing.B) {
	for _, bc := range []struct {
		name  string
		parse func(raw, region string) (*phonenumbers.PhoneNumber, error)
	}{{"library", phonenumbers.Parse}, {"e164", parseNumber}} {
		b.Run(bc.name, func(b *testing.B) {
			nums := make([]string, b.N)
			for i := range nums {
				nums[i] = fmt.Sprintf("+9198%08d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := parsePhone(nums[i], "", bc.parse); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
