package main

import (
	"context"
	"strings"
	"testing"
)

func TestRedisModeConfig(t *testing.T) {
	keys := map[string]string{"OTPGUARD_API_KEYS": "e2e-key-0123456789abcdef", "OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef", "OTPGUARD_SMS": "console"}
	with := func(vars map[string]string) map[string]string {
		for k, v := range keys {
			vars[k] = v
		}
		return vars
	}
	for _, tc := range []struct {
		name string
		vars map[string]string
		want []string // each must appear in the error; none: valid
	}{
		{"cluster", with(map[string]string{"OTPGUARD_REDIS_MODE": "cluster", "OTPGUARD_REDIS_ADDRS": "10.0.0.1:6379,10.0.0.2:6379"}), nil},
		{"sentinel", with(map[string]string{"OTPGUARD_REDIS_MODE": "sentinel", "OTPGUARD_REDIS_ADDRS": "10.0.0.1:26379", "OTPGUARD_REDIS_MASTER": "mymaster", "OTPGUARD_REDIS_PASSWORD": "pw"}), nil},
		{"single with credentials", with(map[string]string{"OTPGUARD_REDIS_URL": "rediss://10.0.0.1:6380/0", "OTPGUARD_REDIS_USERNAME": "og", "OTPGUARD_REDIS_PASSWORD": "pw"}), nil},
		{"unknown mode", with(map[string]string{"OTPGUARD_REDIS_MODE": "ring", "OTPGUARD_REDIS_ADDRS": "a:1"}), []string{"OTPGUARD_REDIS_MODE"}},
		{"cluster without addrs", with(map[string]string{"OTPGUARD_REDIS_MODE": "cluster"}), []string{"OTPGUARD_REDIS_ADDRS"}},
		{"cluster with url", with(map[string]string{"OTPGUARD_REDIS_MODE": "cluster", "OTPGUARD_REDIS_ADDRS": "a:1", "OTPGUARD_REDIS_URL": "redis://a:1/0"}), []string{"OTPGUARD_REDIS_URL"}},
		{"bad addr", with(map[string]string{"OTPGUARD_REDIS_MODE": "cluster", "OTPGUARD_REDIS_ADDRS": "nohost"}), []string{"OTPGUARD_REDIS_ADDRS"}},
		{"sentinel without master", with(map[string]string{"OTPGUARD_REDIS_MODE": "sentinel", "OTPGUARD_REDIS_ADDRS": "a:26379"}), []string{"OTPGUARD_REDIS_MASTER"}},
		{"addrs in single mode", map[string]string{"OTPGUARD_REDIS_ADDRS": "a:1"}, []string{"OTPGUARD_REDIS_ADDRS"}},
		{"tls in single mode", map[string]string{"OTPGUARD_REDIS_TLS": "true"}, []string{"OTPGUARD_REDIS_TLS"}},
		{"password twice", map[string]string{"OTPGUARD_REDIS_PASSWORD": "x", "OTPGUARD_REDIS_PASSWORD_FILE": "/nope"}, []string{"OTPGUARD_REDIS_PASSWORD"}},
		{"cluster needs keys", map[string]string{"OTPGUARD_REDIS_MODE": "cluster", "OTPGUARD_REDIS_ADDRS": "a:1"}, []string{"OTPGUARD_API_KEYS", "OTPGUARD_HMAC_KEY"}},
		{"braces in prefix", with(map[string]string{"OTPGUARD_REDIS_MODE": "cluster", "OTPGUARD_REDIS_ADDRS": "a:1", "OTPGUARD_REDIS_PREFIX": "og{x}:"}), []string{"OTPGUARD_REDIS_PREFIX"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			err := run(context.Background(), []string{"otpguard", "config", "check"}, env(tc.vars), &out)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("config check: %v, want valid", err)
				}
				if strings.Contains(out.String(), "pw") {
					t.Errorf("config check printed the password:\n%s", out.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("config check passed, want an error naming %v", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}
