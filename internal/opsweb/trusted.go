package opsweb

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// TrustImporter marks numbers trusted (guard.OTP.ImportTrusted).
type TrustImporter interface {
	ImportTrusted(ctx context.Context, numbers []string, actor string) (guard.ImportResult, error)
}

type importTrustedRequest struct {
	Numbers []string `json:"numbers"`
}

type importTrustedResponse struct {
	Imported int `json:"imported"`
	Invalid  int `json:"invalid"`
	// InvalidIndexes are the positions in numbers of the invalid ones: the
	// answer repeats no number.
	InvalidIndexes []int `json:"invalid_indexes"`
}

// ImportTrusted: POST /ops/trusted-numbers. Marks the E.164 numbers of
// the body trusted, as if each had just verified a code (docs/abuse.md,
// "Trusted numbers"): the numbers an app verified before it used otpguard.
// At most guard.MaxTrustImport per call; idempotent; the invalid ones are
// answered by index, never logged.
func (s *API) ImportTrusted(c echo.Context) error {
	if s.trust == nil {
		return problem.Errorf(problem.CodeNotFound, "trusted numbers are not served here")
	}
	var req importTrustedRequest
	if err := httpx.DecodeJSON(c, &req); err != nil {
		return err
	}
	if req.Numbers == nil {
		return problem.Errorf(problem.CodeInvalidRequest, "numbers is required: a list of E.164 numbers")
	}
	res, err := s.trust().ImportTrusted(c.Request().Context(), req.Numbers, actorFrom(c))
	if err != nil {
		return err
	}
	out := importTrustedResponse{Imported: res.Imported, Invalid: len(res.Invalid), InvalidIndexes: res.Invalid}
	if out.InvalidIndexes == nil {
		out.InvalidIndexes = []int{}
	}
	return c.JSON(http.StatusOK, out)
}
