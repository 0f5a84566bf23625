package httpapi_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/otpguard/otpguard/internal/sqlstore"
)

// TestOpsSignOutSurvivesEmptyRedis: a signed-out session's cookie stays
// refused on every instance, and on one started afterwards, when Redis
// restarts empty: the sign-out is kept in the SQL store and cached by each
// instance, not only in Redis.
func TestOpsSignOutSurvivesEmptyRedis(t *testing.T) {
	for _, engine := range []string{sqlstore.EnginePostgres, sqlstore.EngineSQLite} {
		t.Run(engine, func(t *testing.T) {
			oc := newOpsCluster(t, opsConfig{instances: 2, engine: engine, ownRedis: true})
			b := newBrowser(t, oc.instances[0].srv.URL)
			res := b.form("/ops/login", url.Values{"key": {opsKey}})
			if res.StatusCode != http.StatusSeeOther || len(res.Cookies()) != 1 {
				t.Fatalf("sign in: %d, cookies %v", res.StatusCode, res.Cookies())
			}
			cookie := res.Cookies()[0]
			_, page := b.do("GET", "/ops", "", "", nil)
			m := csrfInPage.FindStringSubmatch(page)
			if m == nil {
				t.Fatal("no csrf_token in the page")
			}
			plain := &http.Client{CheckRedirect: noRedirects.CheckRedirect}
			withCookie := func(i int) int {
				t.Helper()
				req, _ := http.NewRequest("GET", oc.instances[i].srv.URL+"/ops/blocked", nil)
				req.AddCookie(cookie)
				res, err := plain.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				return res.StatusCode
			}
			for i := range oc.instances {
				if got := withCookie(i); got != http.StatusOK {
					t.Fatalf("instance %d, signed in: %d, want 200", i, got)
				}
			}

			signedOut := time.Now()
			if res := b.form("/ops/logout", url.Values{"csrf_token": {m[1]}}); res.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign out: %d, want 303", res.StatusCode)
			}
			// Every instance has reloaded the sign-outs since.
			opsWait(t, "every instance to reload the sign-outs", func() bool {
				for _, in := range oc.instances {
					if !in.app.SignOuts().LoadedAt().After(signedOut) {
						return false
					}
				}
				return true
			})

			oc.redis.Restart() // empty: no sign-out in Redis any more
			oc.startMore(t)    // and an instance that never saw the sign-out
			for i := range oc.instances {
				if got := withCookie(i); got != http.StatusUnauthorized {
					t.Errorf("instance %d, the signed-out cookie after Redis restarted empty: %d, want 401", i, got)
				}
			}
		})
	}
}
