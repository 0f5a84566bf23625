package verifyapi

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// CheckVerification: POST /v2/Services/{ServiceSid}/VerificationCheck.
// Checks Code against the pending code of To, or of the verification
// VerificationSid, of this service (guard.OTP.VerifyCode, as POST
// /otp/verify: the guess is counted first, compared in constant time,
// the code consumed once). A right code answers approved; a wrong one
// 200 pending with valid false, as Verify does; spent guesses 429 60202;
// no pending code 404 20404.
func (h *Handlers) CheckVerification(c echo.Context) error {
	f, err := readForm(c, "Code", "To", "VerificationSid")
	if err != nil {
		return err
	}
	switch {
	case f["Code"] == "":
		return invalidParameter("missing required parameter Code")
	case f["To"] == "" && f["VerificationSid"] == "":
		return invalidParameter("either To or VerificationSid is required")
	case f["To"] != "" && f["VerificationSid"] != "":
		return invalidParameter("give To or VerificationSid, not both")
	}
	st, t := requestOf(c)
	ctx := c.Request().Context()
	req := guard.VerifyRequest{Phone: f["To"], Code: f["Code"], Service: t.Owner, VerificationID: f["VerificationSid"]}
	if req.VerificationID != "" {
		v, err := st.OTP.Verification(ctx, t.Owner, req.VerificationID)
		if err != nil {
			return err
		}
		if v.Status != guard.StatusPending {
			return problem.Errorf(problem.CodeVerificationNotPending, "the verification is %s, not pending", v.Status)
		}
		req.Phone = v.Phone
	}
	res, err := st.OTP.VerifyCode(ctx, req)
	httpx.LogPhone(c, res.Phone.E164)
	h.metrics.Verify(t.Owner, err)
	id := res.VerificationID
	var pe *problem.Error
	if err != nil {
		if !errors.As(err, &pe) || pe.Code != problem.CodeWrongCode {
			return err
		}
		id = pe.VerificationID
	}
	// The record as it is now: approved, or still pending (or locked by
	// this wrong guess). A code without a record (stateless, sent while
	// the store was away) answers from what the check knows.
	v := guard.Verification{Phone: res.Phone.E164, Status: guard.StatusApproved}
	if err != nil {
		v.Status = guard.StatusPending
	}
	if id != "" {
		if rec, rerr := st.OTP.Verification(ctx, t.Owner, id); rerr == nil {
			v = rec
		}
	}
	return c.JSON(http.StatusOK, newCheck(t, v))
}
