package opsweb

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/problem"
)

// The number search at the top of the page, and GET /ops/numbers/{phone}:
// "why did +X get no code?" answered from what the service knows
// (ops.Desk.LookUp). Every look-up is audited as ops.lookup with the
// number masked; the number is shown in clear only in its own answer.

// maxSearch bounds what the search field may hold: a number in any
// spelling, not a document.
const maxSearch = 64

// numberWindowJSON is one of a number's windows: used, limit, and when it
// is full again.
type numberWindowJSON struct {
	Count         int64 `json:"count"`
	Limit         int64 `json:"limit"`
	WindowSeconds int64 `json:"window_seconds"`
	ResetsIn      int64 `json:"resets_in_seconds"`
	Refusing      bool  `json:"refusing"`
}

// numberCodeJSON is the number's live code: the wrong guesses used of
// its maximum, whether it is locked (max_attempts_reached), and when it
// expires.
type numberCodeJSON struct {
	Guesses     int64 `json:"guesses"`
	MaxAttempts int64 `json:"max_attempts"`
	Locked      bool  `json:"locked"`
	ExpiresIn   int64 `json:"expires_in_seconds"`
}

// numberServiceCodeJSON is a Verify service's live code of the number:
// each service keeps its own.
type numberServiceCodeJSON struct {
	Service string          `json:"service"`
	Code    *numberCodeJSON `json:"code,omitempty"`
	HasCode *bool           `json:"has_code,omitempty"`
}

type numberReasonJSON struct {
	Code     string `json:"code"`
	Text     string `json:"text"`
	ClearsIn *int64 `json:"clears_in_seconds,omitempty"`
}

type numberRiskJSON struct {
	Score       int       `json:"score"`
	Blocked     bool      `json:"blocked"`
	LineType    string    `json:"line_type,omitempty"`
	CarrierRisk string    `json:"carrier_risk,omitempty"`
	At          time.Time `json:"at"`
}

// numberJSON is GET /ops/numbers/{phone}'s answer.
type numberJSON struct {
	Phone    string             `json:"phone"`
	Country  string             `json:"country,omitempty"`
	Refusing []numberReasonJSON `json:"refusing"`
	DeniedBy *denyEntry         `json:"denied_by,omitempty"`
	Blocks   []blockedItem      `json:"blocks"`
	Sends    *numberWindowJSON  `json:"sends,omitempty"`
	Cooldown *numberWindowJSON  `json:"cooldown,omitempty"`
	// Code is its live code, nil when it has none or it was not read
	// (HasCode says which: nil when not read).
	Code    *numberCodeJSON `json:"code,omitempty"`
	HasCode *bool           `json:"has_code,omitempty"`
	// ServiceCodes are the Verify services' live codes of the number,
	// each as Code and HasCode are the default service's.
	ServiceCodes []numberServiceCodeJSON `json:"service_codes,omitempty"`
	// Trusted is nil when trust marks are off or could not be read.
	Trusted *bool           `json:"trusted,omitempty"`
	Risk    *numberRiskJSON `json:"risk,omitempty"`
	Events  []eventItem     `json:"events"`
	Errors  []string        `json:"errors,omitempty"`
}

func toNumberJSON(a ops.NumberAnswer) numberJSON {
	j := numberJSON{Phone: a.Phone.E164, Country: a.Phone.Region, Refusing: []numberReasonJSON{}, Blocks: []blockedItem{},
		Events: []eventItem{}, Errors: a.Errors}
	for _, r := range a.Refusing() {
		rj := numberReasonJSON{Code: string(r.Code), Text: r.Text}
		if r.Clears > 0 {
			s := seconds(r.Clears)
			rj.ClearsIn = &s
		}
		j.Refusing = append(j.Refusing, rj)
	}
	if a.DeniedBy != nil {
		d := toDenyEntry(*a.DeniedBy)
		j.DeniedBy = &d
	}
	for _, b := range a.Blocks {
		j.Blocks = append(j.Blocks, toBlockedItem(b, a.At))
	}
	j.Sends, j.Cooldown = toWindowState(a.State.Sends), toWindowState(a.State.Cooldown)
	j.Code, j.HasCode = toCodeJSON(a.State.Code, a.State.CodeKnown)
	for _, sc := range a.State.ServiceCodes {
		c, has := toCodeJSON(sc.Code, sc.Known)
		j.ServiceCodes = append(j.ServiceCodes, numberServiceCodeJSON{Service: sc.Service, Code: c, HasCode: has})
	}
	if a.State.TrustKnown {
		t := a.State.Trusted
		j.Trusted = &t
	}
	if r := a.State.Risk; r != nil {
		j.Risk = &numberRiskJSON{Score: r.Score, Blocked: r.Blocked, LineType: r.LineType, CarrierRisk: r.CarrierRisk, At: r.At.UTC()}
	}
	for _, e := range a.Events {
		j.Events = append(j.Events, eventItem{ID: e.ID, At: e.At, Action: e.Action, Outcome: e.Outcome, Phone: e.Phone,
			Country: e.Country, IP: e.IP, Actor: e.Actor, Detail: e.Detail, TraceID: e.TraceID, RequestID: e.RequestID,
			Service: e.Service})
	}
	return j
}

// toCodeJSON is a live code c and whether there is one (nil: not read).
func toCodeJSON(c *guard.CodeState, known bool) (*numberCodeJSON, *bool) {
	if !known {
		return nil, nil
	}
	has := c != nil
	if c == nil {
		return nil, &has
	}
	return &numberCodeJSON{Guesses: c.Guesses, MaxAttempts: c.MaxAttempts, Locked: c.Locked, ExpiresIn: seconds(c.ExpiresIn)}, &has
}

func toWindowState(w guard.WindowState) *numberWindowJSON {
	if !w.Known || w.Limit == 0 {
		return nil
	}
	return &numberWindowJSON{Count: w.Count, Limit: w.Limit, WindowSeconds: int64(w.Window / time.Second),
		ResetsIn: seconds(w.ResetAfter), Refusing: w.Refusing()}
}

// LookUpNumber: GET /ops/numbers/{phone}. What the service knows of one
// number (any spelling /otp/send takes): what refuses its next send now and
// when each clears, the deny-list entry and blocks that hold it, its send
// window and cooldown, its live code's wrong guesses of the maximum and
// whether it is locked, its trust mark and cached risk score, and its last
// events. Audited as ops.lookup with the actor and the number masked.
func (s *API) LookUpNumber(c echo.Context) error {
	raw, err := url.PathUnescape(c.Param("phone"))
	if err != nil || len(raw) > maxSearch {
		return problem.Errorf(problem.CodeInvalidPhone, "phone is not a valid path segment")
	}
	a, err := s.ops.LookUp(c.Request().Context(), raw, actorFrom(c), inspector(s.numbers), serviceSIDs(s.services)...)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toNumberJSON(a))
}

// inspector is the OTP service in force, nil when there is none.
func inspector(f func() ops.NumberInspector) ops.NumberInspector {
	if f == nil {
		return nil
	}
	return f()
}

// searchView is the search's section (templates/search.html): the field,
// and the answer when a number was asked.
type searchView struct {
	CSRF  string
	Query string
	// Problem: the query is not a number.
	Problem string
	Answer  *searchAnswer
}

type searchAnswer struct {
	numberJSON
	Masked string
	// LastSend is the number's last send decision, nil when none is in
	// the trail.
	LastSend *eventItem
	// Actions that apply: each a form posting to the desk's routes.
	CanUnblock, CanDeny, CanClearRisk, CanTrust bool
	// Trust is "yes", "no" or "" (unknown): a template's if reads a
	// *bool as set, not as true.
	Trust string
}

// loadSearch answers the page's number search (?q=). While an answer is
// shown the page does not reload itself: each reload would look the
// number up, and audit it, again.
func (s *Pages) loadSearch(c echo.Context, p *opsPage) {
	q := strings.TrimSpace(c.QueryParam("q"))
	v := searchView{CSRF: p.CSRF, Query: q}
	defer func() { p.Sections["search"] = v }()
	if q == "" {
		return
	}
	p.Refresh, p.RefreshURL = 0, "/ops" // resuming leaves the answer
	if len(q) > maxSearch {
		v.Problem = problemMessage(problem.CodeInvalidPhone)
		return
	}
	a, err := s.ops.LookUp(c.Request().Context(), q, actorFrom(c), inspector(s.numbers), serviceSIDs(s.services)...)
	if err != nil {
		v.Problem = problemMessage(problem.CodeOf(err))
		return
	}
	j := toNumberJSON(a)
	sa := &searchAnswer{numberJSON: j, Masked: guard.MaskPhone(a.Phone.E164)}
	for i, e := range j.Events {
		if e.Action == guard.ActionOTPSend {
			sa.LastSend = &j.Events[i]
			break
		}
	}
	sa.CanUnblock = len(a.Blocks) > 0 || a.State.Sends.Count > 0 || a.State.Cooldown.Count > 0
	sa.CanDeny = a.DeniedBy == nil
	if a.State.TrustKnown {
		sa.Trust = map[bool]string{true: "yes", false: "no"}[a.State.Trusted]
	}
	sa.CanClearRisk = a.State.Risk != nil && s.risk != nil
	sa.CanTrust = s.trust != nil && a.State.TrustKnown && !a.State.Trusted && a.DeniedBy == nil // trust does not lift a deny
	v.Answer = sa
}

// FormTrust: POST /ops/actions/trust. The number search's Trust button:
// marks the number trusted as POST /ops/trusted-numbers does for one
// number (audited as otp.trust.import).
func (s *Pages) FormTrust(c echo.Context) error {
	if s.trust == nil {
		return s.backToPage(c, "", problem.Errorf(problem.CodeNotFound, "trusted numbers are not served here"))
	}
	phone := strings.TrimSpace(c.Request().PostFormValue("phone"))
	res, err := s.trust().ImportTrusted(c.Request().Context(), []string{phone}, actorFrom(c))
	if err == nil && len(res.Invalid) > 0 {
		err = problem.Errorf(problem.CodeInvalidPhone, "not an E.164 number")
	}
	return s.backToPage(c, "number_trusted", err)
}
