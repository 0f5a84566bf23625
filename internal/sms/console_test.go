package sms

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// chunkWriter keeps every Write call apart. It has no lock on purpose: if
// Console wrote concurrently, the race detector would say so.
type chunkWriter struct{ chunks []string }

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.chunks = append(w.chunks, string(p))
	return len(p), nil
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestConsoleSendWritesOneJSONLine(t *testing.T) {
	var buf bytes.Buffer
	c := NewConsole(&buf)
	m := guard.Message{To: "+14155550100", Body: `Your code is 493817 <don't share> & "bye"`}
	if err := c.Send(context.Background(), m); err != nil {
		t.Fatalf("Send() error = %v", err)
	}
	want := `{"to":"+14155550100","body":"Your code is 493817 <don't share> & \"bye\""}` + "\n"
	if got := buf.String(); got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestConsoleSendConcurrent(t *testing.T) {
	const n = 64
	w := &chunkWriter{}
	c := NewConsole(w)

	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- c.Send(context.Background(), guard.Message{
				To:   fmt.Sprintf("+1415555%04d", i),
				Body: fmt.Sprintf("code %06d\nline two", i),
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Send() error = %v", err)
		}
	}

	if len(w.chunks) != n {
		t.Fatalf("got %d writes, want %d (one per message)", len(w.chunks), n)
	}
	var got, want []consoleLine
	for i, chunk := range w.chunks {
		if !strings.HasSuffix(chunk, "\n") || strings.Count(chunk, "\n") != 1 {
			t.Fatalf("write %d = %q, want exactly one line ending in a newline", i, chunk)
		}
		dec := json.NewDecoder(strings.NewReader(chunk))
		dec.DisallowUnknownFields()
		var l consoleLine
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("write %d = %q: not the JSON line we expect: %v", i, chunk, err)
		}
		got = append(got, l)
		want = append(want, consoleLine{
			To:   fmt.Sprintf("+1415555%04d", i),
			Body: fmt.Sprintf("code %06d\nline two", i),
		})
	}
	// Goroutines finish in any order: compare as sets.
	slices.SortFunc(got, func(a, b consoleLine) int { return strings.Compare(a.To, b.To) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lines mismatch (-want +got):\n%s", diff)
	}
}

func TestConsoleSendErrors(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name string
		ctx  context.Context
		w    *chunkWriter // nil: use failingWriter
	}{
		{name: "write fails", ctx: context.Background()},
		{name: "context already done", ctx: cancelled, w: &chunkWriter{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewConsole(failingWriter{})
			if tt.w != nil {
				c = NewConsole(tt.w)
			}
			err := c.Send(tt.ctx, guard.Message{To: "+14155550100", Body: "code 493817"})
			if got := problem.CodeOf(err); got != problem.CodeProviderUnavailable {
				t.Errorf("ErrorCode() = %q, want %q (err: %v)", got, problem.CodeProviderUnavailable, err)
			}
			if tt.w != nil && len(tt.w.chunks) != 0 {
				t.Errorf("got writes %q, want none", tt.w.chunks)
			}
		})
	}
}
