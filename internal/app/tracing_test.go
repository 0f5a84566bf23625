package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/otpguard/otpguard/internal/config"
)

// collector keeps the spans an OTLP exporter sent it.
type collector struct {
	mu    sync.Mutex
	reqs  []*coltracepb.ExportTraceServiceRequest
	proto []string // Content-Type of each HTTP export
}

func (c *collector) add(req *coltracepb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, req)
}

// spans returns every span received with its resource's service.name.
func (c *collector) spans() (out []*tracepb.Span, services []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, req := range c.reqs {
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out, services = append(out, s), append(services, service)
				}
			}
		}
	}
	return out, services
}

// httpCollector is an OTLP/HTTP receiver: POST /v1/traces with a
// protobuf ExportTraceServiceRequest.
func httpCollector(t *testing.T) (*collector, string) {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("collector: %s %s (%v), want POST /v1/traces", r.Method, r.URL.Path, err)
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			t.Errorf("collector: %s body is no ExportTraceServiceRequest: %v", r.Header.Get("Content-Type"), err)
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.proto = append(c.proto, r.Header.Get("Content-Type"))
		c.mu.Unlock()
		c.add(req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

// grpcCollector is an OTLP/gRPC receiver.
type grpcCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	c *collector
}

func (g grpcCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.c.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func startGRPCCollector(t *testing.T) (*collector, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, grpcCollector{c: c})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return c, "http://" + ln.Addr().String()
}

// The exporter is configured from the environment alone, as in
// production: one send is exported, at Close, to a receiver the test runs,
// over OTLP/HTTP and over OTLP/gRPC, under the service name
// OTEL_SERVICE_NAME gives; the request log line carries the trace ID.
func TestTracingExportsOTLP(t *testing.T) {
	for _, protocol := range []string{config.OTLPHTTP, config.OTLPGRPC} {
		t.Run(protocol, func(t *testing.T) {
			var (
				c        *collector
				endpoint string
			)
			if protocol == config.OTLPGRPC {
				c, endpoint = startGRPCCollector(t)
			} else {
				c, endpoint = httpCollector(t)
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_SERVICE_NAME", "otpguard-test")
			t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
			t.Setenv("OTPGUARD_DATA_DIR", t.TempDir())
			cfg, err := config.Load(os.Getenv)
			if err != nil {
				t.Fatal(err)
			}
			var out syncBuffer
			a, err := New(context.Background(), cfg, WithOutput(&out))
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("POST", "/otp/send", strings.NewReader(`{"phone":"+919800000042"}`))
			req.Header.Set("Authorization", "Bearer "+cfg.APIKeys[0])
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			a.Handler().ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				t.Fatalf("send: %d %s", w.Code, w.Body)
			}
			if err := a.Close(); err != nil { // flushes the spans
				t.Fatal(err)
			}

			spans, services := c.spans()
			var server *tracepb.Span
			for i, s := range spans {
				if services[i] != "otpguard-test" {
					t.Errorf("span %q exported for service %q, want otpguard-test", s.Name, services[i])
				}
				if s.Name == "POST /otp/send" && s.Kind == tracepb.Span_SPAN_KIND_SERVER {
					server = s
				}
			}
			if server == nil {
				t.Fatalf("no server span POST /otp/send among %d exported spans", len(spans))
			}
			redisChildren := 0
			for _, s := range spans {
				if bytes.Equal(s.ParentSpanId, server.SpanId) && s.Kind == tracepb.Span_SPAN_KIND_CLIENT {
					redisChildren++
				}
			}
			if redisChildren == 0 {
				t.Errorf("no Redis span under the send among %d exported", len(spans))
			}
			if protocol == config.OTLPHTTP {
				c.mu.Lock()
				if len(c.proto) == 0 || c.proto[0] != "application/x-protobuf" {
					t.Errorf("exported as %v, want application/x-protobuf", c.proto)
				}
				c.mu.Unlock()
			}
			traceID := hex.EncodeToString(server.TraceId)
			if got := requestTraceID(t, out.String(), "/otp/send"); got != traceID {
				t.Errorf("request log line trace_id %q, want the exported %q", got, traceID)
			}
		})
	}
}

// requestTraceID is the trace_id of the request log line for route.
func requestTraceID(t *testing.T, log, route string) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "request" && line["route"] == route {
			id, _ := line["trace_id"].(string)
			return id
		}
	}
	t.Fatalf("no request log line for %s in:\n%s", route, log)
	return ""
}

// Tracing off: no trace_id in the request log line.
func TestTracingOffLogsNoTraceID(t *testing.T) {
	t.Setenv("OTPGUARD_DATA_DIR", t.TempDir())
	cfg, err := config.Load(func(k string) string {
		if k == "OTPGUARD_DATA_DIR" {
			return os.Getenv(k)
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	a, err := New(context.Background(), cfg, WithOutput(&out))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	req := httptest.NewRequest("POST", "/otp/send", strings.NewReader(`{"phone":"+919800000042"}`))
	req.Header.Set("Authorization", "Bearer "+cfg.APIKeys[0])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("send: %d %s", w.Code, w.Body)
	}
	if got := requestTraceID(t, out.String(), "/otp/send"); got != "" {
		t.Errorf("tracing off, yet the request log line has trace_id %q", got)
	}
}
