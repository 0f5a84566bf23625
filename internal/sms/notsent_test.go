package sms

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// resetConn answers nothing: it resets the connection (RST, SO_LINGER 0)
// once the request has been read in full.
func resetConn(t testing.TB) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("fake twilio: hijack: %v", err)
			return
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			_ = tcp.SetLinger(0)
		}
		_ = conn.Close()
	}
}

func TestTwilioSendUnavailable(t *testing.T) {
	// slow never answers in time; it returns when the client gives up or
	// the test ends, so neither the test nor the server's Close hangs. A
	// Send that waited for it would get its 201 a minute later and fail the
	// test (no error), however busy the machine: no need to time it.
	slow := func(t *testing.T) *fakeTwilio {
		done := make(chan struct{})
		fake := newFakeTwilio(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(time.Minute):
			case <-r.Context().Done():
			case <-done:
			}
			created(w, r)
		})
		t.Cleanup(func() { close(done) }) // runs before fake.Close
		return fake
	}
	tests := []struct {
		name         string
		fake         func(t *testing.T) *fakeTwilio
		ctx          func(t *testing.T) context.Context // nil: Background
		timeout      time.Duration
		wantCause    error // in the chain when the cause is known
		wantRequests int
		wantNotSent  bool // surely not sent: nothing written, or reset before an answer
	}{
		{
			name:         "server slower than Timeout: a timeout after the write may have sent",
			fake:         slow,
			timeout:      200 * time.Millisecond,
			wantCause:    context.DeadlineExceeded,
			wantRequests: 1,
		},
		{
			name: "connection reset after the request, before an answer",
			fake: func(t *testing.T) *fakeTwilio {
				return newFakeTwilio(t, resetConn(t))
			},
			timeout:      10 * time.Second,
			wantCause:    syscall.ECONNRESET,
			wantRequests: 1,
			wantNotSent:  true,
		},
		{
			name: "context cancelled during the call",
			fake: slow,
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(200*time.Millisecond, cancel)
				t.Cleanup(cancel)
				return ctx
			},
			timeout:      10 * time.Second,
			wantCause:    context.Canceled,
			wantRequests: 1,
		},
		{
			name: "context already done: no call",
			fake: func(t *testing.T) *fakeTwilio { return newFakeTwilio(t, created) },
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			timeout:      10 * time.Second,
			wantCause:    context.Canceled,
			wantRequests: 0,
			wantNotSent:  true,
		},
		{
			name: "connection refused",
			fake: func(t *testing.T) *fakeTwilio {
				fake := newFakeTwilio(t, created)
				fake.Close() // its port now refuses connections
				return fake
			},
			timeout:      10 * time.Second,
			wantCause:    syscall.ECONNREFUSED,
			wantRequests: 0,
			wantNotSent:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := tt.fake(t)
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx(t)
			}
			tw := newTestTwilio(t, TwilioOptions{
				AccountSID: testSID, AuthToken: testToken, From: testFrom,
				BaseURL: fake.URL, Timeout: tt.timeout,
			})

			err := tw.Send(ctx, guard.Message{To: testTo, Body: testBody})

			_ = checkSafeError(t, err, problem.CodeProviderUnavailable) // its checks are the test
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Errorf("Send() error = %v, want %v in the chain", err, tt.wantCause)
			}
			if got := len(fake.seen()); got != tt.wantRequests {
				t.Errorf("requests to fake Twilio = %d, want %d", got, tt.wantRequests)
			}
			if got := errors.Is(err, guard.ErrNotSent); got != tt.wantNotSent {
				t.Errorf("errors.Is(err, ErrNotSent) = %v, want %v (%v)", got, tt.wantNotSent, err)
			}
		})
	}
}

func TestProviderWait(t *testing.T) {
	now := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{"99999999999999999999", 0},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := providerWait(tt.in, now); got != tt.want {
			t.Errorf("providerWait(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
