package config

import (
	"strings"
	"testing"
)

func TestTracingSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want TracingConfig
		err  string
	}{
		{name: "nothing set: off"},
		{name: "an endpoint turns it on, over HTTP by default",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			want: TracingConfig{Enabled: true, Protocol: OTLPHTTP, Endpoint: "http://collector:4318", Sampler: "parentbased_always_on", Ratio: 1}},
		{name: "a traces endpoint wins",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/v1/traces"},
			want: TracingConfig{Enabled: true, Protocol: OTLPHTTP, Endpoint: "http://b:4318/v1/traces", Sampler: "parentbased_always_on", Ratio: 1}},
		{name: "otlp exporter named, gRPC, ratio sampler",
			env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
			want: TracingConfig{Enabled: true, Protocol: OTLPGRPC, Sampler: "parentbased_traceidratio", Ratio: 0.25}},
		{name: "the traces protocol wins",
			env:  map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			want: TracingConfig{Enabled: true, Protocol: OTLPHTTP, Sampler: "parentbased_always_on", Ratio: 1}},
		{name: "SDK disabled", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: "OTEL_TRACES_EXPORTER"},
		{name: "http/json is not spoken", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			err: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "unknown sampler", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "sometimes"},
			err: "OTEL_TRACES_SAMPLER"},
		{name: "bad ratio", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
			err: "OTEL_TRACES_SAMPLER_ARG"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Tracing; got != tc.want {
				t.Fatalf("got %+v; want %+v", got, tc.want)
			}
		})
	}
}
