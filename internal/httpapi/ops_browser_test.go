package httpapi_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

// chromiumPath finds Chromium; without it the test skips, or fails when
// real services are required (CI installs Debian's chromium).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	redistest.Unavailable(t, "chromium is not installed (apt-get install chromium)")
	return ""
}

// artifactDir is where a test leaves files for people to look at:
// $OTPGUARD_ARTIFACTS when set (CI keeps it), else the test's temp dir.
func artifactDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("OTPGUARD_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// TestOpsPageInChromium drives the ops page in a real headless Chromium:
// sign in with the ops key, see a blocked number with its reason, unblock
// it, and add a prefix to the deny-list; a screenshot is left as an
// artifact.
func TestOpsPageInChromium(t *testing.T) {
	exe := chromiumPath(t)
	oc := newOpsCluster(t, opsConfig{engine: store.EngineSQLite})
	const phone = "+14155550100"
	if status, _ := oc.send(t, 0, phone); status != 200 {
		t.Fatalf("send: %d", status)
	}
	if _, code := oc.send(t, 0, phone); code != "cooldown" {
		t.Fatalf("second send: %q, want cooldown", code)
	}
	base := oc.instances[0].srv.URL

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.WindowSize(1280, 1000),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancelCtx()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(css(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	screenshot := func() []byte { // quality 100 makes a PNG
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		return png
	}

	// Signed out, the page sends us to the sign-in form.
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ops"),
		chromedp.WaitVisible(css(`#login input[name="key"]`)),
		chromedp.SendKeys(css(`#login input[name="key"]`), opsKey),
		chromedp.Click(css(`#login button[type="submit"]`)),
		chromedp.WaitVisible(css(`#actor`)),
	)
	if err != nil {
		t.Fatalf("sign in: %v", err)
	}
	actor := text(`#actor`)
	if !strings.HasPrefix(actor, "ops:") || strings.Contains(actor, opsKey) {
		t.Errorf("signed in as %q, want ops:<key id>", actor)
	}

	// The blocked number, its reason and time left.
	row := `tr.blocked-row[data-phone="` + phone + `"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(css(row))); err != nil {
		t.Fatalf("blocked number not shown: %v", err)
	}
	if reason, left := text(row+` .reason`), text(row+` td:nth-child(6)`); reason != "cooldown" || !strings.HasSuffix(left, "s") {
		t.Errorf("blocked row: reason %q, time left %q", reason, left)
	}
	before := screenshot()

	// Unblock it.
	err = chromedp.Do(ctx,
		chromedp.Click(css(row+` form.unblock button`)),
		chromedp.WaitVisible(css(`#flash`)),
		chromedp.WaitNotPresent(css(row)),
	)
	if err != nil {
		t.Fatalf("unblock: %v", err)
	}
	if flash := text(`#flash`); !strings.Contains(flash, "Unblocked") {
		t.Errorf("after unblock the page says %q", flash)
	}
	if status, code := oc.send(t, 0, phone); status != 200 {
		t.Errorf("send after unblocking in the browser: %d %s, want 200", status, code)
	}

	// Add a prefix to the deny-list.
	err = chromedp.Do(ctx,
		chromedp.SendKeys(css(`#deny-add input[name="pattern"]`), "+88213"),
		chromedp.SendKeys(css(`#deny-add input[name="reason"]`), "fraud wave"),
		chromedp.SendKeys(css(`#deny-add input[name="expires_in"]`), "24h"),
		chromedp.Click(css(`#deny-add button[type="submit"]`)),
		chromedp.WaitVisible(css(`tr.deny-row[data-pattern="+88213"]`)),
		// It is listed as a block too, and the chart has the sends.
		chromedp.WaitVisible(css(`tr.blocked-row[data-phone="+88213"]`)),
		chromedp.WaitVisible(css(`#activity svg rect.sends`)),
	)
	if err != nil {
		t.Fatalf("add a prefix to the deny-list: %v", err)
	}
	if flash, author := text(`#flash`), text(`tr.deny-row[data-pattern="+88213"] td:nth-child(3)`); !strings.Contains(flash, "deny-list") || author != actor {
		t.Errorf("after adding: flash %q, author %q (want %q)", flash, author, actor)
	}
	if _, ok := oc.nodes[0].deny.Denied("+882130000000", time.Now()); !ok {
		t.Error("the prefix added in the browser is not enforced")
	}
	events := text(`#events`)
	for _, want := range []string{"ops.unblock", "ops.deny.add", "ops.login", "otp.send"} {
		if !strings.Contains(events, want) {
			t.Errorf("recent events lack %s", want)
		}
	}
	after := screenshot()

	dir := artifactDir(t)
	for name, png := range map[string][]byte{"ops-page-blocked.png": before, "ops-page.png": after} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
}
