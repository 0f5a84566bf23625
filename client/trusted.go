package client

import (
	"context"
	"net/http"
)

// MaxTrustedImport is the most numbers one ImportTrusted call may carry.
const MaxTrustedImport = 10000

// TrustedImport is the answer to ImportTrusted.
type TrustedImport struct {
	Imported int `json:"imported"`
	Invalid  int `json:"invalid"`
	// InvalidIndexes are the positions in the numbers sent of the invalid
	// ones: the answer repeats no number.
	InvalidIndexes []int `json:"invalid_indexes"`
}

// ImportTrusted marks E.164 numbers trusted, as if each had just verified
// a code: POST /ops/trusted-numbers. For the numbers an app verified before
// it used otpguard, so that a launch with existing users starts trusted.
// At most MaxTrustedImport per call (send more in several calls). It is
// idempotent (an import again only renews the marks) and carries an
// Idempotency-Key, so it is retried.
func (c *Client) ImportTrusted(ctx context.Context, numbers []string) (*TrustedImport, error) {
	body := struct {
		Numbers []string `json:"numbers"`
	}{Numbers: numbers}
	if body.Numbers == nil {
		body.Numbers = []string{}
	}
	cl := withIdempotencyKey(call{method: http.MethodPost, path: "/ops/trusted-numbers", body: body, ops: true}, "")
	r, err := c.do(ctx, cl, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return decodeAs[TrustedImport](r)
}
