package app_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
)

// TestPolicyNamedLikeABuiltInIsRefusedAtStart: a limit policy that takes a
// policy label otpguard gives its own decisions (otp_send, ...) would mix
// its series with theirs: start-up refuses it, naming the policy.
func TestPolicyNamedLikeABuiltInIsRefusedAtStart(t *testing.T) {
	for _, name := range guard.ReservedPolicyNames {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Load(func(k string) string {
				if k == "OTPGUARD_DATA_DIR" {
					return t.TempDir()
				}
				return ""
			})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Policies.Limits = map[string]limit.Policy{
				name:  {Algorithm: limit.FixedWindow, Limit: 10, Window: 60e9, OnStoreError: limit.FallbackOpen},
				"api": {Algorithm: limit.FixedWindow, Limit: 10, Window: 60e9, OnStoreError: limit.FallbackOpen},
			}
			a, err := app.New(context.Background(), cfg, app.WithOutput(io.Discard))
			if err == nil {
				a.Close()
				t.Fatalf("app.New with a limit policy named %q: no error", name)
			}
			if msg := err.Error(); !strings.Contains(msg, "limits."+name+":") || !strings.Contains(msg, "reserved") ||
				strings.Contains(msg, "limits.api") {
				t.Errorf("error %q, want one naming limits.%s as reserved (and nothing about limits.api)", msg, name)
			}
		})
	}
}
