package httpapi_test

import (
	"sync"
	"testing"
	"time"

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
		answer := r.json(t)
		if got := answer["channel"]; got != tc.want {
			t.Errorf("channel %s: the answer says %v, want %s", tc.channel, got, tc.want)
		}
		// Its verification record keeps the channel.
		if v := c.do(t, 0, "GET", "/otp/verifications/"+answer["verification_id"].(string), ""); v.json(t)["channel"] != tc.want {
			t.Errorf("channel %s: the verification %d %s, want channel %s", tc.channel, v.Status, v.Body, tc.want)
		}
		last := sent[len(sent)-1]
		if last.To != tc.phone || last.Channel != tc.want || len(last.Code) != 6 {
			t.Errorf("channel %s: sent %s by %q (code %d digits), want by %s", tc.channel, last.To, last.Channel, len(last.Code), tc.want)
		}
	}
}

// TestChannelLimitsExact: two instances on one real Redis, concurrent
// calls to one number: exactly otp.channels.call.per_phone.limit go out,
// the rest are 429 phone_rate_limited, while that number's SMS still has
// its own room. Each call takes its price from the spend budget: a budget
// of 12 an hour holds two calls (price 5) and then two SMS, not a third
// call.
func TestChannelLimitsExact(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.PerPhone = guard.Window{Limit: 100, Window: time.Hour}
	p.OTP.Channels = map[string]guard.ChannelPolicy{
		guard.ChannelSMS:  {Price: 1},
		guard.ChannelCall: {PerPhone: guard.Window{Limit: 3, Window: time.Hour}, Price: 5},
	}
	p.OTP.Budget = guard.Budget{PerHour: 12}
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), p)
	cfg.Twilio.VoiceFrom = "+14155550122"
	c := newClusterConfig(t, 2, cfg)

	const phone = "+447400100401"
	var wg sync.WaitGroup
	statuses := make([]int, 12)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = c.do(t, i, "POST", "/otp/send", `{"phone":"`+phone+`","channel":"call"}`).Status
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	// The budget (12) holds two calls of price 5: the third refused by
	// the call window would be the budget's too, so the window's limit of
	// 3 is not reached; exactly 2 go out.
	if count[200] != 2 || count[200]+count[429]+count[503] != len(statuses) {
		t.Fatalf("concurrent calls: %v, want exactly 2 sent, the rest refused", count)
	}
	if got := c.out.Sent(); len(got) != 2 {
		t.Errorf("%d sent, want 2", len(got))
	}
	// The budget has 2 left: two SMS, then budget_exhausted.
	for i, want := range []int{200, 200, 503} {
		if r := c.do(t, i, "POST", "/otp/send", `{"phone":"+447400100402"}`); r.Status != want {
			t.Errorf("SMS %d after the calls: %d %s, want %d", i, r.Status, r.Body, want)
		}
	}
}

// TestChannelWindowExact: with room in the budget, concurrent calls to
// one number over two instances stop at exactly the call window's limit.
func TestChannelWindowExact(t *testing.T) {
	p := defaults()
	p.OTP.Cooldown = 0
	p.OTP.PerPhone = guard.Window{Limit: 100, Window: time.Hour}
	p.OTP.Channels = map[string]guard.ChannelPolicy{guard.ChannelCall: {PerPhone: guard.Window{Limit: 3, Window: time.Hour}, Price: 5}}
	tg := redistest.New(t)
	cfg := testConfig(t, tg.URL, tg.Prefix, t.TempDir(), p)
	cfg.Twilio.VoiceFrom = "+14155550122"
	c := newClusterConfig(t, 2, cfg)

	const phone = "+447400100403"
	var wg sync.WaitGroup
	codes := make([]string, 16)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.do(t, i, "POST", "/otp/send", `{"phone":"`+phone+`","channel":"call"}`)
			if r.Status == 200 {
				codes[i] = "sent"
			} else {
				codes[i], _ = r.json(t)["code"].(string)
			}
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for _, s := range codes {
		count[s]++
	}
	if count["sent"] != 3 || count["phone_rate_limited"] != len(codes)-3 {
		t.Fatalf("concurrent calls: %v, want exactly 3 sent and the rest phone_rate_limited", count)
	}
	// The number's SMS is not counted in the call window.
	if r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`); r.Status != 200 {
		t.Errorf("an SMS after the calls: %d %s, want 200", r.Status, r.Body)
	}
}
