package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// otpFile is one of two policy files that differ only in OTP rules, each
// of which shows in the answers it decides: the per-number limit and its
// window (in a refusal's audit detail, "4 of 3 per 10m"), the code's life
// (a send's expires_in) and the message (the SMS).
type otpFile struct {
	name        string
	limit       int64
	window, ttl time.Duration
}

var otpFiles = [2]otpFile{
	{name: "A", limit: 3, window: 10 * time.Minute, ttl: 5 * time.Minute},
	{name: "B", limit: 5, window: 20 * time.Minute, ttl: 7 * time.Minute},
}

// yaml is the file. No cooldown and none of the shared abuse limits: the
// per-number limit is the only rule that refuses, so its counter holds
// every attempt to a number, sent or refused (the refusing limit keeps
// its attempt), whichever file decided it.
func (f otpFile) yaml() string {
	return fmt.Sprintf(`otp:
  cooldown: 0s
  code_ttl: %s
  message: "file %s: your code is {code}"
  per_phone: {limit: %d, window: %s}
  per_prefix: {limit: 0, window: 1h}
  prefix_depths: []
  country_velocity: {mode: "off"}
  conversion: {mode: monitor}
`, f.ttl, f.name, f.limit, f.window)
}

// otpAnswer is one POST /otp/send of the traffic.
type otpAnswer struct {
	phone     string
	attempt   int64 // the number's nth send
	status    int
	code      string // the problem's code on a refusal
	expiresIn int    // a send's expires_in
	requestID string
	// phase is the number of reloads done before the request started,
	// when no reload began before it ended; -1 when one did.
	phase int
}

// TestReloadUnderOTPTrafficIsAtomic is TestReloadUnderTrafficIsAtomic for
// POST /otp/send: while workers send codes (each its own numbers, one
// request at a time), the instance reloads back and forth between two
// files. Every answer must be wholly one file's: a send's code life and
// message are the same file's, and that file's per-number limit lets the
// attempt through; a refusal is that file's limit, with the attempt's
// exact count (the counter carries over every reload,
// docs/changing-limits.md). A request that ran wholly between two reloads
// is decided by the file the first of them put in force. Every send is one
// SMS and every SMS a send. Run it with -race.
func TestReloadUnderOTPTrafficIsAtomic(t *testing.T) {
	in, path := reloadInstance(t, otpFiles[0].yaml())
	c := &cluster{instances: []*instance{in}}

	const workers, phonesEach, attempts = 6, 10, 7 // attempts 4 and 5 are where the files differ
	// begun and done count the reloads begun and finished: a request that
	// sees done == d at its start and begun == d at its end ran wholly
	// under reload d's file.
	var begun, done, answered atomic.Int64
	answers := make([][]otpAnswer, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for p := range phonesEach {
				phone := fmt.Sprintf("+4474001%02d%03d", w, p)
				for n := int64(1); n <= attempts; n++ {
					d := done.Load()
					r := c.do(t, 0, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
					a := otpAnswer{phone: phone, attempt: n, status: r.Status, requestID: r.Header.Get("X-Request-Id"), phase: -1}
					if begun.Load() == d {
						a.phase = int(d)
					}
					a.code, a.expiresIn = sendAnswer(t, r)
					answers[w] = append(answers[w], a)
					answered.Add(1)
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	reloads := 0
	for reloading := true; reloading; {
		// Workers+1 answers under the file in force before the next reload:
		// at least one of them started after this file was put in force.
		mark := answered.Load()
		for answered.Load() < mark+workers+1 && reloading {
			select {
			case <-finished:
				reloading = false
			case <-time.After(time.Millisecond):
			}
		}
		if !reloading {
			break
		}
		reloads++
		writeFile(t, path, otpFiles[reloads%2].yaml())
		begun.Add(1)
		err := in.app.Reload(context.Background())
		done.Add(1)
		if err != nil {
			t.Errorf("Reload %d: %v", reloads, err)
			<-finished
			break
		}
	}

	sms := smsByPhone(in)
	var all []otpAnswer
	for _, as := range answers {
		all = append(all, as...)
	}
	details := refusalDetails(t, in, all)
	decided := map[string]map[string]int{} // file -> "attempt n: status" -> answers
	for _, f := range otpFiles {
		decided[f.name] = map[string]int{}
	}
	sent := map[string]int{} // phone -> sends answered 200 so far
	for _, a := range all {  // each number's answers in its order
		f, ok := decidedBy(t, a, sms[a.phone], sent, details)
		if !ok {
			continue
		}
		if a.phase >= 0 && f != otpFiles[a.phase%2] {
			t.Errorf("%s attempt %d (request %s) was decided by file %s, but file %s was in force from before it started until after it ended",
				a.phone, a.attempt, a.requestID, f.name, otpFiles[a.phase%2].name)
		}
		decided[f.name][fmt.Sprintf("attempt %d: %d", a.attempt, a.status)]++
	}
	for phone, msgs := range sms {
		if len(msgs) != sent[phone] {
			t.Errorf("%s: %d SMS for %d sends answered 200", phone, len(msgs), sent[phone])
		}
	}
	for _, f := range otpFiles {
		if len(decided[f.name]) == 0 {
			t.Errorf("no answer was decided by file %s: the reloads did not interleave with the traffic", f.name)
		}
	}
	t.Logf("%d reloads; answers by file: %v", reloads, decided)
}

// sendAnswer reads a send's expires_in, or a refusal's code.
func sendAnswer(t *testing.T, r response) (code string, expiresIn int) {
	if r.Status == http.StatusOK {
		var body struct {
			ExpiresIn int `json:"expires_in"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Errorf("send: 200 %s: %v", r.Body, err)
		}
		return "", body.ExpiresIn
	}
	var p httpx.Problem
	if err := json.Unmarshal(r.Body, &p); err != nil {
		t.Errorf("send: %d %s: %v", r.Status, r.Body, err)
	}
	return p.Code, 0
}

// smsByPhone is the instance's outbox, each number's messages in the order
// they were sent.
func smsByPhone(in *instance) map[string][]string {
	by := map[string][]string{}
	for _, m := range in.out.Sent() {
		by[m.To] = append(by[m.To], m.Body)
	}
	return by
}

// refusalDetails are the audit details of the refused answers, by request
// ID, once the audit queue has written every answer's event.
func refusalDetails(t *testing.T, in *instance, answers []otpAnswer) map[string]string {
	t.Helper()
	phones := map[string]int{}
	for _, a := range answers {
		phones[a.phone]++
	}
	details := map[string]string{}
	opsWait(t, "every send's audit event", func() bool {
		db := in.app.SQL()
		if db == nil {
			return false
		}
		for phone, n := range phones {
			events, err := db.ListEvents(context.Background(), ops.EventFilter{Phone: phone, Action: guard.ActionOTPSend, Limit: ops.MaxEventLimit})
			if err != nil {
				t.Fatalf("ListEvents: %v", err)
			}
			if len(events) < n {
				return false
			}
			for _, e := range events {
				details[e.RequestID] = e.Detail
			}
		}
		return true
	})
	return details
}

// decidedBy is the file that decided a, when the answer is wholly one
// file's (reported otherwise). sms are the messages to a's number; sent
// counts the sends of each number read so far, to pair each send with its
// SMS.
func decidedBy(t *testing.T, a otpAnswer, sms []string, sent map[string]int, details map[string]string) (otpFile, bool) {
	t.Helper()
	switch {
	case a.status == http.StatusOK:
		i := sent[a.phone]
		sent[a.phone]++
		if i >= len(sms) {
			t.Errorf("%s attempt %d: 200 without an SMS", a.phone, a.attempt)
			return otpFile{}, false
		}
		for _, f := range otpFiles {
			byTTL, byMessage := a.expiresIn == int(f.ttl.Seconds()), strings.HasPrefix(sms[i], "file "+f.name+":")
			if byTTL != byMessage {
				t.Errorf("%s attempt %d: expires_in %d and the SMS %q are not the same file's: half of a policy file and half of the other",
					a.phone, a.attempt, a.expiresIn, sms[i])
				return otpFile{}, false
			}
			if !byTTL {
				continue
			}
			if a.attempt > f.limit {
				t.Errorf("%s attempt %d sent by file %s past its per_phone limit of %d: the other file's limit with the rest of this one, or a count lost in a reload",
					a.phone, a.attempt, f.name, f.limit)
			}
			return f, true
		}
		t.Errorf("%s attempt %d: expires_in %d and the SMS %q are no file's", a.phone, a.attempt, a.expiresIn, sms[i])
	case a.status == http.StatusTooManyRequests && a.code == string(problem.CodePhoneRateLimited):
		detail, ok := details[a.requestID]
		var want []string
		for _, f := range otpFiles {
			if a.attempt <= f.limit {
				continue
			}
			u := guard.Usage(a.attempt, f.limit, f.window)
			if detail == u {
				return f, true
			}
			want = append(want, fmt.Sprintf("%q (file %s)", u, f.name))
		}
		t.Errorf("%s attempt %d refused (request %s) with the audit detail %q (found %v), want %s: the exact count under one file's limit",
			a.phone, a.attempt, a.requestID, detail, ok, strings.Join(want, " or "))
	default:
		t.Errorf("%s attempt %d: %d %s, want 200 or 429 phone_rate_limited", a.phone, a.attempt, a.status, a.code)
	}
	return otpFile{}, false
}
