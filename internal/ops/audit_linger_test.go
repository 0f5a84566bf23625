package ops_test

import (
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
)

// TestAuditQueueLinger: with a linger, events recorded one by one go to
// the database together, one write per full batch; a batch that is not
// full is written when the linger ends, here cut short by the queue's
// stop, and nothing is lost.
func TestAuditQueueLinger(t *testing.T) {
	log := &fakeAudit{}
	q := ops.NewAuditQueue(log, ops.AuditQueueOptions{Batch: 10, Linger: time.Hour})
	stop := runQueue(t, q)
	for i := range 23 {
		q.Record(guard.Event{Action: "otp.send", Detail: string(rune('a' + i))})
		time.Sleep(time.Millisecond) // one by one, as requests come
	}
	eventually(t, "two full batches written", func() bool {
		written, _ := log.snapshot()
		return len(written) == 20
	})
	stop()
	written, _ := log.snapshot()
	log.mu.Lock()
	batches := log.batches
	log.mu.Unlock()
	if len(written) != 23 || batches != 3 {
		t.Errorf("%d events in %d writes, want 23 in 3 (10, 10, then the 3 left at the stop)", len(written), batches)
	}
}
