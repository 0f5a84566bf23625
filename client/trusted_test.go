package client_test

import (
	"context"
	"slices"
	"testing"

	"github.com/otpguard/otpguard/client"
)

// TestImportTrustedAgainstOTPGuard: ImportTrusted answers the counts and
// the invalid numbers' indexes, again the same on a repeat (idempotent),
// and a send with Account goes out.
func TestImportTrustedAgainstOTPGuard(t *testing.T) {
	g := startOTPGuard(t, nil)
	c := newClient(t, g.URL)
	ctx := context.Background()
	numbers := []string{"+447911123456", "not a number", "+919812345678", "+4470"}
	for try := range 2 {
		res, err := c.ImportTrusted(ctx, numbers)
		if err != nil || res.Imported != 2 || res.Invalid != 2 || !slices.Equal(res.InvalidIndexes, []int{1, 3}) {
			t.Fatalf("import %d: %+v, %v; want 2 imported, invalid at [1 3]", try, res, err)
		}
	}
	if _, err := c.ImportTrusted(ctx, make([]string, client.MaxTrustedImport+1)); !client.IsCode(err, client.CodeInvalidRequest) {
		t.Errorf("import of %d numbers: %v, want invalid_request", client.MaxTrustedImport+1, err)
	}
	if _, err := c.Send(ctx, client.SendRequest{Phone: "+447911123457", Account: true}); err != nil {
		t.Errorf("send with Account: %v", err)
	}
}
