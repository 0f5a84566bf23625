package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
)

// whatsAppOn turns the whatsapp channel on.
func whatsAppOn(cfg *config.Config) {
	cfg.Twilio.WhatsAppFrom, cfg.Twilio.WhatsAppContentSID = "+14155550111", "HX0123456789abcdef0123456789abcdef"
}

// fallbackOf reads a problem's fallback channel ("" none).
func fallbackOf(t *testing.T, r response) string {
	t.Helper()
	var p httpx.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	if p.Fallback == nil {
		return ""
	}
	return p.Fallback.Channel
}

// TestFallbackChannel: with otp.fallback_channel whatsapp, an SMS send the
// country velocity rule holds is a 428 (challenges on) or a 429
// unusual_volume (off) whose problem names whatsapp; the same send by
// whatsapp then goes out, as do more to the country's new numbers, which
// the automatic rules no longer hold, and its code verifies. The number's
// own limits still hold a fallback send, and their refusal offers nothing.
// Without the fallback, the 428 names none.
func TestFallbackChannel(t *testing.T) {
	for _, tc := range []struct {
		name             string
		challenges       bool
		fallback         string
		wantCode, wantFB string
	}{
		{name: "challenged", challenges: true, fallback: guard.ChannelWhatsApp, wantCode: "challenge_required", wantFB: guard.ChannelWhatsApp},
		{name: "refused", fallback: guard.ChannelWhatsApp, wantCode: "unusual_volume", wantFB: guard.ChannelWhatsApp},
		{name: "no fallback", challenges: true, wantCode: "challenge_required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := challengePolicy(10)
			p.OTP.FallbackChannel = tc.fallback
			if !tc.challenges {
				p.OTP.Challenge.Type = guard.ChallengeOff
			}
			c, _ := challengeCluster(t, false, p, whatsAppOn)
			if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400500001"}`); r.Status != http.StatusOK {
				t.Fatalf("first send: %d %s", r.Status, r.Body)
			}
			held := `{"phone":"+447400500002"}`
			r := c.do(t, 1, "POST", "/otp/send", held)
			holdToSpec(t, held, r)
			if got := problemCode(t, r); got != tc.wantCode {
				t.Fatalf("second SMS: %d %s, want %s", r.Status, r.Body, tc.wantCode)
			}
			if got := fallbackOf(t, r); got != tc.wantFB {
				t.Fatalf("second SMS offers %q, want %q", got, tc.wantFB)
			}
			if tc.wantFB == "" {
				return
			}
			// The same send by the offered channel, and more of the
			// country's new numbers: none held by the velocity rule.
			for i := 2; i <= 6; i++ {
				phone := fmt.Sprintf("+4474005000%02d", i)
				body := `{"phone":"` + phone + `","channel":"whatsapp"}`
				r := c.do(t, i%2, "POST", "/otp/send", body)
				if r.Status != http.StatusOK {
					t.Fatalf("whatsapp to %s: %d %s, want 200", phone, r.Status, r.Body)
				}
				if i == 2 {
					holdToSpec(t, body, r)
				}
			}
			sent := c.out.Sent()
			last := sent[len(sent)-1]
			if last.Channel != guard.ChannelWhatsApp || c.out.SentTo("+447400500002") != 1 {
				t.Fatalf("last sent by %q, %d to the held number; want whatsapp, 1", last.Channel, c.out.SentTo("+447400500002"))
			}
			if r := c.do(t, 0, "POST", "/otp/verify", `{"phone":"`+last.To+`","code":"`+last.Code+`"}`); r.Status != http.StatusOK {
				t.Fatalf("verifying the whatsapp code: %d %s", r.Status, r.Body)
			}
			// SMS is still held after them.
			if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400500009"}`); problemCode(t, r) != tc.wantCode {
				t.Fatalf("an SMS after the whatsapp sends: %d %s, want %s", r.Status, r.Body, tc.wantCode)
			}
			// The channel's own window per number (3 in 10 minutes) holds
			// a fallback send, and offers nothing.
			statuses := []int{}
			for range 4 {
				r = c.do(t, 0, "POST", "/otp/send", `{"phone":"+447400500010","channel":"whatsapp"}`)
				statuses = append(statuses, r.Status)
			}
			if got := problemCode(t, r); got != "phone_rate_limited" || fallbackOf(t, r) != "" {
				t.Fatalf("fourth whatsapp to one number: %v, %s; want phone_rate_limited, no fallback", statuses, r.Body)
			}
		})
	}
}
