package config

import (
	"fmt"
	"strconv"
	"strings"
)

// The OTLP protocols the trace exporter speaks
// (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	OTLPHTTP = "http/protobuf"
	OTLPGRPC = "grpc"
)

// TracingConfig is what the standard OTEL_* variables say about traces.
// Tracing is off unless they ask for it: OTEL_TRACES_EXPORTER=otlp, or an
// OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with no exporter named;
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none keep it off. The
// exporter, the sampler and the resource read the rest of their variables
// (endpoint, headers, timeout, OTEL_SERVICE_NAME, OTEL_BSP_*) themselves,
// from the process environment, as the OpenTelemetry specification says.
type TracingConfig struct {
	Enabled  bool
	Protocol string  // OTLPHTTP or OTLPGRPC
	Endpoint string  // as configured, for the start-up line; "" is the exporter's default
	Sampler  string  // OTEL_TRACES_SAMPLER, checked here (the SDK would only log a bad one)
	Ratio    float64 // OTEL_TRACES_SAMPLER_ARG of a traceidratio sampler (default 1)
}

// describe says where the traces go, for `otpguard config check`.
func (t TracingConfig) describe() string {
	if !t.Enabled {
		return "off"
	}
	return fmt.Sprintf("otlp %s to %s, sampler %s", t.Protocol, t.EndpointLabel(), t.Sampler)
}

// EndpointLabel is Endpoint for a log line: without a password, if it has
// one.
func (t TracingConfig) EndpointLabel() string {
	switch {
	case t.Endpoint == "":
		return "the exporter's default endpoint"
	case strings.Contains(t.Endpoint, "://"):
		return redactURL(t.Endpoint)
	}
	return t.Endpoint
}

// samplers are the OTEL_TRACES_SAMPLER values the Go SDK knows, and
// whether each takes a ratio in OTEL_TRACES_SAMPLER_ARG.
var samplers = map[string]bool{
	"always_on": false, "always_off": false, "traceidratio": true,
	"parentbased_always_on": false, "parentbased_always_off": false, "parentbased_traceidratio": true,
}

// otelEnv is what the OTEL_* variables otpguard reads say, as given
// (settings.go); the exporter, the sampler and the resource read the rest
// themselves.
type otelEnv struct {
	sdkDisabled, exporter    string
	endpoint, tracesEndpoint string
	protocol, tracesProtocol string
	sampler, samplerArg      string
}

// tracing is what the variables mean together (see TracingConfig); it
// refuses what the service could not honour, and checks nothing of a
// tracing that stays off.
func (e otelEnv) tracing() (TracingConfig, error) {
	var t TracingConfig
	if strings.EqualFold(strings.TrimSpace(e.sdkDisabled), "true") {
		return t, nil
	}
	endpoint := or(e.tracesEndpoint, e.endpoint)
	switch exp := strings.TrimSpace(e.exporter); exp {
	case "none":
		return t, nil
	case "":
		if endpoint == "" {
			return t, nil
		}
	case "otlp":
	default:
		return t, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported: want otlp or none", exp)
	}
	t.Enabled, t.Endpoint = true, endpoint
	t.Protocol = or(or(e.tracesProtocol, e.protocol), OTLPHTTP)
	if t.Protocol != OTLPHTTP && t.Protocol != OTLPGRPC {
		return t, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL: %q is not supported: want http/protobuf or grpc", t.Protocol)
	}
	t.Sampler = or(e.sampler, "parentbased_always_on")
	ratio, known := samplers[t.Sampler]
	if !known {
		return t, fmt.Errorf("OTEL_TRACES_SAMPLER: %q is not supported: want always_on, always_off, traceidratio or a parentbased_ one", t.Sampler)
	}
	t.Ratio = 1
	if arg := e.samplerArg; ratio && arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return t, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio between 0 and 1", arg)
		}
		t.Ratio = r
	}
	return t, nil
}
