package simulate

// Services in a scenario: a population that names a Verify service
// (`service: VA...`) sends and checks its codes through that service's
// Verify routes (/v2/Services/{sid}/...), as an app written against
// Twilio Verify does, so that the service's own rooms (guard's room.go)
// count its tries. The simulator acts for every such service with a
// credential of its own, in place of any the policy file gives it; a
// service the file does not name is added with the deployment's policy.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/otpguard/otpguard/internal/guard"
)

// The credential the simulated apps of every service use: an API key SID
// and its secret (letters and digits, as twilio-go wants them).
const (
	serviceKeySID  = "SK5100000000000000000000000000000a"
	serviceSecret  = "simulateServiceSecret0123456789abcdef"
	serviceAccount = "AC5100000000000000000000000000000a"
)

// verifyChallenge is the Verify routes' parameter for a challenge's
// solution (docs/verify.md, "The challenge").
const verifyChallenge = "OtpguardChallenge"

// defaultServiceRow is the report's row of the default service's tries.
const defaultServiceRow = "default"

// scenarioServices are the services s's populations name, in order.
func scenarioServices(s *Scenario) []string {
	var out []string
	for _, p := range s.Populations {
		if p.Service != "" && !slices.Contains(out, p.Service) {
			out = append(out, p.Service)
		}
	}
	return out
}

// withServices gives each of sids the simulator's credential (its secret
// written in dir), adding the services pol lacks.
func withServices(pol *guard.Policies, sids []string, dir string) error {
	if len(sids) == 0 {
		return nil
	}
	secret := filepath.Join(dir, "service-secret")
	if err := os.WriteFile(secret, []byte(serviceSecret), 0o600); err != nil {
		return fmt.Errorf("simulate: a service's secret: %w", err)
	}
	cred := []guard.ServiceCredential{{SID: serviceKeySID, SecretFile: secret}}
	for _, sid := range sids {
		i := -1
		for j, s := range pol.Services {
			if s.SID == sid {
				i = j
			}
		}
		if i < 0 {
			pol.Services = append(pol.Services, guard.Service{SID: sid, FriendlyName: sid, AccountSID: serviceAccount})
			i = len(pol.Services) - 1
		}
		pol.Services[i].Credentials = cred
	}
	return nil
}

// verifyError is the part of a Verify error body the simulator reads.
type verifyError struct {
	Code    int `json:"code"`
	Details *struct {
		Challenge *challenge `json:"challenge"`
		Fallback  *fallback  `json:"fallback"`
	} `json:"details"`
}

// sendVerify is body's send through its service's Verify route: 201
// pending is answered 200, as /otp/send's; a refusal keeps Verify's code
// ("verify_20429"), except the challenge's, which is /otp/send's.
func (d *deployment) sendVerify(ctx context.Context, body sendBody) answer {
	f := url.Values{"To": {body.Phone}, "Channel": {"sms"}, "DeviceIp": {body.ClientIP}}
	if body.Channel != "" {
		f.Set("Channel", body.Channel)
	}
	if body.Challenge != "" {
		f.Set(verifyChallenge, body.Challenge)
	}
	rec := d.doForm(ctx, "/v2/Services/"+body.Service+"/Verifications", f)
	if rec.Code == http.StatusCreated {
		return answer{status: http.StatusOK}
	}
	return verifyRefusal(rec)
}

// checkVerify is a check of code through service's Verify route: 200
// when it approved the verification, else what it refused.
func (d *deployment) checkVerify(ctx context.Context, service, phone, code string) answer {
	rec := d.doForm(ctx, "/v2/Services/"+service+"/VerificationCheck", url.Values{"To": {phone}, "Code": {code}})
	if rec.Code != http.StatusOK {
		return verifyRefusal(rec)
	}
	var v struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.Status != "approved" {
		return answer{status: http.StatusBadRequest, problem: problem{Code: "verify_" + cmp.Or(v.Status, "unreadable")}}
	}
	return answer{status: http.StatusOK}
}

// verifyRefusal reads a Verify error body as an answer.
func verifyRefusal(rec *httptest.ResponseRecorder) answer {
	ans := answer{status: rec.Code, problem: problem{Code: "http_" + strconv.Itoa(rec.Code)}}
	var e verifyError
	if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code == 0 {
		return ans
	}
	ans.problem.Code = "verify_" + strconv.Itoa(e.Code)
	if e.Details != nil {
		ans.problem.Challenge, ans.problem.Fallback = e.Details.Challenge, e.Details.Fallback
		if e.Details.Challenge != nil {
			ans.problem.Code = codeChallenge
		}
	}
	return ans
}

// doForm posts the form f to path on the next instance with the
// services' credential.
func (d *deployment) doForm(ctx context.Context, path string, f url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, path, strings.NewReader(f.Encode()))
	req.SetBasicAuth(serviceKeySID, serviceSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return d.serve(ctx, req)
}
