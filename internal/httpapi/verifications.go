package httpapi

import (
	"cmp"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
)

// verificationResponse is a verification record (guard/verification.go).
type verificationResponse struct {
	VerificationID string    `json:"verification_id"`
	To             string    `json:"to"`
	Status         string    `json:"status"`
	Channel        string    `json:"channel"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	Attempts       int       `json:"attempts"`
	MaxAttempts    int       `json:"max_attempts"`
}

func newVerificationResponse(v guard.Verification) verificationResponse {
	return verificationResponse{VerificationID: v.ID, To: v.Phone, Status: string(v.Status), Channel: cmp.Or(v.Channel, guard.ChannelSMS),
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, ExpiresAt: v.ExpiresAt,
		Attempts: v.Attempts, MaxAttempts: v.MaxAttempts}
}

// getVerification: GET /otp/verifications/{id}. A verification's status.
func (h *otpHandlers) getVerification(c echo.Context) error {
	v, err := h.live.Load().OTP.Verification(c.Request().Context(), guard.DefaultService, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newVerificationResponse(v))
}

// cancelVerification: POST /otp/verifications/{id}/cancel. Kills a
// pending verification's code.
func (h *otpHandlers) cancelVerification(c echo.Context) error {
	v, err := h.live.Load().OTP.CancelVerification(c.Request().Context(), guard.DefaultService, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, newVerificationResponse(v))
}
