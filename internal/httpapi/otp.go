package httpapi

import (
	"net/http"
	"sync/atomic"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/metrics"
)

type sendRequest struct {
	Phone    string `json:"phone"`
	ClientIP string `json:"client_ip"`
	// Challenge is the solution of a 428 challenge_required's challenge.
	Challenge string `json:"challenge"`
	// Account: the number belongs to an existing account of the app
	// (guard.SendRequest.Account).
	Account bool `json:"account"`
	// Locale is the language of the SMS, one of Verify's locales
	// (guard.SendRequest.Locale); "" the number's country's language.
	Locale string `json:"locale"`
	// Channel is how the code goes: sms ("" too), whatsapp or call, if
	// this deployment offers it (guard.SendRequest.Channel).
	Channel string `json:"channel"`
}

type sendResponse struct {
	// Status is the verification's: pending (verification.go).
	Status    string `json:"status"`
	Phone     string `json:"phone"`
	ExpiresIn int    `json:"expires_in"`
	// VerificationID is absent for a stateless code (sent while Redis
	// was away), which has no verification record.
	VerificationID string `json:"verification_id,omitempty"`
	// Channel is the channel the code went by.
	Channel string `json:"channel"`
}

// otpHandlers are the handlers of /otp/... (otp.go, verifications.go):
// the OTP service in force, and the decisions' metrics.
type otpHandlers struct {
	live    *atomic.Pointer[Services]
	metrics *metrics.Set
}

// sendOTP: POST /otp/send. Sends a new code to a number within its limits.
func (h *otpHandlers) sendOTP(c echo.Context) error {
	var req sendRequest
	if err := httpx.DecodeJSON(c, &req); err != nil {
		return err
	}
	res, err := h.live.Load().OTP.Send(c.Request().Context(), guard.SendRequest{Phone: req.Phone, ClientIP: req.ClientIP,
		Challenge: req.Challenge, Account: req.Account, Locale: req.Locale, Channel: req.Channel})
	if _, lost := err.(*guard.ClaimLost); lost {
		return err // a duplicate: its Idempotency-Key's holder answers it (idempotency.go)
	}
	logPhone(c, res.Phone.E164)
	h.metrics.Send(guard.DefaultService, res.Phone.Region, err)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, sendResponse{Status: string(guard.StatusPending), Phone: res.Phone.E164,
		ExpiresIn: int(res.ExpiresIn.Seconds()), VerificationID: res.VerificationID, Channel: res.Channel})
}

type verifyRequest struct {
	Phone string `json:"phone"`
	Code  string `json:"code"`
}

type verifyResponse struct {
	Valid bool   `json:"valid"`
	Phone string `json:"phone"`
	// Status is the verification's: approved.
	Status         string `json:"status"`
	VerificationID string `json:"verification_id,omitempty"`
}

// verifyOTP: POST /otp/verify. Checks a code and consumes it on a match.
func (h *otpHandlers) verifyOTP(c echo.Context) error {
	var req verifyRequest
	if err := httpx.DecodeJSON(c, &req); err != nil {
		return err
	}
	res, err := h.live.Load().OTP.VerifyCode(c.Request().Context(), guard.VerifyRequest{Phone: req.Phone, Code: req.Code})
	logPhone(c, res.Phone.E164)
	h.metrics.Verify(guard.DefaultService, err)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, verifyResponse{Valid: true, Phone: res.Phone.E164,
		Status: string(guard.StatusApproved), VerificationID: res.VerificationID})
}
