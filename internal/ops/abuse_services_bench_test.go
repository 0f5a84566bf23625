package ops_test

import (
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// BenchmarkAbuseRecordSend is what counting one send costs the recorder
// (its events arrive on the send's path), without services and with the
// service rows counted too.
func BenchmarkAbuseRecordSend(b *testing.B) {
	now := time.Unix(1_780_000_000, 0)
	for _, bc := range []struct {
		name     string
		services []guard.Service
	}{{"no services", nil}, {"services", []guard.Service{{SID: shopSID}, {SID: bankSID}}}} {
		b.Run(bc.name, func(b *testing.B) {
			st := &fakeAbuseCounters{counts: map[string]int64{}}
			r := ops.NewAbuseRecorder(ops.AbuseRecorderOptions{Store: st, Policy: func() guard.OTPPolicy { return guard.DefaultPolicies().OTP },
				Services: func() []guard.Service { return bc.services }, Now: func() time.Time { return now }})
			e := guard.Event{At: now, Action: guard.ActionOTPSend, Outcome: guard.OutcomeSent, Phone: "+2348031234567", Country: "NG", Service: shopSID}
			b.ReportAllocs()
			for b.Loop() {
				r.Record(e)
			}
		})
	}
}
