package client_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// contractFake is a FAKE of otpguard's idempotency and verification
// contract: Idempotency-Key on POST /otp/send, verification_id
// and status on send and verify, GET /otp/verifications/{id} and POST
// /otp/verifications/{id}/cancel. It keeps everything in memory and knows
// nothing of limits. verificationTargets (verification_test.go) runs the
// same tests against it and against the real otpguard; the fake alone
// can hold a send in flight (idempotency_key_in_progress).
type contractFake struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	byID   map[string]*fakeVerification
	byNum  map[string]string // phone -> its live verification id
	idem   map[string]fakeReply
	flight map[string]bool // idempotency keys being answered
	sends  int
	// hold, when set, keeps sends in flight until it is closed; each send
	// held says so on held first.
	hold, held chan struct{}
}

type fakeVerification struct {
	ID          string    `json:"verification_id"`
	To          string    `json:"to"`
	Status      string    `json:"status"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Attempts    int       `json:"attempts"`
	MaxAttempts int       `json:"max_attempts"`
	code        string
}

type fakeReply struct {
	body   string // the request body it answered
	status int
	answer []byte
}

func newContractFake(t *testing.T) (*contractFake, string) {
	f := &contractFake{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), byID: map[string]*fakeVerification{},
		byNum: map[string]string{}, idem: map[string]fakeReply{}, flight: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /otp/send", f.send)
	mux.HandleFunc("POST /otp/verify", f.verify)
	mux.HandleFunc("GET /otp/verifications/{id}", f.get)
	mux.HandleFunc("POST /otp/verifications/{id}/cancel", f.cancel)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func (f *contractFake) code(phone string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byID[f.byNum[phone]].code
}

func (f *contractFake) send(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	if key != "" {
		if prev, ok := f.idem[key]; ok {
			f.mu.Unlock()
			if prev.body != string(body) {
				fakeProblem(w, 422, "idempotency_key_reused", 0)
				return
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(prev.status)
			_, _ = w.Write(prev.answer)
			return
		}
		if f.flight[key] {
			f.mu.Unlock()
			fakeProblem(w, 409, "idempotency_key_in_progress", 1)
			return
		}
		f.flight[key] = true
	}
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		f.held <- struct{}{}
		<-hold
	}
	var req struct {
		Phone string `json:"phone"`
	}
	if json.Unmarshal(body, &req) != nil || req.Phone == "" {
		fakeProblem(w, 400, "invalid_request", 0)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	f.sends++
	v := &fakeVerification{ID: fmt.Sprintf("ver_%d", f.seq), To: req.Phone, Status: "pending",
		CreatedAt: f.now, UpdatedAt: f.now, ExpiresAt: f.now.Add(5 * time.Minute), MaxAttempts: 5,
		code: fmt.Sprintf("%06d", 100000+f.seq)}
	if old, ok := f.byID[f.byNum[req.Phone]]; ok && old.Status == "pending" {
		old.Status, old.UpdatedAt = "canceled", f.now
	}
	f.byID[v.ID], f.byNum[req.Phone] = v, v.ID
	answer, _ := json.Marshal(map[string]any{"status": "pending", "phone": req.Phone, "expires_in": 300, "verification_id": v.ID})
	if key != "" {
		delete(f.flight, key)
		f.idem[key] = fakeReply{body: string(body), status: 200, answer: answer}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(answer)
}

func (f *contractFake) verify(w http.ResponseWriter, r *http.Request) {
	var req struct{ Phone, Code string }
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.byID[f.byNum[req.Phone]]
	if !ok || v.Status != "pending" {
		fakeProblem(w, 400, "no_active_code", 0)
		return
	}
	v.Attempts++
	v.UpdatedAt = f.now
	if req.Code != v.code {
		if v.Attempts >= v.MaxAttempts {
			v.Status = "max_attempts_reached"
		}
		fakeProblem(w, 400, "wrong_code", 0)
		return
	}
	v.Status = "approved"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"valid": true, "phone": v.To, "verification_id": v.ID, "status": "approved"})
}

func (f *contractFake) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.byID[r.PathValue("id")]
	if !ok {
		fakeProblem(w, 404, "verification_not_found", 0)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *contractFake) cancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.byID[r.PathValue("id")]
	switch {
	case !ok:
		fakeProblem(w, 404, "verification_not_found", 0)
		return
	case v.Status != "pending":
		fakeProblem(w, 409, "verification_not_pending", 0)
		return
	}
	v.Status, v.UpdatedAt = "canceled", f.now
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fakeProblem(w http.ResponseWriter, status int, code string, retry int) {
	w.Header().Set("Content-Type", "application/problem+json")
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
	}
	w.WriteHeader(status)
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(map[string]any{"type": "urn:otpguard:problem:" + code, "title": http.StatusText(status),
		"status": status, "detail": code, "code": code, "request_id": rand.Text()})
	_, _ = w.Write(b.Bytes())
}
