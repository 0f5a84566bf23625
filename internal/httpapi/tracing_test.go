package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/otpguard/otpguard/internal/app"
	"github.com/otpguard/otpguard/internal/config"
	"github.com/otpguard/otpguard/internal/guard"
	"github.com/otpguard/otpguard/internal/limit"
	"github.com/otpguard/otpguard/internal/ops"
	"github.com/otpguard/otpguard/internal/resilience"
	"github.com/otpguard/otpguard/internal/store"
	"github.com/otpguard/otpguard/internal/store/redistest"
)

const (
	tracePhone = "+919800000042"
	twilioSID  = "AC0123456789abcdef0123456789abcdef"
)

// fakeTwilio answers the Messages API like Twilio when it queues a
// message, and keeps each request's form and traceparent header.
type fakeTwilio struct {
	*httptest.Server
	mu          sync.Mutex
	bodies      []string
	traceparent []string
}

func newFakeTwilio(t *testing.T) *fakeTwilio {
	f := &fakeTwilio{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		f.mu.Lock()
		f.bodies = append(f.bodies, r.PostForm.Get("Body"))
		f.traceparent = append(f.traceparent, r.Header.Get("traceparent"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued"}`)
	}))
	t.Cleanup(f.Close)
	return f
}

// last returns the code in the last SMS and the traceparent it came with.
func (f *fakeTwilio) last(t *testing.T) (code, traceparent string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) == 0 {
		t.Fatal("no SMS reached the fake Twilio")
	}
	words := strings.Fields(f.bodies[len(f.bodies)-1])
	return words[len(words)-1], f.traceparent[len(f.traceparent)-1]
}

// tracedApp is one instance built by app.New on miniredis, SQLite and the
// real Twilio sender against a fake Twilio, tracing into memory.
type tracedApp struct {
	app    *app.App
	spans  *tracetest.InMemoryExporter
	redis  *miniredis.Miniredis
	twilio *fakeTwilio
}

func newTracedApp(t *testing.T, policies guard.Policies, opts ...app.Option) *tracedApp {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(time.Now())
	tw := newFakeTwilio(t)
	cfg := testConfig(t, "redis://"+m.Addr(), redistest.Prefix(), t.TempDir(), policies)
	cfg.SMS = "twilio"
	cfg.Twilio = config.TwilioConfig{AccountSID: twilioSID, AuthToken: "0123456789abcdef0123456789abcdef",
		From: "+15005550006", BaseURL: tw.URL}
	rdb, err := store.NewRedisClient(store.RedisOptions{URL: cfg.RedisURL, Timeout: cfg.RedisTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	exp := tracetest.NewInMemoryExporter()
	// Synchronous: a span is in exp as soon as it ends.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts = append([]app.Option{app.WithRedis(rdb), app.WithOutput(io.Discard), app.WithTracerProvider(tp)}, opts...)
	a, err := app.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	t.Cleanup(func() { a.Close() })
	return &tracedApp{app: a, spans: exp, redis: m, twilio: tw}
}

// do serves one request in process: when it returns, the request's span
// has ended. It returns the spans of that request only.
func (ta *tracedApp) do(t *testing.T, method, path, body string, header ...string) (*httptest.ResponseRecorder, tracetest.SpanStubs) {
	t.Helper()
	ta.spans.Reset()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	ta.app.Handler().ServeHTTP(w, req)
	return w, ta.spans.GetSpans()
}

// root is the request's server span: the one span of kind server.
func root(t *testing.T, spans tracetest.SpanStubs) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.SpanKind == trace.SpanKindServer {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d server spans, want 1: %s", len(found), names(spans))
	}
	return found[0]
}

func names(spans tracetest.SpanStubs) string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

func attr(s tracetest.SpanStub, key attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// wantAttrs checks that s has each attribute with the value given.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[attribute.Key]any) {
	t.Helper()
	for k, v := range want {
		got, ok := attr(s, k)
		if !ok {
			t.Errorf("span %q: no attribute %s (has %v)", s.Name, k, s.Attributes)
			continue
		}
		if fmt.Sprint(got.AsInterface()) != fmt.Sprint(v) {
			t.Errorf("span %q: %s = %v, want %v", s.Name, k, got.AsInterface(), v)
		}
	}
}

// children are the spans whose parent is p, by name prefix.
func children(spans tracetest.SpanStubs, p tracetest.SpanStub, prefix string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Parent.SpanID() == p.SpanContext.SpanID() && s.SpanContext.TraceID() == p.SpanContext.TraceID() &&
			strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// noSecrets fails if any span shows any of secrets anywhere: name,
// attributes, events, status, resource. The national form of a number
// counts too.
func noSecrets(t *testing.T, spans tracetest.SpanStubs, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		texts := []string{s.Name, s.Status.Description}
		for _, a := range s.Attributes {
			texts = append(texts, string(a.Key)+"="+a.Value.String())
		}
		for _, e := range s.Events {
			texts = append(texts, e.Name)
			for _, a := range e.Attributes {
				texts = append(texts, string(a.Key)+"="+a.Value.String())
			}
		}
		if s.Resource != nil {
			for _, a := range s.Resource.Attributes() {
				texts = append(texts, string(a.Key)+"="+a.Value.String())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if secret != "" && strings.Contains(text, secret) {
					t.Errorf("span %q shows %q: %s", s.Name, secret, text)
				}
			}
		}
	}
}

// secretsOf is what no span may show of a number and a code.
func secretsOf(phone, code string) []string {
	return []string{phone, strings.TrimPrefix(phone, "+"), phone[3:], code}
}

// The trace of one send: a server span named after the route, with the
// Redis calls and the SMS provider call as its children, the provider
// call carrying the trace on as W3C traceparent, and nothing of the
// number or the code in any span. The audit event carries the trace ID.
func TestTraceSend(t *testing.T) {
	ta := newTracedApp(t, defaults())
	w, spans := ta.do(t, "POST", "/otp/send", `{"phone":"`+tracePhone+`"}`)
	if w.Code != http.StatusOK {
		t.Fatalf("send: %d %s", w.Code, w.Body)
	}
	t.Logf("the trace of one send (docs/observability.md, Tracing):\n%s", tree(spans))
	r := root(t, spans)
	if r.Name != "POST /otp/send" || r.Parent.IsValid() {
		t.Errorf("server span %q (parent %v), want POST /otp/send and no parent", r.Name, r.Parent.SpanID())
	}
	wantAttrs(t, r, map[attribute.Key]any{"http.route": "/otp/send", "http.response.status_code": 200, "url.path": "/otp/send"})
	if v, ok := attr(r, "otpguard.code"); ok {
		t.Errorf("a send that went out has otpguard.code %v", v.String())
	}
	redisSpans := children(spans, r, "")
	var nRedis, nSMS int
	for _, s := range redisSpans {
		switch {
		case s.InstrumentationScope.Name == "github.com/redis/go-redis/extra/redisotel":
			nRedis++
			wantAttrs(t, s, map[attribute.Key]any{"db.system": "redis"})
			if _, ok := attr(s, "db.statement"); ok {
				t.Errorf("redis span %q records its statement (keys hold numbers)", s.Name)
			}
		case s.Name == "sms POST":
			nSMS++
			if s.SpanKind != trace.SpanKindClient {
				t.Errorf("sms span kind %v, want client", s.SpanKind)
			}
			wantAttrs(t, s, map[attribute.Key]any{"http.response.status_code": 201})
		}
	}
	if nRedis == 0 || nSMS != 1 {
		t.Errorf("children of the send: %d redis, %d sms, want some and 1: %s", nRedis, nSMS, names(spans))
	}
	if len(redisSpans) != len(spans)-1 {
		t.Errorf("every span of the request is the server span's child: %d of %d (%s)", len(redisSpans), len(spans)-1, names(spans))
	}
	code, tp := ta.twilio.last(t)
	sms := children(spans, r, "sms ")[0]
	if want := fmt.Sprintf("00-%s-%s-01", sms.SpanContext.TraceID(), sms.SpanContext.SpanID()); tp != want {
		t.Errorf("Twilio got traceparent %q, want %q (the provider call's span)", tp, want)
	}
	noSecrets(t, spans, secretsOf(tracePhone, code)...)

	// The audit event leads to the trace.
	var events []guard.Event
	for range 800 { // the queue writes within its flush interval; 20 s at most
		var err error
		events, err = ta.app.SQL().ListEvents(context.Background(), ops.EventFilter{Phone: tracePhone})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) > 0 {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if len(events) != 1 || events[0].TraceID != r.SpanContext.TraceID().String() {
		t.Fatalf("audit events %+v, want one with trace ID %s", events, r.SpanContext.TraceID())
	}
	w, _ = ta.do(t, "GET", "/ops/events?phone=%2B"+tracePhone[1:], "", "Authorization", "Bearer "+opsKey)
	var list struct {
		Events []struct {
			TraceID string `json:"trace_id"`
		} `json:"events"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || len(list.Events) != 1 ||
		list.Events[0].TraceID != r.SpanContext.TraceID().String() {
		t.Errorf("GET /ops/events: %d %s, want the event with trace_id %s", w.Code, w.Body, r.SpanContext.TraceID())
	}
}

// A caller's traceparent makes the request part of the caller's trace, and
// the provider call part of it too.
func TestTraceCallerContext(t *testing.T) {
	ta := newTracedApp(t, defaults())
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	w, spans := ta.do(t, "POST", "/otp/send", `{"phone":"`+tracePhone+`"}`,
		"traceparent", "00-"+callerTrace+"-"+callerSpan+"-01", "baggage", "tenant=acme")
	if w.Code != http.StatusOK {
		t.Fatalf("send: %d %s", w.Code, w.Body)
	}
	r := root(t, spans)
	if r.SpanContext.TraceID().String() != callerTrace || r.Parent.SpanID().String() != callerSpan || !r.Parent.IsRemote() {
		t.Errorf("server span in trace %s with parent %s (remote %v), want the caller's %s, %s",
			r.SpanContext.TraceID(), r.Parent.SpanID(), r.Parent.IsRemote(), callerTrace, callerSpan)
	}
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != callerTrace {
			t.Errorf("span %q in trace %s, want the caller's", s.Name, s.SpanContext.TraceID())
		}
	}
	_, tp := ta.twilio.last(t)
	if !strings.HasPrefix(tp, "00-"+callerTrace+"-") {
		t.Errorf("Twilio got traceparent %q, want the caller's trace %s", tp, callerTrace)
	}
}

// A refusal carries its code on the server span; the code of a verify is
// nowhere.
func TestTraceRefusal(t *testing.T) {
	ta := newTracedApp(t, defaults())
	if w, _ := ta.do(t, "POST", "/otp/send", `{"phone":"`+tracePhone+`"}`); w.Code != http.StatusOK {
		t.Fatalf("send: %d %s", w.Code, w.Body)
	}
	code, _ := ta.twilio.last(t)
	w, spans := ta.do(t, "POST", "/otp/send", `{"phone":"`+tracePhone+`"}`)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second send: %d %s, want 429 cooldown", w.Code, w.Body)
	}
	r := root(t, spans)
	wantAttrs(t, r, map[attribute.Key]any{"otpguard.code": "cooldown", "http.response.status_code": 429, "http.route": "/otp/send"})
	if r.Status.Code == codes.Error {
		t.Errorf("a refusal (4xx) marked the server span as an error")
	}
	if len(children(spans, r, "sms ")) != 0 {
		t.Errorf("a refused send called the provider: %s", names(spans))
	}
	noSecrets(t, spans, secretsOf(tracePhone, code)...)

	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	w, spans = ta.do(t, "POST", "/otp/verify", `{"phone":"`+tracePhone+`","code":"`+wrong+`"}`)
	if w.Code == http.StatusOK {
		t.Fatalf("wrong code: %d %s", w.Code, w.Body)
	}
	wantAttrs(t, root(t, spans), map[attribute.Key]any{"otpguard.code": "wrong_code", "http.route": "/otp/verify"})
	noSecrets(t, spans, secretsOf(tracePhone, code)...)
	noSecrets(t, spans, wrong)
	w, spans = ta.do(t, "POST", "/otp/verify", `{"phone":"`+tracePhone+`","code":"`+code+`"}`)
	if w.Code != http.StatusOK {
		t.Fatalf("right code: %d %s", w.Code, w.Body)
	}
	noSecrets(t, spans, secretsOf(tracePhone, code)...)
}

// A limit check: a span per request, the script call its child, and a
// denial's code.
func TestTraceCheck(t *testing.T) {
	p := defaults()
	p.Limits = map[string]limit.Policy{"login": {Algorithm: limit.FixedWindow, Limit: 1, Window: time.Minute}}
	ta := newTracedApp(t, p)
	body := `{"policy":"login","key":"user:42"}`
	w, spans := ta.do(t, "POST", "/limits/check", body)
	if w.Code != http.StatusOK {
		t.Fatalf("check: %d %s", w.Code, w.Body)
	}
	t.Logf("the trace of one check:\n%s", tree(spans))
	r := root(t, spans)
	if r.Name != "POST /limits/check" {
		t.Errorf("server span %q, want POST /limits/check", r.Name)
	}
	if _, ok := attr(r, "otpguard.code"); ok {
		t.Errorf("an allowed check has otpguard.code")
	}
	if n := len(children(spans, r, "")); n == 0 || n != len(spans)-1 {
		t.Errorf("%d children of %d spans, want every Redis call under the request: %s", n, len(spans), names(spans))
	}
	w, spans = ta.do(t, "POST", "/limits/check", body)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second check: %d %s", w.Code, w.Body)
	}
	wantAttrs(t, root(t, spans), map[attribute.Key]any{"otpguard.code": "rate_limited", "http.response.status_code": 429})
}

// An outage: while the breaker is closed the failed Redis call is an error
// span under the refused request; once it is open, the decision is the
// fallback's, with no Redis call at all.
func TestTraceOutage(t *testing.T) {
	// The probe and the heartbeat would fail too, and the first failure
	// opens this breaker: kept from running, they leave the first send to
	// meet the dead Redis itself, however slow the machine.
	ta := newTracedApp(t, defaults(), app.WithBreaker(resilience.BreakerOptions{Failures: 1, OpenFor: time.Hour}),
		app.WithProbe(time.Hour), app.WithHeartbeat(time.Hour, 3*time.Hour))
	ta.redis.Close()
	var sawFailedCall, sawOpen bool
	for i := range 20 {
		phone := fmt.Sprintf("+9198000001%02d", i)
		w, spans := ta.do(t, "POST", "/otp/send", `{"phone":"`+phone+`"}`)
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("send %d with Redis down: %d %s, want 503", i, w.Code, w.Body)
		}
		r := root(t, spans)
		wantAttrs(t, r, map[attribute.Key]any{"otpguard.code": "store_unavailable", "http.response.status_code": 503})
		if r.Status.Code != codes.Error {
			t.Errorf("a 503 left the server span's status %v, want error", r.Status.Code)
		}
		noSecrets(t, spans, secretsOf(phone, "")...)
		redisCalls := 0
		for _, s := range children(spans, r, "") {
			if s.InstrumentationScope.Name == "github.com/redis/go-redis/extra/redisotel" {
				redisCalls++
				if s.Status.Code == codes.Error {
					sawFailedCall = true
				}
			}
		}
		if redisCalls == 0 {
			sawOpen = true
			break
		}
	}
	if !sawFailedCall || !sawOpen {
		t.Errorf("failed Redis call traced: %v; a decision with the breaker open (no Redis call): %v; want both", sawFailedCall, sawOpen)
	}
}

// An ops request: the SQL calls are its children, with the statement and
// without its arguments; the number in the path is masked.
func TestTraceOpsSQL(t *testing.T) {
	ta := newTracedApp(t, defaults())
	const number = "+919800000077"
	w, spans := ta.do(t, "POST", "/ops/denylist", `{"pattern":"`+number+`","reason":"test"}`, "Authorization", "Bearer "+opsKey)
	if w.Code != http.StatusCreated && w.Code != http.StatusOK {
		t.Fatalf("deny: %d %s", w.Code, w.Body)
	}
	r := root(t, spans)
	sqlSpans := 0
	for _, s := range children(spans, r, "sql.") {
		sqlSpans++
		if v, ok := attr(s, "db.system.name"); !ok || v.AsString() != "sqlite" {
			t.Errorf("sql span %q: db.system.name %v", s.Name, v.String())
		}
	}
	if sqlSpans == 0 {
		t.Errorf("no SQL span under the ops request: %s", names(spans))
	}
	noSecrets(t, spans, secretsOf(number, "")...)

	w, spans = ta.do(t, "DELETE", "/ops/blocked/"+number, "", "Authorization", "Bearer "+opsKey)
	if w.Code >= 500 {
		t.Fatalf("unblock: %d %s", w.Code, w.Body)
	}
	r = root(t, spans)
	wantAttrs(t, r, map[attribute.Key]any{"http.route": "/ops/blocked/:phone", "url.path": "/ops/blocked/" + guard.MaskPhone(number)})
	noSecrets(t, spans, secretsOf(number, "")...)
}

// tree draws spans as docs/observability.md shows a trace: each span under its
// parent, in start order, with its kind, duration and attributes (the
// connection details left out).
func tree(spans tracetest.SpanStubs) string {
	var b strings.Builder
	var draw func(parent trace.SpanID, indent string)
	draw = func(parent trace.SpanID, indent string) {
		var kids tracetest.SpanStubs
		for _, s := range spans {
			if s.Parent.SpanID() == parent {
				kids = append(kids, s)
			}
		}
		slices.SortFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		for i, s := range kids {
			branch, next := "├─ ", "│  "
			if i == len(kids)-1 {
				branch, next = "└─ ", "   "
			}
			if parent == (trace.SpanID{}) {
				branch, next = "", ""
			}
			var attrs []string
			for _, a := range s.Attributes {
				switch a.Key {
				case "server.address", "server.port", "network.peer.address", "network.peer.port", "client.address",
					"network.protocol.version", "user_agent.original", "db.connection_string", "url.scheme":
					continue
				}
				attrs = append(attrs, string(a.Key)+"="+a.Value.String())
			}
			status := ""
			if s.Status.Code == codes.Error {
				status = " ERROR"
			}
			fmt.Fprintf(&b, "%s%s [%s %s%s] %s\n", indent+branch, s.Name, s.SpanKind,
				s.EndTime.Sub(s.StartTime).Round(10*time.Microsecond), status, strings.Join(attrs, " "))
			draw(s.SpanContext.SpanID(), indent+next)
		}
	}
	draw(trace.SpanID{}, "")
	return b.String()
}
