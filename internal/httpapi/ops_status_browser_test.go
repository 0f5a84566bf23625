package httpapi_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/browsertest"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsStatusBadgeInChromium puts the service in each state that refuses
// or degrades sends, one after the other, and reads the page's badge in a
// real Chromium: green "all systems normal" only when none holds, else the
// worst named, the others one tap away. The states are real: overrides in
// force, budgets spent by sends, the database black-holed, an alert
// recorded, Redis killed. Shedding and a dead Cluster master are made in
// TestOpsStatusBadgeShedAndDeadMasterInChromium, on a cluster of its own.
func TestOpsStatusBadgeInChromium(t *testing.T) {
	exe := browsertest.Chromium(t)
	pol := attackPolicies()
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EnginePostgres, policies: &pol, ownRedis: true, dbProxy: true,
		dbTimeout: 2 * time.Second})
	n := oc.nodes[0]
	// The first state is "nothing holds": the database must have answered.
	opsWait(t, "the database up", func() bool {
		return strings.Contains(string(oc.ops(t, 0, "GET", "/ops/status", "").Body), `"database":{"state":"up"`)
	})
	base := oc.instances[0].srv.URL
	ctx := browsertest.Headless(t, exe, 3*time.Minute)
	signInChromium(t, ctx, base, `#status-badge`)

	bg := context.Background()
	override := func(kind guard.OverrideKind, subject string, limit int64) func(t *testing.T) func() {
		return func(t *testing.T) func() {
			o, err := n.desk.AddOverride(bg, guard.Override{Kind: kind, Subject: subject, Limit: limit, Reason: "badge test"}, time.Hour, "ops:test")
			if err != nil {
				t.Fatalf("override %s: %v", kind, err)
			}
			return func() {
				if err := n.desk.RemoveOverride(bg, o.ID, "ops:test"); err != nil {
					t.Fatalf("remove override: %v", err)
				}
			}
		}
	}
	tests := []struct {
		name string
		// hurt puts the service in the state and returns what ends it (nil:
		// it lasts; the states after it are worse).
		hurt func(t *testing.T) func()
		want badgeWant
	}{
		{name: "nothing holds", hurt: func(*testing.T) func() { return nil }, want: badgeWant{code: "ok", class: "ok", text: "all systems normal"}},
		{name: "country paused", hurt: override(guard.OverrideCountryPause, "NG", 0), want: badgeWant{code: "country_paused", class: "bad", text: "NG"}},
		{name: "carrier paused", hurt: override(guard.OverrideCarrierPause, "NG/mtn", 0), want: badgeWant{code: "carrier_paused", class: "bad", text: "NG/mtn"}},
		{name: "hour budget spent, no alert", hurt: func(t *testing.T) func() {
			undo := override(guard.OverrideBudgetHour, "", 1)(t)
			if status, code := oc.send(t, 0, "+447400000101"); status != 200 {
				t.Fatalf("send: %d %s", status, code)
			}
			return undo
		}, want: badgeWant{code: "budget_hour", class: "bad", text: "every send is refused"}},
		{name: "day budget spent", hurt: override(guard.OverrideBudgetDay, "", 1), want: badgeWant{code: "budget_day", class: "bad", text: "Day budget"}},
		{name: "database down", hurt: func(t *testing.T) func() {
			oc.dbProxy.BlackHole()
			return func() {
				oc.dbProxy.Restore()
				opsWait(t, "the database to answer again", func() bool { _, err := n.desk.DenyEntries(bg); return err == nil })
			}
		}, want: badgeWant{code: "database_down", class: "warn", text: "database"}},
		{name: "alert firing", hurt: func(t *testing.T) func() {
			now := time.Now()
			if err := n.redis.AbuseCounters.AddAbuse(bg, nil, []ops.AbuseAlert{{Rule: "velocity", Scope: "country", Subject: "PK", Country: "PK",
				Outcome: "unusual_volume", At: now, Until: now.Add(time.Hour), Detail: "country=PK unusual volume"}}, now); err != nil {
				t.Fatal(err)
			}
			return nil
		}, want: badgeWant{code: "alert", class: "bad", text: "PK"}},
		{name: "a pause over the alert", hurt: func(t *testing.T) func() {
			override(guard.OverrideCountryPause, "ZA", 0)(t) // lasts: the overrides in force are known while Redis is down
			return nil
		}, want: badgeWant{code: "country_paused", class: "bad", text: "ZA", more: "abuse alert"}},
		{name: "Redis down, the pause one tap away", hurt: func(t *testing.T) func() {
			oc.redis.Kill()
			opsWait(t, "the probe to see Redis down", func() bool {
				return strings.Contains(string(oc.ops(t, 0, "GET", "/ops/status", "").Body), `"redis":"down"`)
			})
			return oc.redis.Restart
		}, want: badgeWant{code: "redis_down", class: "bad", text: "Redis is down", more: "ZA"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if undo := tt.hurt(t); undo != nil {
				defer undo()
			}
			checkBadge(t, ctx, base, tt.want)
		})
	}
}

// badgeWant is what the page's status badge should say in a state.
type badgeWant struct {
	code  string // the badge's condition: "ok" when none holds
	class string // ok, warn, bad
	text  string // in the badge's words
	more  string // in the list under the badge, one tap away ("": not read)
}

// checkBadge loads the ops page at base in Chromium (signed in) and reads
// its status badge, and the list under it when want.more is set.
func checkBadge(t *testing.T, ctx context.Context, base string, want badgeWant) {
	t.Helper()
	err := chromedp.Do(ctx, chromedp.Navigate(base+"/ops?refresh=0"), chromedp.WaitVisible(chromedp.CSS(`#status-badge`)))
	if err != nil {
		t.Fatalf("page: %v", err)
	}
	badge := chromedp.CSS(`#status-badge`)
	codeAttr, err1 := chromedp.Run(ctx, chromedp.AttributeValue(badge, "data-code"))
	classAttr, err2 := chromedp.Run(ctx, chromedp.AttributeValue(badge, "class"))
	code, class := codeAttr.Value, classAttr.Value
	text, err3 := chromedp.Run(ctx, chromedp.Text(badge))
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatalf("reading the badge: %v", err)
	}
	if code != want.code || class != "badge "+want.class || !strings.Contains(text, want.text) {
		t.Errorf("badge: got %q (%s, class %q), want %s (class badge %s) naming %q", text, code, class, want.code, want.class, want.text)
	}
	if want.code != "ok" && strings.Contains(text, "normal") {
		t.Errorf("badge says %q, want a condition (%s)", text, want.code)
	}
	if want.more == "" {
		return
	}
	var more string
	err = chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#status-more summary`)), chromedp.WaitVisible(chromedp.CSS(`#status-more ul`)))
	if err == nil {
		more, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#status-more ul`)))
	}
	if err != nil || !strings.Contains(more, want.more) {
		t.Errorf("under the badge: %q (%v), want %q listed", more, err, want.more)
	}
}
