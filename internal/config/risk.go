package config

import (
	"fmt"
	"net/http"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/sms"
)

// RiskConfig is the Twilio Lookup client of otp.risk (the network's risk
// score): it uses the Twilio account (TWILIO_ACCOUNT_SID and
// TWILIO_AUTH_TOKEN, and TWILIO_API_BASE_URL for a local fake).
type RiskConfig struct {
	// Timeout bounds one lookup (otp.risk.timeout, the policy's bound,
	// is usually shorter).
	Timeout time.Duration
	// MaxInFlight bounds the lookups under way at once (0: RiskCalls).
	MaxInFlight int
	// Price is what one lookup costs, in US dollars, for
	// otpguard_risk_lookup_cost_usd_total.
	Price float64
}

// DefaultRiskLookupPrice is OTPGUARD_RISK_LOOKUP_PRICE's default: an
// estimate of one SMS Pumping Risk lookup, in US dollars; set the price
// of your own contract.
const DefaultRiskLookupPrice = 0.01

// RiskLookupAvailable reports whether the Twilio account a Lookup needs
// is configured.
func (c *Config) RiskLookupAvailable() bool {
	return c.Twilio.AccountSID != "" && c.Twilio.AuthToken != ""
}

// RiskWarning is the warning of otp.risk mode on with no lookup to ask
// (lookup: the process has one of its own, app.WithRiskLookup): the rule
// is off then. "" when there is nothing to say.
func (c *Config) RiskWarning(lookup bool) string {
	if c.Policies.OTP.Risk.Mode != guard.RiskOn || lookup || c.RiskLookupAvailable() {
		return ""
	}
	return "otp.risk.mode is on but no risk lookup is available (set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN): the risk score is off, refused sends get the challenge as without it"
}

// RiskLookupOptions is the Lookup client's options; transport nil is the
// default one.
func (c *Config) RiskLookupOptions(transport http.RoundTripper) sms.LookupOptions {
	return sms.LookupOptions{AccountSID: c.Twilio.AccountSID, AuthToken: c.Twilio.AuthToken, BaseURL: c.Twilio.BaseURL,
		Timeout: c.Risk.Timeout, MaxInFlight: c.RiskCalls(), Transport: transport}
}

// RiskCalls is how many lookups one instance has under way at once:
// OTPGUARD_RISK_LOOKUP_MAX_IN_FLIGHT, or 8 and at most a quarter of
// OTPGUARD_MAX_IN_FLIGHT.
func (c *Config) RiskCalls() int {
	if c.Risk.MaxInFlight > 0 {
		return c.Risk.MaxInFlight
	}
	return min(sms.DefaultLookupCalls, max(1, c.MaxInFlight/4))
}

func checkRiskTimeout(c *Config) error {
	if d := c.Risk.Timeout; d < 100*time.Millisecond || d > 10*time.Second {
		return fmt.Errorf("must be between 100ms and 10s, got %s", d)
	}
	return nil
}

// checkRiskMaxInFlight: at most half of the instance's in-flight slots
// may wait on Lookup.
func checkRiskMaxInFlight(c *Config) error {
	if n, most := c.Risk.MaxInFlight, max(1, c.MaxInFlight/2); n != 0 && (n < 1 || n > most) {
		return fmt.Errorf("must be between 1 and half of OTPGUARD_MAX_IN_FLIGHT (%d), got %d", most, n)
	}
	return nil
}

func checkRiskPrice(c *Config) error {
	if p := c.Risk.Price; p < 0 || p > 10 {
		return fmt.Errorf("must be between 0 and 10 (US dollars), got %g", p)
	}
	return nil
}
