package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/otpguard/otpguard/internal/problem"
)

// Delivery is the provider's report on one message (Twilio's status
// callback): its id, the number, its status and the provider's error code.
type Delivery struct {
	MessageID string
	To        string
	Status    string // queued, sent, delivered, undelivered, failed, ...
	ErrorCode string
	Channel   string // the channel of the message or call reported on (channel.go)
}

// Deliveries remembers which delivery reports were recorded, across
// instances, so that a replayed report is recorded once.
type Deliveries interface {
	// ClaimDelivery reports whether this caller is the first, on any
	// instance, to record status for messageID within ttl.
	ClaimDelivery(ctx context.Context, messageID, status string, ttl time.Duration) (bool, error)
}

// DeliveryReplayWindow is how long a delivery report (message id and
// status) is remembered: a signed callback replayed within it is not
// recorded again. A provider reports on a message within hours (Twilio
// gives up on a queued message after at most 10 hours).
const DeliveryReplayWindow = 24 * time.Hour

// maxMessageID bounds the message id a report may name (a Twilio SID is
// 34 characters).
const maxMessageID = 64

// deliveryTimeout bounds the replay check: it must never hold a callback up.
const deliveryTimeout = time.Second

// courier hands codes to the SMS provider and records its reports on them.
type courier struct {
	sender     Sender
	codes      Codes // an undelivered code is deleted
	deliveries Deliveries
	events     EventSink
	spend      *spender // what a send the provider surely did not take gives back
	log        *slog.Logger
	now        func() time.Time
}

// messages are a policy's SMS texts by locale: otp.messages over the
// built-in translations (while otp.message is the built-in one), and
// otp.message for every other locale and for none.
type messages struct {
	fallback string            // otp.message
	byLocale map[string]string // canonical locale -> template
}

func newMessages(p OTPPolicy) messages {
	m := messages{fallback: p.Message, byLocale: map[string]string{}}
	if p.Message == DefaultMessage {
		for l, t := range builtinMessages {
			m.byLocale[l] = t
		}
	}
	for l, t := range p.Messages {
		m.byLocale[l] = t
	}
	return m
}

// template is the text for locale (canonical, "" none).
func (m messages) template(locale string) string { return m.text(locale).template }

// recordDelivery puts a delivery report in the audit trail and reports
// whether it did: a report already recorded (the same message id and
// status, on any instance, within DeliveryReplayWindow) is a replay and is
// not recorded again. When the replay check cannot reach its store the
// report is recorded: a report counted twice beats one lost.
//
// The number is normalised as /otp/send does; one that does not parse is
// recorded without it (the report is still worth keeping).
func (s *courier) recordDelivery(ctx context.Context, d Delivery) bool {
	if len(d.MessageID) > maxMessageID {
		d.MessageID = d.MessageID[:maxMessageID]
	}
	if s.deliveries != nil && d.MessageID != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deliveryTimeout)
		first, err := s.deliveries.ClaimDelivery(cctx, d.MessageID, d.Status, DeliveryReplayWindow)
		cancel()
		switch {
		case err != nil:
			s.log.DebugContext(ctx, "delivery report: replay check failed; recording it", "err", err)
		case !first:
			s.log.DebugContext(ctx, "delivery report already recorded: a replay", "status", d.Status)
			return false
		}
	}
	e := Event{At: s.now(), Action: ActionSMSStatus, Outcome: d.Status,
		Detail: fmt.Sprintf("sid=%s", d.MessageID), TraceID: TraceID(ctx), RequestID: RequestID(ctx)}
	if d.Channel != "" && d.Channel != ChannelSMS {
		e.Detail += " channel=" + d.Channel
	}
	if d.ErrorCode != "" {
		e.Detail += " error_code=" + d.ErrorCode
	}
	if p, err := ParsePhone(d.To, ""); err == nil {
		e.Phone, e.Country = p.E164, p.Region
	}
	s.events.Record(e)
	if d.Status == "failed" || d.Status == "undelivered" {
		s.log.InfoContext(ctx, "sms not delivered", "phone", MaskPhone(e.Phone), "status", d.Status, "error_code", d.ErrorCode)
	}
	return true
}

// providerTimeout bounds one provider call. The call runs on its own
// deadline, not the caller's: once the provider may have the message, a
// caller that goes away must not cancel the send (the code would be
// deleted while the SMS is on its way).
const providerTimeout = 10 * time.Second

// ProviderRetryAfter is the Retry-After of a send the provider refused
// (ErrNotSent) without saying how long to wait: the number's try was given
// back, so the user may try again as soon as the provider may take it.
const ProviderRetryAfter = 5 * time.Second

// maxProviderRetryAfter bounds the wait a provider's Retry-After passes on
// to the user: a minute, as a Redis outage's refusal; a longer one is the
// provider's own trouble, not the user's to wait out.
const maxProviderRetryAfter = time.Minute

// deliver hands code to the provider of channel, in text t (its locale
// the voice's language). When that fails, the code is
// deleted: never delivered, as far as we know, so not left guessable (a
// stateless code cannot be taken back; it dies with its step). What the
// send spent stays spent, since the provider may have delivered it, unless
// the provider surely did not take it (ErrNotSent):
//   - it refused the number (invalid_destination): the budget and the
//     country's hour are given back (giveBack); the number's own limits
//     stay spent, since retrying that number cannot help, and keep
//     bounding the provider calls one refused number costs;
//   - it refused the message or could not be reached before any answer
//     (provider_unavailable): the number's cooldown and per-number count
//     are given back too (giveBack with try), and the answer says when to try
//     again (the provider's Retry-After, else ProviderRetryAfter).
func (s *courier) deliver(ctx context.Context, phone Phone, code issued, sp spent, t text, channel string) error {
	body := strings.ReplaceAll(t.template, "{code}", code.text)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), providerTimeout)
	err := s.sender.Send(pctx, Message{To: phone.E164, Body: body, Code: code.text, Locale: t.locale, Channel: channel})
	cancel()
	if err == nil {
		return nil
	}
	if code.id != "" {
		if derr := s.codes.DeleteCode(context.WithoutCancel(ctx), phone.E164, code.service); derr != nil {
			s.log.WarnContext(ctx, "deleting undelivered code failed", "phone", MaskPhone(phone.E164), "err", derr)
		}
	}
	s.log.WarnContext(ctx, "sms not sent", "phone", MaskPhone(phone.E164), "err", err)
	var e *problem.Error
	if !errors.As(err, &e) {
		e = &problem.Error{Code: problem.CodeProviderUnavailable, Message: "the SMS provider failed", Err: err}
	}
	notSent := errors.Is(err, ErrNotSent)
	switch {
	case e.Code == problem.CodeInvalidDestination:
		s.spend.giveBack(ctx, phone, sp, false)
	case notSent && e.Code == problem.CodeProviderUnavailable:
		s.spend.giveBack(ctx, phone, sp, true)
		refused := *e
		refused.RetryAfter = providerRetryAfter(err)
		return &refused
	case notSent:
		s.spend.giveBack(ctx, phone, sp, false)
	}
	return e
}

// providerRetryAfter is the wait a refused send's answer tells: the
// provider's own (ProviderWait), at most maxProviderRetryAfter, else
// ProviderRetryAfter.
func providerRetryAfter(err error) time.Duration {
	var w ProviderWait
	if errors.As(err, &w) && w.ProviderWait() > 0 {
		return min(w.ProviderWait(), maxProviderRetryAfter)
	}
	return ProviderRetryAfter
}
