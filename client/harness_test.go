package client_test

import (
	"testing"

	"github.com/otpguard/otpguard/client"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/otpguardtest"
)

// The tests run the client against a real otpguard (otpguardtest: built
// by app.New, on a real Redis), except the verification contract, which
// also runs on a named fake of the contract for what a real server cannot
// be held in (verification_test.go).

const (
	apiKey = otpguardtest.APIKey
	opsKey = otpguardtest.OpsKey
)

// otpguard is one real instance, with helpers named for these tests.
type otpguard struct {
	*otpguardtest.Server
	out outbox
}

type outbox struct{ *otpguardtest.Outbox }

func (o outbox) count() int                                 { return o.Count() }
func (o outbox) lastCode(t *testing.T, phone string) string { return o.LastCode(t, phone) }

func (g *otpguard) hitsOn(path string) int { return g.Hits(path) }

func startOTPGuard(t *testing.T, limits map[string]limit.Policy) *otpguard {
	t.Helper()
	s := otpguardtest.Start(t, limits)
	return &otpguard{Server: s, out: outbox{s.Outbox}}
}

// newClient returns a client of the otpguard at url with both keys.
func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithAPIKey(apiKey), client.WithOpsKey(opsKey)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
