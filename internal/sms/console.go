// Package sms delivers one-time codes by SMS. Each sender implements
// guard.Sender and reports failures as *problem.Error, so the domain and the
// HTTP layer never see a provider's types.
package sms

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/problem"
)

// Console is the development sender: it writes each message, code included,
// as one JSON line {"to":"+E164","body":"..."} so a developer (or a test
// driving the real binary) can read the code without a provider account.
// It is safe for concurrent use. Never use it in production: printing the
// body is its whole purpose.
type Console struct {
	mu sync.Mutex // one Write per line, so concurrent lines never interleave
	w  io.Writer
}

// NewConsole returns a Console writing to w.
func NewConsole(w io.Writer) *Console {
	return &Console{w: w}
}

// consoleLine is the wire shape of one line; the field order is the output order.
type consoleLine struct {
	To      string `json:"to"`
	Body    string `json:"body"`
	Channel string `json:"channel,omitempty"` // whatsapp, call; SMS says none
}

// Send writes m as one JSON line. It refuses a done ctx like a real provider
// call would, so code developed against Console behaves the same in production.
func (c *Console) Send(ctx context.Context, m guard.Message) error {
	if err := ctx.Err(); err != nil {
		return unavailable(fmt.Errorf("sms: console: %w", err))
	}
	// Encode outside the lock and write the whole line at once: a writer
	// may split or interleave separate Write calls.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep "<", ">" and "&" readable in a terminal
	if err := enc.Encode(consoleLine{To: m.To, Body: m.Body, Channel: consoleChannel(m.Channel)}); err != nil {
		return unavailable(fmt.Errorf("sms: console: encode: %w", err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.w.Write(buf.Bytes()); err != nil {
		return unavailable(fmt.Errorf("sms: console: write: %w", err))
	}
	return nil
}

// unavailable wraps a failure that is not the destination's fault. Its
// Message is fixed text: the cause stays in Err, for logs.
func unavailable(err error) *problem.Error {
	return &problem.Error{
		Code:    problem.CodeProviderUnavailable,
		Message: "the SMS provider is unavailable; try again shortly",
		Err:     err,
	}
}

// consoleChannel is the channel a console line names: none for SMS, so
// that an SMS's line is as it always was.
func consoleChannel(channel string) string {
	if channel == guard.ChannelSMS {
		return ""
	}
	return channel
}
