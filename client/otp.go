package client

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/url"
	"time"
)

// SendRequest asks for a code to be sent to Phone.
type SendRequest struct {
	// Phone in any format otpguard parses; it answers with E.164.
	Phone string `json:"phone"`
	// ClientIP is the end user's address (not the app server's), for the
	// per-IP limit. Optional.
	ClientIP string `json:"client_ip,omitempty"`
	// Challenge is the solution of the challenge a 428 challenge_required
	// answered (ChallengeOf), solved in the user's browser: the payload of
	// ALTCHA's widget for "pow", CaptchaSolution for "captcha". The resend
	// is another body: give it another IdempotencyKey.
	Challenge string `json:"challenge,omitempty"`
	// Account says the number belongs to an existing account of the app:
	// the send is to a trusted number, which the automatic abuse rules do
	// not refuse (it meets the trusted tier's own cap instead). Set it only
	// for numbers the app already knows (a sign-in, a saved number), never
	// for a number typed into a sign-up form.
	Account bool `json:"account,omitempty"`
	// Locale is the language of the SMS: one of the locales Twilio Verify
	// lists ("es", "pt-BR", ...), whose text the policy's otp.messages
	// gives (else its base language's, else otp.message). Optional:
	// without it, the language of the number's country.
	Locale string `json:"locale,omitempty"`
	// Channel is how the code goes: "sms" (also ""), "whatsapp" or
	// "call", if the server offers it (else an *Error invalid_request).
	Channel string `json:"channel,omitempty"`
	// IdempotencyKey, when set, is sent as the Idempotency-Key header:
	// the same key with the same body answers the first answer and sends
	// nothing more, so Send is retried on network errors. Use one key per
	// user action (a UUID), at most 255 characters.
	IdempotencyKey string `json:"-"`
}

// SendResponse is the answer to a send that went out.
type SendResponse struct {
	Status         string `json:"status"` // "sent" (older servers) or "pending"
	Phone          string `json:"phone"`  // E.164
	ExpiresIn      int    `json:"expires_in"`
	VerificationID string `json:"verification_id,omitempty"`
	// Channel is the channel the code went by ("" from older servers).
	Channel string `json:"channel,omitempty"`
	// Replayed is true when otpguard answered with the first answer of an
	// earlier send with the same idempotency key (header
	// Idempotent-Replayed): no second SMS went out.
	Replayed bool `json:"-"`
}

// Send asks otpguard to send a new code: POST /otp/send. A refusal
// (cooldown, a limit, the deny-list) is an *Error with its code and
// RetryAfter.
func (c *Client) Send(ctx context.Context, req SendRequest) (*SendResponse, error) {
	cl := call{method: http.MethodPost, path: "/otp/send", body: req}
	if req.IdempotencyKey != "" || c.autoKeys {
		cl = withIdempotencyKey(cl, req.IdempotencyKey)
	}
	r, err := c.do(ctx, cl, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var out SendResponse
	if err := r.decode(&out); err != nil {
		return nil, err
	}
	out.Replayed = r.header.Get("Idempotent-Replayed") == "true"
	return &out, nil
}

// withIdempotencyKey makes cl carry an Idempotency-Key, key or else a
// fresh random one (made once per call, so every attempt of it carries
// the same), and so makes it safe to retry: otpguard answers a repeat
// with the first answer and runs nothing.
func withIdempotencyKey(cl call, key string) call {
	if key == "" {
		key = rand.Text()
	}
	cl.header = http.Header{"Idempotency-Key": {key}}
	cl.retry = true
	return cl
}

// VerifyRequest is a code to check against the number's live code.
type VerifyRequest struct {
	Phone string `json:"phone"`
	Code  string `json:"code"`
}

// VerifyResponse is the answer to a right code, which is now consumed.
type VerifyResponse struct {
	Valid          bool   `json:"valid"`
	Phone          string `json:"phone"`
	VerificationID string `json:"verification_id,omitempty"`
	Status         string `json:"status,omitempty"` // "approved"
}

// Verify checks a code: POST /otp/verify. A wrong code is an *Error with
// code wrong_code and AttemptsLeft; never retried (each guess counts).
func (c *Client) Verify(ctx context.Context, req VerifyRequest) (*VerifyResponse, error) {
	r, err := c.do(ctx, call{method: http.MethodPost, path: "/otp/verify", body: req}, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var out VerifyResponse
	if err := r.decode(&out); err != nil {
		return nil, err
	}
	return &out, nil
}

// The statuses of a verification.
const (
	StatusPending            = "pending"
	StatusApproved           = "approved"
	StatusCanceled           = "canceled"
	StatusExpired            = "expired"
	StatusMaxAttemptsReached = "max_attempts_reached"
)

// Verification is one sent code's lifecycle, as GET
// /otp/verifications/{id} shows it.
type Verification struct {
	ID          string    `json:"verification_id"`
	To          string    `json:"to"`
	Status      string    `json:"status"`  // one of the Status constants
	Channel     string    `json:"channel"` // how the code went: sms, whatsapp or call
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	Attempts    int       `json:"attempts"`
	MaxAttempts int       `json:"max_attempts"`
}

// Verification reads a verification: GET /otp/verifications/{id}. An
// unknown (or forgotten) id is an *Error with code
// verification_not_found.
func (c *Client) Verification(ctx context.Context, id string) (*Verification, error) {
	r, err := c.do(ctx, call{method: http.MethodGet, path: "/otp/verifications/" + url.PathEscape(id), retry: true}, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var v Verification
	if err := r.decode(&v); err != nil {
		return nil, err
	}
	return &v, nil
}

// CancelVerification kills a pending verification's code: POST
// /otp/verifications/{id}/cancel. One no longer pending is an *Error with
// code verification_not_pending (an approved code stays approved).
func (c *Client) CancelVerification(ctx context.Context, id string) (*Verification, error) {
	r, err := c.do(ctx, call{method: http.MethodPost, path: "/otp/verifications/" + url.PathEscape(id) + "/cancel"}, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var v Verification
	if err := r.decode(&v); err != nil {
		return nil, err
	}
	return &v, nil
}
