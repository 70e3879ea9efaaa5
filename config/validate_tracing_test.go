package config

import (
	"strings"
	"testing"
)

func TestTracing(t *testing.T) {
	c := mustParse(t, okRoute)
	if c.Tracing != (Tracing{Sample: 0.01}) {
		t.Errorf("default tracing = %+v, want off at 0.01", c.Tracing)
	}
	for _, otlp := range []string{"grpc://collector:4317", "http://collector:4318/v1/traces", "https://otel.example.com/v1/traces", "http://[::1]:4318"} {
		c := mustParse(t, "tracing:\n  otlp: "+otlp+"\n  sample: 1\n"+okRoute)
		if c.Tracing.OTLP != otlp || c.Tracing.Sample != 1 {
			t.Errorf("tracing = %+v, want %s at 1", c.Tracing, otlp)
		}
	}
	c = mustParse(t, "tracing: {sample: 0}\n"+okRoute)
	if c.Tracing.Sample != 0 || strings.Contains(c.Summary(), "tracing") {
		t.Errorf("sample = %v, summary %q; want 0, and no tracing", c.Tracing.Sample, c.Summary())
	}
	// A sample without an endpoint traces nothing, which check says.
	if len(c.Warnings) != 1 || c.Warnings[0].Error() != "test.yaml:1: tracing.sample: set, but tracing.otlp is empty: nothing is traced" {
		t.Errorf("warnings %v, want one on tracing.sample", c.Warnings)
	}
	if c := mustParse(t, okRoute); len(c.Warnings) != 0 {
		t.Errorf("warnings %v without a tracing block", c.Warnings)
	}
	c = mustParse(t, "tracing: {otlp: \"grpc://collector:4317\", sample: 0.25}\n"+okRoute)
	if got := c.Summary(); !strings.HasSuffix(got, ", tracing grpc://collector:4317 (sample 0.25)") {
		t.Errorf("summary %q, want it to end with the tracing endpoint and sample", got)
	}
}

func TestTracingValidation(t *testing.T) {
	tests := []struct{ name, src string }{
		{"bad scheme", `
tracing:
  otlp: "udp://collector:4317" #want: tracing.otlp: "udp://collector:4317": unknown scheme "udp" (grpc, http, https)
`},
		{"no scheme", `
tracing:
  otlp: "collector:4317" #want: tracing.otlp: "collector:4317": unknown scheme "collector"
`},
		{"missing host", `
tracing:
  otlp: "grpc://:4317" #want: tracing.otlp: "grpc://:4317" has no host
`},
		{"http without host", `
tracing:
  otlp: "http:///v1/traces" #want: tracing.otlp: "http:///v1/traces" has no host
`},
		{"grpc without port", `
tracing:
  otlp: grpc://collector #want: tracing.otlp: "grpc://collector" has no port
`},
		{"grpc with a path", `
tracing:
  otlp: grpc://collector:4317/v1/traces #want: has a path
`},
		{"bare host", `
tracing:
  otlp: "collector" #want: tracing.otlp: "collector" is not a URL
`},
		{"bad port", `
tracing:
  otlp: http://collector:0/v1/traces #want: port "0" is not in 1-65535
`},
		{"user, password hidden", `
tracing:
  otlp: http://u:secret@collector:4318 #want: tracing.otlp: "http://u:***@collector:4318" has a user
`},
		{"query", `
tracing:
  otlp: http://collector:4318/v1/traces?x=1 #want: has a query or fragment
`},
		{"not a URL", `
tracing:
  otlp: "http://collector:4318/%zz" #want: is not a URL
`},
		{"sample above 1", `
tracing:
  sample: 1.5 #want: tracing.sample: 1.5 is outside [0,1]
`},
		{"sample negative", `
tracing:
  otlp: grpc://collector:4317
  sample: -0.1 #want: tracing.sample: -0.1 is outside [0,1]
`},
		{"sample not a number", `
tracing:
  sample: often #want: tracing.sample
`},
		{"unknown key", `
tracing:
  otlp: grpc://collector:4317
  endpoint: grpc://collector:4317 #want: unknown key "endpoint"
`},
		{"not a mapping", `
tracing: grpc://collector:4317 #want: tracing
`},
		{"every error", `
tracing:
  otlp: "ftp://collector" #want: unknown scheme "ftp"
  sample: 2 #want: 2 is outside [0,1]
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.src+okRoute) })
	}
}
