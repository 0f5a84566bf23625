package main

import (
	"context"
	"net/http"
	"testing"
)

// TestBenchmarkSetups builds the service of each benchmark in this package
// as the benchmark does and sends it one decision. CI runs no benchmarks,
// so without this a config rule their setup misses (OTPGUARD_SMS being
// required with a shared Redis) is found only when someone next runs one.
func TestBenchmarkSetups(t *testing.T) {
	c := &Config{Policy: "api", Keys: 1000, KeyPrefix: "user:", Cost: 1, Batch: 1}
	t.Run("HandlerCheck", func(t *testing.T) {
		h, _ := benchHandler(t)
		if w := postCheck(h, c, 0); w.Code != http.StatusOK {
			t.Fatalf("got %d %s, want 200", w.Code, w.Body)
		}
	})
	for _, mode := range tracingModes {
		t.Run("HandlerCheckTracing/tracing="+mode.name, func(t *testing.T) {
			opts, spans := mode.options(t)
			h, _ := benchHandler(t, opts...)
			if w := postCheck(h, c, 0); w.Code != http.StatusOK {
				t.Fatalf("got %d %s, want 200", w.Code, w.Body)
			}
			if spans == nil {
				return
			}
			if err := spans.flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			// The benchmark measures what it says: sampled, the server span
			// and the Redis call's at least; sampled out, none.
			got := spans.spans.Load()
			if mode.name == "sampled" && got < 2 {
				t.Errorf("got %d spans exported, want at least 2", got)
			}
			if mode.name != "sampled" && got != 0 {
				t.Errorf("got %d spans exported, want none", got)
			}
		})
	}
}
