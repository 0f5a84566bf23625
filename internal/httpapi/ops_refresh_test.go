package httpapi_test

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/html"

	"github.com/otpguard/otpguard/internal/sqlstore"
)

// refreshState is what drives the page's self-refresh, as served.
type refreshState struct {
	DataRefresh string // <body data-refresh>: the script's interval, in seconds
	MetaRefresh string // the <noscript> meta refresh's content, "" when none
	Toggle      string // the pause or resume link's text
	ToggleHref  string
	// Hidden is the refresh value each GET form sends back ("" when it
	// sends none), by the form's action.
	Hidden map[string]string
}

func readRefresh(t *testing.T, doc *html.Node) refreshState {
	t.Helper()
	var st refreshState
	body := findOne(t, doc, "body", tag("body"))
	st.DataRefresh, _ = htmlAttr(body, "data-refresh")
	head := findOne(t, doc, "head", tag("head"))
	if metas := findAll(doc, tag("meta", hasAttr("http-equiv", "refresh"))); len(metas) > 0 {
		if len(metas) > 1 || metas[0].Parent.Data != "noscript" || metas[0].Parent.Parent != head {
			t.Errorf("%d meta refreshes, want one, in a <noscript> in <head>", len(metas))
		}
		st.MetaRefresh, _ = htmlAttr(metas[0], "content")
	}
	span := findOne(t, doc, "#refresh", tag("span", hasAttr("id", "refresh")))
	if span == nil {
		t.Fatal("the page has no #refresh")
	}
	if a := findAll(span, tag("a")); len(a) == 1 {
		st.Toggle = text(a[0])
		st.ToggleHref, _ = htmlAttr(a[0], "href")
	}
	st.Hidden = map[string]string{}
	for _, f := range findAll(doc, tag("form", hasAttr("method", "get"))) {
		action, _ := htmlAttr(f, "action")
		st.Hidden[action] = ""
		for _, in := range findAll(f, tag("input", hasAttr("name", "refresh"))) {
			st.Hidden[action], _ = htmlAttr(in, "value")
		}
	}
	return st
}

// TestOpsPageRefreshMarkup: what makes the page refresh itself, without
// waiting for it. By default the script is told 30 s and a browser
// without JavaScript reloads every 30 s; ?refresh=0 turns both off, and
// paging or filtering a paused page keeps it paused. The pause and resume
// links keep the rest of the query. The script is allowed by the page's
// CSP (a hash that did not match would stop it running, silently).
func TestOpsPageRefreshMarkup(t *testing.T) {
	oc := newOpsCluster(t, opsConfig{engine: sqlstore.EngineSQLite})
	_, events := eventsSet(130)
	if err := oc.nodes[0].db.WriteEvents(t.Context(), events); err != nil {
		t.Fatal(err)
	}

	r := oc.ops(t, 0, "GET", "/ops?ev_country=IN", "")
	if r.Status != 200 {
		t.Fatalf("GET /ops: %d", r.Status)
	}
	doc := parsePage(t, r.Body)
	got := readRefresh(t, doc)
	want := refreshState{DataRefresh: "30", MetaRefresh: "30", Toggle: "pause", ToggleHref: "/ops?ev_country=IN&refresh=0",
		// The number search sends no refresh: its answer never refreshes
		// (each refresh would be another audited look-up).
		Hidden: map[string]string{"/ops#blocked": "", "/ops#events": "", "/ops#search": ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a refreshing page (-want +got):\n%s", diff)
	}
	scripts := findAll(doc, tag("script"))
	if len(scripts) != 1 {
		t.Fatalf("%d scripts on the page, want its one script", len(scripts))
	}
	src := ""
	for c := range scripts[0].ChildNodes() {
		src += c.Data
	}
	if !strings.Contains(src, `getAttribute("data-refresh")`) || !strings.Contains(src, "setInterval") {
		t.Errorf("the page's script does not schedule a refresh from data-refresh:\n%s", src)
	}
	sum := sha256.Sum256([]byte(src))
	if hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(r.Header.Get("Content-Security-Policy"), "script-src "+hash) {
		t.Errorf("the CSP %q does not allow the page's script (%s)", r.Header.Get("Content-Security-Policy"), hash)
	}

	paused := opsPageGet(t, oc, got.ToggleHref)
	got = readRefresh(t, paused)
	want = refreshState{DataRefresh: "0", Toggle: "resume", ToggleHref: "/ops?ev_country=IN",
		Hidden: map[string]string{"/ops#blocked": "0", "/ops#events": "0", "/ops#search": ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a paused page (-want +got):\n%s", diff)
	}
	older := linkByID(t, paused, "events-older")
	if got := readRefresh(t, opsPageGet(t, oc, older)); got.DataRefresh != "0" || got.MetaRefresh != "" {
		t.Errorf("the older events of a paused page (%s) refresh: %+v", older, got)
	}
	if got := readRefresh(t, opsPageGet(t, oc, got.ToggleHref)); got.DataRefresh != "30" || got.MetaRefresh != "30" {
		t.Errorf("resumed page: %+v, want it refreshing every 30 s again", got)
	}
	// A number search's answer does not refresh: each refresh would look
	// the number up, and audit it, again. Resuming leaves the answer.
	if got := readRefresh(t, opsPageGet(t, oc, "/ops?q=%2B14155550100")); got.DataRefresh != "0" || got.MetaRefresh != "" || got.ToggleHref != "/ops" {
		t.Errorf("a search answer: %+v, want it not refreshing", got)
	}
}
