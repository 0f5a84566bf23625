package opsweb

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/problem"
)

// RiskClearer deletes a number's cached risk score (guard.OTP.ClearRisk).
type RiskClearer interface {
	ClearRisk(ctx context.Context, phone, actor string) (bool, error)
}

type clearRiskResponse struct {
	// Status is "cleared", or "none" when no score was cached.
	Status string `json:"status"`
}

// ClearRisk: DELETE /ops/risk/{phone}. Deletes the number's cached risk
// score (otp.risk), so that its next refused send asks the network again:
// a number refused as high_risk_number that an operator vouches for.
// Audited with the actor and the number masked.
func (s *API) ClearRisk(c echo.Context) error {
	if s.risk == nil {
		return problem.Errorf(problem.CodeNotFound, "risk scores are not served here")
	}
	raw, err := url.PathUnescape(c.Param("phone"))
	if err != nil {
		return problem.Errorf(problem.CodeInvalidPhone, "phone is not a valid path segment")
	}
	ok, err := s.risk().ClearRisk(c.Request().Context(), raw, actorFrom(c))
	if err != nil {
		return err
	}
	out := clearRiskResponse{Status: "cleared"}
	if !ok {
		out.Status = "none"
	}
	return c.JSON(http.StatusOK, out)
}

// FormClearRisk: POST /ops/actions/clear-risk. The page's form beside the
// blocked numbers: the number's cached risk score goes.
func (s *Pages) FormClearRisk(c echo.Context) error {
	if s.risk == nil {
		return s.backToPage(c, "", problem.Errorf(problem.CodeNotFound, "risk scores are not served here"))
	}
	phone := strings.TrimSpace(c.Request().PostFormValue("phone"))
	_, err := s.risk().ClearRisk(c.Request().Context(), phone, actorFrom(c))
	return s.backToPage(c, "risk_cleared", err)
}
