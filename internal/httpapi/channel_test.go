package httpapi_test

import (
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// TestSendChannelJSON: /otp/send's channel picks the sender of a channel
// this deployment offers (here call, with TWILIO_VOICE_FROM) and the
// answer names it; none is SMS; a channel off here, or no channel at
// all, is 400 invalid_request and sends nothing.
func TestSendChannelJSON(t *testing.T) {
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), defaults())
	cfg.Twilio.VoiceFrom = "+14155550122"
	c := newClusterConfig(t, 1, cfg)
	for _, tc := range []struct {
		phone, channel string
		status         int
		want           string // the answer's and the message's channel; "" refused
	}{
		{"+447400100301", `"call"`, 200, guard.ChannelCall},
		{"+447400100302", `""`, 200, guard.ChannelSMS},
		{"+447400100303", `"sms"`, 200, guard.ChannelSMS},
		{"+447400100304", `"whatsapp"`, 400, ""},
		{"+447400100305", `"fax"`, 400, ""},
	} {
		before := len(c.out.Sent())
		r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+tc.phone+`","channel":`+tc.channel+`}`)
		if r.Status != tc.status {
			t.Fatalf("channel %s: %d %s, want %d", tc.channel, r.Status, r.Body, tc.status)
		}
		sent := c.out.Sent()
		if tc.want == "" {
			if code := r.json(t)["code"]; code != "invalid_request" || len(sent) != before {
				t.Errorf("channel %s: code %v, %d sent; want invalid_request, none sent", tc.channel, code, len(sent)-before)
			}
			continue
		}
		if got := r.json(t)["channel"]; got != tc.want {
			t.Errorf("channel %s: the answer says %v, want %s", tc.channel, got, tc.want)
		}
		last := sent[len(sent)-1]
		if last.To != tc.phone || last.Channel != tc.want || len(last.Code) != 6 {
			t.Errorf("channel %s: sent %s by %q (code %d digits), want by %s", tc.channel, last.To, last.Channel, len(last.Code), tc.want)
		}
	}
}
