package app

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTrustedProxiesSetting(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []netip.Prefix
		err         string
	}{
		{name: "unset: none trusted", value: ""},
		{name: "CIDR list", value: "10.0.0.0/8, 2001:db8::/32",
			want: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}},
		{name: "a bare address is one host", value: "192.0.2.7",
			want: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}},
		{name: "host bits are masked", value: "10.1.2.3/16",
			want: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
		{name: "not an address", value: "10.0.0.0/8,proxy.internal", err: "OTPGUARD_TRUSTED_PROXIES"},
		{name: "bad mask", value: "10.0.0.0/33", err: "OTPGUARD_TRUSTED_PROXIES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfig(func(k string) string {
				if k == "OTPGUARD_TRUSTED_PROXIES" {
					return tc.value
				}
				return ""
			})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg.TrustedProxies, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("TrustedProxies (-want +got):\n%s", diff)
			}
		})
	}
}
