package config

import (
	"net/url"
	"strconv"
)

// The tracing block.

func (v *validator) tracing(t *Tracing) {
	if !(t.Sample >= 0 && t.Sample <= 1) && !v.failed("tracing.sample") {
		v.errorf("tracing.sample", "%v is outside [0,1]", t.Sample)
	}
	if t.OTLP == "" && t.Sample != defaultTraceSample && !v.failed("tracing.sample") {
		v.warnf("tracing.sample", "set, but tracing.otlp is empty: nothing is traced")
	}
	if t.OTLP == "" || v.failed("tracing.otlp") {
		return
	}
	shown := redactURL(t.OTLP)
	u, err := url.Parse(t.OTLP)
	if err != nil || u.Scheme == "" {
		v.errorf("tracing.otlp", "%q is not a URL (grpc://HOST:PORT, http://HOST:PORT/v1/traces, https://...)", shown)
		return
	}
	switch u.Scheme {
	case "grpc", "http", "https":
	default:
		v.errorf("tracing.otlp", "%q: unknown scheme %q (grpc, http, https)", shown, u.Scheme)
		return
	}
	switch {
	case u.Opaque != "" || u.Hostname() == "":
		v.errorf("tracing.otlp", "%q has no host", shown)
	case u.User != nil:
		v.errorf("tracing.otlp", "%q has a user; an OTLP endpoint takes none", shown)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		v.errorf("tracing.otlp", "%q has a query or fragment; an OTLP endpoint takes none", shown)
	case u.Scheme == "grpc" && u.Port() == "":
		v.errorf("tracing.otlp", "%q has no port (grpc://HOST:PORT; OTLP's is 4317)", shown)
	case u.Scheme == "grpc" && u.Path != "" && u.Path != "/":
		v.errorf("tracing.otlp", "%q has a path; an OTLP gRPC endpoint takes none", shown)
	case u.Port() != "" && !validPort(u.Port()):
		v.errorf("tracing.otlp", "%q: port %q is not in 1-65535", shown, u.Port())
	}
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535
}

// defaultTraceSample is tracing.sample's default.
const defaultTraceSample = 0.01
