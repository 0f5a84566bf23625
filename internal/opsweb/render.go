package opsweb

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
)

//go:embed templates/*.html templates/ops.js
var opsTemplateFS embed.FS

// opsScript is the page's one script (templates/ops.js): confirmations
// and refreshing the live parts in place. The page works without it.
var opsScript = mustRead(opsTemplateFS, "templates/ops.js")

// opsTemplates are parsed once; they are never changed afterwards.
var opsTemplates = template.Must(template.New("ops").Funcs(pageFuncs).ParseFS(opsTemplateFS, "templates/*.html"))

// opsPageCSP allows the page nothing but itself: inline styles and inline
// SVG, its one script (by hash), fetches of itself, forms only to itself,
// no framing.
var opsPageCSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; script-src 'sha256-" + sha256b64(opsScript) +
	"'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func mustRead(fs embed.FS, name string) string {
	b, err := fs.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func sha256b64(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// budgetView is one budget card. A budget that is off counts nothing, so
// its card shows the sends of the attack view's window instead (Sent
// since Since), never a 0 that is not true.
type budgetView struct {
	Name    string
	W       abuseBudgetWindowJSON
	Percent int64
	Counted bool
	Sent    int64
	Since   time.Time
}

// windowView is one window of the attack view as the page lays it out.
type windowView struct {
	Name, Key string
	W         *abuseWindowJSON
}

var pageFuncs = template.FuncMap{
	"join": strings.Join,
	// opsScript is the script element; its text is a constant of the
	// binary, allowed by its hash in the CSP.
	"opsScript": func() template.HTML { return template.HTML("<script>" + opsScript + "</script>") },
	"pct": func(r *float64) string {
		if r == nil {
			return "–"
		}
		return strconv.FormatFloat(*r*100, 'f', 0, 64) + " %"
	},
	// low marks a conversion below the watch's default min_rate.
	"low": func(r *float64) bool { return r != nil && *r < guard.DefaultMinRate },
	"limit": func(l abuseLimitJSON) string {
		w := (time.Duration(l.WindowSeconds) * time.Second).String()
		switch {
		case l.WindowSeconds%3600 == 0 && l.WindowSeconds > 0:
			w = strconv.FormatInt(l.WindowSeconds/3600, 10) + " h"
		case l.WindowSeconds%60 == 0 && l.WindowSeconds > 0:
			w = strconv.FormatInt(l.WindowSeconds/60, 10) + " min"
		}
		out := fmt.Sprintf("%d per %s (%s)", l.Limit, w, l.Rule)
		if l.Count != nil {
			out = fmt.Sprintf("%d of %d this hour (%s)", *l.Count, l.Limit, l.Rule)
		}
		if l.Quarantined {
			out += ", quarantined"
		}
		return out
	},
	"left": func(secs int64) string { return timeLeft(time.Unix(secs, 0), time.Unix(0, 0)) },
	// clip is the first n characters of s, and "…" when there is more: a
	// long request ID or detail, shown whole when unfolded.
	"clip": func(s string, n int) string {
		r := []rune(s)
		if len(r) <= n {
			return s
		}
		return string(r[:n]) + "…"
	},
	"long": func(s string, n int) bool { return utf8.RuneCountInString(s) > n },
	"deref": func(n *int64) int64 {
		if n == nil {
			return 0
		}
		return *n
	},
	"budget": func(name string, w abuseBudgetWindowJSON, sent *abuseWindowJSON) budgetView {
		v := budgetView{Name: name, W: w}
		if sent != nil {
			v.Counted, v.Sent, v.Since = true, sent.Total.Sends, sent.Since
		}
		if w.Limit > 0 {
			v.Percent = min(100, w.Used*100/w.Limit)
		}
		return v
	},
	"windows": func(v *abuseJSON) []windowView {
		var out []windowView
		if v.LastHour != nil {
			out = append(out, windowView{"last hour", "hour", v.LastHour})
		}
		if v.LastDay != nil {
			out = append(out, windowView{"last day", "day", v.LastDay})
		}
		return out
	},
}

// render writes the named template, or a problem when it fails (before
// anything was written).
func render(c echo.Context, status int, name string, data any) error {
	var b bytes.Buffer
	if err := opsTemplates.ExecuteTemplate(&b, name, data); err != nil {
		return fmt.Errorf("opsweb: render %s: %w", name, err)
	}
	h := c.Response().Header()
	h.Set("Content-Security-Policy", opsPageCSP)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	return c.HTMLBlob(status, b.Bytes())
}
