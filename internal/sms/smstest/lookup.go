// Package smstest is a fake of the Twilio APIs otpguard calls, for tests
// that drive the real twilio-go client against it (internal/sms).
package smstest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// LookupAnswer is what the fake Lookup v2 API answers for a number.
type LookupAnswer struct {
	Score       int
	CarrierRisk string
	Blocked     bool
	LineType    string // "": line_type_intelligence is null
}

// Magic numbers the fake answers as Twilio's test credentials do. Twilio
// documents +447772000001 as its SMS pumping risk example (carrier risk
// "moderate", score 61, not blocked). The table of the other magic numbers
// on Twilio's "Testing SMS Pumping Risk with Magic Numbers" page could not
// be read when this fake was written, so the others are the fake's own
// (valid UK mobile numbers, +44 7400 900xxx), one per class a caller must
// tell apart.
const (
	MagicModerate = "+447772000001" // Twilio's example: moderate, 61
	MagicLow      = "+447400900001" // low, 5, mobile
	MagicHigh     = "+447400900002" // high, 95, blocked
	MagicHighOnly = "+447400900003" // high, 80, not blocked
	MagicVoIP     = "+447400900004" // low, 10, nonFixedVoip
	MagicPremium  = "+447400900005" // low, 3, premium
)

// LookupAnswers are the magic numbers' answers; any other number answers
// DefaultLookupAnswer.
var LookupAnswers = map[string]LookupAnswer{
	MagicModerate: {Score: 61, CarrierRisk: "moderate"},
	MagicLow:      {Score: 5, CarrierRisk: "low", LineType: "mobile"},
	MagicHigh:     {Score: 95, CarrierRisk: "high", Blocked: true, LineType: "mobile"},
	MagicHighOnly: {Score: 80, CarrierRisk: "high", LineType: "mobile"},
	MagicVoIP:     {Score: 10, CarrierRisk: "low", LineType: "nonFixedVoip"},
	MagicPremium:  {Score: 3, CarrierRisk: "low", LineType: "premium"},
}

// DefaultLookupAnswer is the answer for a number not in LookupAnswers.
var DefaultLookupAnswer = LookupAnswer{Score: 50, CarrierRisk: "mild", LineType: "mobile"}

// LookupMode is how the fake behaves.
type LookupMode int32

// The modes of the fake.
const (
	LookupOK   LookupMode = iota // answer at once
	LookupSlow                   // answer after Lookup.Delay
	Lookup500                    // 500 with Twilio's error body
	LookupHang                   // never answer: hold the request until the client gives up
)

// Lookup is a fake Twilio Lookup v2 API (GET /v2/PhoneNumbers/{number}):
// it checks the basic auth and the Fields asked, and answers as the
// mode says.
type Lookup struct {
	*httptest.Server
	SID, Token string
	// Delay is how long LookupSlow waits before it answers.
	Delay time.Duration
	// Answers, when set, replaces LookupAnswers (number -> answer).
	Answers map[string]LookupAnswer

	mode  atomic.Int32
	calls atomic.Int64
}

// NewLookup starts a fake with credentials sid and token; the test's
// cleanup closes it.
func NewLookup(t testing.TB, sid, token string) *Lookup {
	f := &Lookup{SID: sid, Token: token, Delay: 2 * time.Second}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// SetMode sets how the fake answers from now on.
func (f *Lookup) SetMode(m LookupMode) { f.mode.Store(int32(m)) }

// Calls is how many lookups the fake was asked.
func (f *Lookup) Calls() int64 { return f.calls.Load() }

func (f *Lookup) serve(w http.ResponseWriter, r *http.Request) {
	number, ok := strings.CutPrefix(r.URL.Path, "/v2/PhoneNumbers/")
	if r.Method != http.MethodGet || !ok {
		twilioError(w, http.StatusNotFound, 20404, "The requested resource was not found")
		return
	}
	f.calls.Add(1)
	if sid, token, ok := r.BasicAuth(); !ok || sid != f.SID || token != f.Token {
		twilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return
	}
	switch LookupMode(f.mode.Load()) {
	case Lookup500:
		twilioError(w, http.StatusInternalServerError, 20500, "Internal Server Error")
		return
	case LookupHang:
		<-r.Context().Done()
		return
	case LookupSlow:
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return
		}
	}
	answers := f.Answers
	if answers == nil {
		answers = LookupAnswers
	}
	a, ok := answers[number]
	if !ok {
		a = DefaultLookupAnswer
	}
	fields := r.URL.Query().Get("Fields")
	body := map[string]any{
		"calling_country_code": "44", "country_code": "GB", "phone_number": number, "national_format": number,
		"valid": true, "validation_errors": []string{}, "caller_name": nil, "sim_swap": nil, "call_forwarding": nil,
		"line_status": nil, "line_type_intelligence": nil, "identity_match": nil, "reassigned_number": nil,
		"sms_pumping_risk": nil, "phone_number_quality_score": nil, "pre_fill": nil,
		"url": "https://lookups.twilio.com/v2/PhoneNumbers/" + number,
	}
	if strings.Contains(fields, "sms_pumping_risk") {
		body["sms_pumping_risk"] = map[string]any{"carrier_risk_category": a.CarrierRisk, "number_blocked": a.Blocked,
			"number_blocked_date": nil, "number_blocked_last_3_months": nil, "sms_pumping_risk_score": a.Score, "error_code": nil}
	}
	if strings.Contains(fields, "line_type_intelligence") && a.LineType != "" {
		body["line_type_intelligence"] = map[string]any{"mobile_country_code": "234", "mobile_network_code": "10",
			"carrier_name": "Test Carrier", "type": a.LineType, "error_code": nil}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// twilioError writes Twilio's error body.
func twilioError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"code": %d, "message": %q, "more_info": "https://www.twilio.com/docs/errors/%d", "status": %d}`, code, msg, code, status)
}
