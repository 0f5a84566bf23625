package guardtest

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
)

// Sender is a guard.Sender whose Send calls SendFn; nil SendFn sends
// nothing and succeeds.
type Sender struct {
	SendFn func(ctx context.Context, m guard.Message) error
}

// Send calls SendFn.
func (s Sender) Send(ctx context.Context, m guard.Message) error {
	if s.SendFn == nil {
		return nil
	}
	return s.SendFn(ctx, m)
}

// Outbox is a guard.Sender that keeps what it was asked to send.
type Outbox struct {
	// Hold, when set, is received from before each send: a provider that
	// keeps the request in flight until the test lets it go. Each send
	// held says so on Held first.
	Hold, Held chan struct{}

	mu   sync.Mutex
	sent []guard.Message
	fail error
}

// SetFail makes Send answer err instead of sending (nil: send again).
func (o *Outbox) SetFail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fail = err
}

// Send keeps m, or answers the error SetFail set.
func (o *Outbox) Send(_ context.Context, m guard.Message) error {
	if o.Hold != nil {
		o.Held <- struct{}{}
		<-o.Hold
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail != nil {
		return o.fail
	}
	o.sent = append(o.sent, m)
	return nil
}

// Count is how many messages were sent.
func (o *Outbox) Count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.sent)
}

// Sent is a copy of the messages sent, in order.
func (o *Outbox) Sent() []guard.Message {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]guard.Message(nil), o.sent...)
}

// SentTo counts the messages sent to numbers starting with prefix.
func (o *Outbox) SentTo(prefix string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, m := range o.sent {
		if strings.HasPrefix(m.To, prefix) {
			n++
		}
	}
	return n
}

// Last is the code of the last message sent: its body's last word.
func (o *Outbox) Last(t testing.TB) string {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.sent) == 0 {
		t.Fatal("no SMS was sent")
	}
	f := strings.Fields(o.sent[len(o.sent)-1].Body)
	return f[len(f)-1]
}

// LastCode is the code of the last message sent to phone (E.164): its
// body's last word.
func (o *Outbox) LastCode(t testing.TB, phone string) string {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.sent) - 1; i >= 0; i-- {
		if o.sent[i].To == phone {
			f := strings.Fields(o.sent[i].Body)
			return f[len(f)-1]
		}
	}
	t.Fatalf("no message was sent to %s", phone)
	return ""
}

var digits = regexp.MustCompile(`\d{4,10}`)

// Code is the code in the last message sent to phone, wherever the
// message puts it ("" when none was sent).
func (o *Outbox) Code(phone string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.sent) - 1; i >= 0; i-- {
		if o.sent[i].To == phone {
			return digits.FindString(o.sent[i].Body)
		}
	}
	return ""
}
