package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/otpguard/otpguard/internal/store"
)

func TestRedisLogLevels(t *testing.T) {
	for _, tc := range []struct {
		format string
		args   []any
		level  string
		msg    string
	}{
		{"redis: connection pool: failed to dial after %d attempts: %v", []any{1, "refused"}, "DEBUG",
			"go-redis: connection pool: failed to dial after 1 attempts: refused"},
		{"sentinel: new master=%q addr=%q", []any{"m", "127.0.0.1:1"}, "DEBUG", `go-redis: sentinel: new master="m" addr="127.0.0.1:1"`},
		{"redis: failed to close connection: %v", []any{"boom"}, "WARN", "go-redis: failed to close connection: boom"},
	} {
		var out bytes.Buffer
		store.ClientLog{slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}.Printf(context.Background(), tc.format, tc.args...)
		var line map[string]any
		if err := json.Unmarshal(out.Bytes(), &line); err != nil {
			t.Fatalf("%s: not one JSON line: %q", tc.format, out.String())
		}
		if line["level"] != tc.level || line["msg"] != tc.msg {
			t.Errorf("%s: got %v %q, want %s %q", tc.format, line["level"], line["msg"], tc.level, tc.msg)
		}
	}
}
