package app

import (
	"context"

	"github.com/otpguard/otpguard/internal/metrics"
	"github.com/otpguard/otpguard/internal/sms"
)

// buildRiskLookup is what otp.risk asks the network's risk score of: the
// caller's lookup (WithRiskLookup), else Twilio Lookup v2 when the Twilio
// account is configured, else none: the rule is off whatever the policy
// says, and a policy with mode on is warned about once, here.
func (w *wiring) buildRiskLookup(_ context.Context) error {
	a := w.a
	w.riskHooks = metrics.NewRisk(w.metrics, a.cfg.Risk.Price).Hooks()
	if warn := a.cfg.RiskWarning(w.o.risk != nil); warn != "" {
		a.log.Warn(warn)
	}
	switch {
	case w.o.risk != nil:
		w.riskLookup = w.o.risk
	case a.cfg.RiskLookupAvailable():
		l, err := sms.NewLookup(a.cfg.RiskLookupOptions(w.tr.smsTransport()))
		if err != nil {
			return err
		}
		w.riskLookup = l
	}
	return nil
}
