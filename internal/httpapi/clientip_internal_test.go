package httpapi

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestClientIP(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("2001:db8:f::/48")}
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     []string
		realIP  string
		want    string
	}{
		{name: "no proxies: XFF from loopback is ignored", peer: "127.0.0.1:5000", xff: []string{"203.0.113.9"}, want: "127.0.0.1"},
		{name: "no proxies: XFF from a private peer is ignored", peer: "10.0.0.5:5000", xff: []string{"203.0.113.9"}, want: "10.0.0.5"},
		{name: "no proxies: X-Real-IP is ignored", peer: "10.0.0.5:5000", realIP: "203.0.113.9", want: "10.0.0.5"},
		{name: "untrusted peer: its XFF is ignored", trusted: proxies, peer: "127.0.0.1:5000", xff: []string{"203.0.113.9"}, want: "127.0.0.1"},
		{name: "untrusted private peer", trusted: proxies, peer: "10.0.1.5:5000", xff: []string{"203.0.113.9"}, want: "10.0.1.5"},
		{name: "trusted proxy names its client", trusted: proxies, peer: "10.0.0.5:5000", xff: []string{"203.0.113.9"}, want: "203.0.113.9"},
		{name: "right-most untrusted hop, not the forged left", trusted: proxies, peer: "10.0.0.5:5000", xff: []string{"198.51.100.1, 203.0.113.9"}, want: "203.0.113.9"},
		{name: "trusted hops are skipped", trusted: proxies, peer: "10.0.0.5:5000", xff: []string{"198.51.100.1, 203.0.113.9, 10.0.0.7"}, want: "203.0.113.9"},
		{name: "several XFF headers read as one list", trusted: proxies, peer: "10.0.0.5:5000", xff: []string{"198.51.100.1", "203.0.113.9"}, want: "203.0.113.9"},
		{name: "garbage in XFF: the peer", trusted: proxies, peer: "10.0.0.5:5000", xff: []string{"not-an-ip"}, want: "10.0.0.5"},
		{name: "IPv6 proxy", trusted: proxies, peer: "[2001:db8:f::1]:5000", xff: []string{"2001:db8:1::9"}, want: "2001:db8:1::9"},
		{name: "X-Real-IP from a trusted proxy", trusted: proxies, peer: "10.0.0.5:5000", realIP: "203.0.113.9", want: "203.0.113.9"},
		{name: "X-Real-IP from an untrusted peer", trusted: proxies, peer: "192.168.1.5:5000", realIP: "203.0.113.9", want: "192.168.1.5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if tc.realIP != "" {
				r.Header.Set("X-Real-IP", tc.realIP)
			}
			if got := clientIP(tc.trusted)(r); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
