package guard_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/guard/guardtest"
	"github.com/otpguard/otpguard/internal/limit"
)

// unindexedStore saves codes, but answers ErrUnindexed, as the store does
// on Redis Cluster when the verification id's index (on another master)
// could not be written.
type unindexedStore struct{ *guardtest.OutageStore }

func (u unindexedStore) SaveCode(ctx context.Context, c guard.NewCode) (int, error) {
	prev, err := u.OutageStore.SaveCode(ctx, c)
	if err != nil {
		return prev, err
	}
	return prev, fmt.Errorf("store: index verification id: %w", guard.ErrUnindexed)
}

// A code saved without its id's index is sent, answered without a
// verification_id, and verifies: the number's own keys answered, so the
// send is not refused, even under closed.
func TestSendWithoutVerificationIndex(t *testing.T) {
	st := guardtest.NewOutageStore()
	p := guard.DefaultPolicies().OTP
	p.OnStoreError = limit.FallbackClosed
	box := &guardtest.Outbox{}
	otp := guard.NewOTP(guard.OTPOptions{Policy: p, Counter: st, Codes: unindexedStore{st}, Sender: box, HMACKey: outageHMACKey})
	res, err := otp.Send(context.Background(), guard.SendRequest{Phone: "+447911123456"})
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if res.VerificationID != "" {
		t.Errorf("verification_id %q for a record that cannot be read by id", res.VerificationID)
	}
	if _, err := otp.Verify(context.Background(), guard.VerifyRequest{Phone: "+447911123456", Code: box.Last(t)}); err != nil {
		t.Errorf("the saved code did not verify: %v", err)
	}
}
