package app

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/internal/config"
)

// TestStartUpLogsWarnings: serve logs the configuration's warnings (an
// unknown variable) when it starts.
func TestStartUpLogsWarnings(t *testing.T) {
	cfg, err := config.Load(func(k string) string { return map[string]string{"OTPGUARD_DATA_DIR": t.TempDir()}[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Warnings = config.UnknownSettings([]string{"OTPGUARD_LOG_LEVL=debug"})
	var out syncBuffer
	a, err := New(context.Background(), cfg, WithOutput(&out))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !strings.Contains(out.String(), `"level":"WARN","msg":"OTPGUARD_LOG_LEVL is not an otpguard setting and is ignored (did you mean OTPGUARD_LOG_LEVEL?)"`) {
		t.Errorf("start-up log lacks the warning:\n%s", out.String())
	}
}

// TestSharedRedisNeedsASenderChoice: with a shared Redis, an unset
// OTPGUARD_SMS refuses to start; a sender given by the caller (tests,
// embedding programs) or an explicit choice starts.
func TestSharedRedisNeedsASenderChoice(t *testing.T) {
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"OTPGUARD_REDIS_URL": "redis://127.0.0.1:1/0", "OTPGUARD_API_KEYS": "api-key-0123456789abcdef",
			"OTPGUARD_HMAC_KEY": "0123456789abcdef0123456789abcdef"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), cfg, WithOutput(io.Discard)); err == nil || !strings.Contains(err.Error(), "OTPGUARD_SMS: required with a shared Redis") {
		t.Fatalf("New with a shared Redis and no OTPGUARD_SMS: got %v, want the choice asked for", err)
	}
	if err := cfg.ValidateWithSender(true); err != nil {
		t.Errorf("with a sender given: %v", err)
	}
	cfg.SMS = "console"
	if err := cfg.Validate(); err != nil {
		t.Errorf("OTPGUARD_SMS=console: %v", err)
	}
}

// syncBuffer is a bytes.Buffer the logger's goroutines may write to while
// the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
