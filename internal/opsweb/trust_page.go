package opsweb

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/httpx"
	"github.com/otpguard/otpguard/internal/problem"
)

// The page's trusted-number import: the numbers of a pasted list or an
// uploaded CSV file, handed to the same import as POST
// /ops/trusted-numbers (guard.OTP.ImportTrusted), which checks each
// number and the size of the import; the body limit is that route's
// (httpapi.ImportBodyLimit).

// importFile is the form's file field; importText its text area.
const (
	importFile = "file"
	importText = "numbers"
)

// FormImportTrusted: POST /ops/actions/trust-import. The page's import
// form: the numbers pasted (one a line, or separated by commas) and those
// of an uploaded CSV file, every non-empty field of every line. Answers
// 303 to the page, which says how many were imported and how many were
// not valid numbers.
func (s *Pages) FormImportTrusted(c echo.Context) error {
	if s.trust == nil {
		return s.trustRefused(c, problem.Errorf(problem.CodeNotFound, "trusted numbers are not served here"))
	}
	numbers, err := csvFields(strings.NewReader(c.Request().PostFormValue(importText)))
	if err != nil {
		return s.trustRefused(c, err)
	}
	if fh, ferr := c.FormFile(importFile); ferr == nil {
		f, err := fh.Open()
		if err != nil {
			return s.trustRefused(c, problem.Errorf(problem.CodeInvalidRequest, "the uploaded file cannot be read"))
		}
		more, err := csvFields(f)
		_ = f.Close()
		if err != nil {
			return s.trustRefused(c, err)
		}
		numbers = append(numbers, more...)
	} else if !errors.Is(ferr, http.ErrMissingFile) && !errors.Is(ferr, http.ErrNotMultipart) {
		return s.trustRefused(c, problem.Errorf(problem.CodeInvalidRequest, "the uploaded file cannot be read"))
	}
	if len(numbers) == 0 {
		return s.trustRefused(c, problem.Errorf(problem.CodeInvalidRequest, "no number to import"))
	}
	res, err := s.trust().ImportTrusted(c.Request().Context(), numbers, actorFrom(c))
	if err != nil {
		return s.trustRefused(c, err)
	}
	v := url.Values{"done": {"trusted"}, "imported": {strconv.Itoa(res.Imported)}, "invalid": {strconv.Itoa(len(res.Invalid))}}
	return c.Redirect(http.StatusSeeOther, "/ops?"+v.Encode()+"#trust-import")
}

// csvFields reads every non-empty field of a CSV text, in order. How many
// it may hold is the import's to say (guard.MaxTrustImport).
func csvFields(r io.Reader) ([]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	var out []string
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, problem.Errorf(problem.CodeInvalidRequest, "not a CSV file: %v", err)
		}
		for _, f := range rec {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
	}
}

// trustRefused answers a refused import with 303 to the page's import
// form, which says why (trustProblem).
func (s *Pages) trustRefused(c echo.Context, err error) error {
	code := problem.CodeOf(err)
	if status := httpx.Status(code); status >= 500 || status == 0 {
		s.log.ErrorContext(c.Request().Context(), "ops action failed", "path", c.Path(), "request_id", httpx.RequestID(c), "err", err)
	}
	return c.Redirect(http.StatusSeeOther, "/ops?"+url.Values{qTrustErr: {string(code)}}.Encode()+"#trust-import")
}

// qTrustErr carries a refused import's code back to the page.
const qTrustErr = "trust_err"

// trustProblem is what the import form says of a refusal: fixed text per
// code.
func trustProblem(code problem.Code) string {
	switch code {
	case "":
		return ""
	case problem.CodeInvalidRequest:
		return fmt.Sprintf("Nothing imported: give 1 to %d numbers, pasted one a line (or separated by commas), or a CSV file of them.", guard.MaxTrustImport)
	}
	return "Nothing imported: " + problemMessage(code)
}

// trustedFlash is the page's word after an import: the two counts, read
// as numbers, so that no query parameter puts words on the page.
func trustedFlash(q url.Values) string {
	imported, err1 := strconv.Atoi(q.Get("imported"))
	invalid, err2 := strconv.Atoi(q.Get("invalid"))
	if err1 != nil || err2 != nil || imported < 0 || invalid < 0 {
		return ""
	}
	msg := "Imported " + strconv.Itoa(imported) + " trusted number"
	if imported != 1 {
		msg += "s"
	}
	if invalid > 0 {
		msg += "; " + strconv.Itoa(invalid) + " not valid numbers were left out"
	}
	return msg + "."
}
