package verifyapi

import (
	"fmt"
	"io"
	"mime"
	"net/url"

	"github.com/labstack/echo/v4"
)

// form is a request's parameters, read strictly: the body of a POST as
// application/x-www-form-urlencoded (bounded by the server's body limit),
// each parameter at most once, none the route does not take; and no
// query string. A gateway and otpguard then never read two different
// values from one request.
type form map[string]string

// readForm reads the request's form; allowed lists the parameters the
// route takes. A refusal is Verify's 60200 invalid parameter.
func readForm(c echo.Context, allowed ...string) (form, error) {
	req := c.Request()
	if req.URL.RawQuery != "" {
		return nil, invalidParameter("the query string is not read: send the parameters in the form body")
	}
	f := form{}
	if req.Method != echo.GET {
		if ct := req.Header.Get(echo.HeaderContentType); ct != "" {
			mt, _, err := mime.ParseMediaType(ct)
			if err != nil || mt != echo.MIMEApplicationForm {
				return nil, invalidParameter("the body must be application/x-www-form-urlencoded")
			}
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err // the body limit's 413, or the caller gone
		}
		values, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, invalidParameter("the form body does not parse")
		}
		for name, v := range values {
			if !contains(allowed, name) {
				return nil, invalidParameter(fmt.Sprintf("unknown parameter %q", name))
			}
			if len(v) != 1 {
				return nil, invalidParameter(fmt.Sprintf("parameter %q given %d times", name, len(v)))
			}
			f[name] = v[0]
		}
	}
	return f, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
