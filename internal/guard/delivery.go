package guard

import (
	"context"
	"fmt"
)

// Delivery is the provider's report on one message (Twilio's status
// callback): its id, the number, its status and the provider's error code.
type Delivery struct {
	MessageID string
	To        string
	Status    string // queued, sent, delivered, undelivered, failed, ...
	ErrorCode string
}

// RecordDelivery puts a delivery report in the audit trail. The number is
// normalised as /otp/send does; one that does not parse is recorded
// without it (the report is still worth keeping).
func (s *OTP) RecordDelivery(ctx context.Context, d Delivery) {
	e := Event{At: s.now(), Action: ActionSMSStatus, Outcome: d.Status,
		Detail: fmt.Sprintf("sid=%s", d.MessageID)}
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
}
