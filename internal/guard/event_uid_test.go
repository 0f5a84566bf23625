package guard

import (
	"encoding/hex"
	"testing"
	"time"
)

// An event's UID is 32 hex digits that sort by the millisecond they were
// made in (the audit table's unique index grows at its end), and UIDs of
// the same millisecond still differ.
func TestNewEventUID(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	a, b := newEventUID(t0), newEventUID(t0)
	later := newEventUID(t0.Add(time.Millisecond))
	for _, uid := range []string{a, b, later} {
		if raw, err := hex.DecodeString(uid); err != nil || len(raw) != 16 {
			t.Fatalf("UID %q: want 32 hex digits (%v)", uid, err)
		}
	}
	if a == b {
		t.Errorf("two UIDs of one millisecond are both %q, want them to differ", a)
	}
	if a[:12] != b[:12] || later <= a || later <= b {
		t.Errorf("UIDs %q, %q, then a millisecond later %q: want the time first, so the later sorts after", a, b, later)
	}
	if want := "01a2407f1500"; a[:12] != want { // 1796378400000 ms
		t.Errorf("UID %q starts %q, want the unix milliseconds %q", a, a[:12], want)
	}
}
