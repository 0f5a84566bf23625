package guard

import "testing"

func TestCarrierOf(t *testing.T) {
	for _, tc := range []struct{ number, name, key string }{
		{"+2348031234567", "MTN", "mtn"},
		{"+31612345678", "KPN", "kpn"},
		{"+447400123456", "Three", "three"},
		{"+254712345678", "Safaricom", "safaricom"},
		{"+14155550100", UnknownCarrier, UnknownCarrier}, // a US range: no carrier data
	} {
		p, err := ParsePhone(tc.number, "")
		if err != nil {
			t.Fatalf("%s: %v", tc.number, err)
		}
		if got := CarrierOf(p); got.Name != tc.name || got.Key != tc.key {
			t.Errorf("CarrierOf(%s) = %+v, want {%s %s}", tc.number, got, tc.name, tc.key)
		}
	}
	if got := CarrierOf(Phone{}); got.Key != UnknownCarrier {
		t.Errorf("CarrierOf(unparsed) = %+v, want unknown", got)
	}
}

func TestCarrierKey(t *testing.T) {
	for in, want := range map[string]string{
		"MTN": "mtn", " Mtn ": "mtn", "Vodafone Idea": "vodafone-idea", "T-Mobile": "t-mobile",
		"9mobile": "9mobile", "Orange (Mali)": "orange-mali", "": UnknownCarrier, "—": UnknownCarrier,
		"Télécel": "télécel", "A Very Long Carrier Name That Goes On And On": "a-very-long-carrier-name-that-goes-on-an",
	} {
		if got := CarrierKey(in); got != want {
			t.Errorf("CarrierKey(%q) = %q, want %q", in, got, want)
		}
	}
}
