package config

import (
	"strings"
	"testing"
	"time"
)

func TestHealthSettings(t *testing.T) {
	c := mustParse(t, `
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://127.0.0.1:9000"]
      balance: least_request
      health: {path: "/healthz?deep=1", interval: 5s}
      eject: {consecutive_5xx: 3, base_time: 1s}
`)
	u := c.Routes[0].Upstream
	if u.Balance != BalanceLeastRequest {
		t.Errorf("balance %q", u.Balance)
	}
	if want := (Health{Path: "/healthz?deep=1", Interval: 5 * time.Second, Timeout: time.Second, HealthyAfter: 2, UnhealthyAfter: 3}); u.Health != want {
		t.Errorf("health %+v, want %+v", u.Health, want)
	}
	if want := (Eject{ConsecutiveFailures: 5, Consecutive5xx: 3, BaseTime: time.Second, MaxTime: time.Minute}); u.Eject != want {
		t.Errorf("eject %+v, want %+v", u.Eject, want)
	}

	// A timeout not given is 1s, or half an interval shorter than 2s;
	// one given is kept.
	for _, tc := range []struct {
		health string
		want   time.Duration
	}{
		{`{path: /healthz, interval: 1s}`, 500 * time.Millisecond},
		{`{path: /healthz, interval: 300ms}`, 150 * time.Millisecond},
		{`{path: /healthz, interval: 2s}`, time.Second},
		{`{path: /healthz, interval: 1s, timeout: 900ms}`, 900 * time.Millisecond},
		{`{path: /healthz, interval: 10s, timeout: 3s}`, 3 * time.Second},
	} {
		c := mustParse(t, `
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://127.0.0.1:9000"]
      health: `+tc.health+`
`)
		if got := c.Routes[0].Upstream.Health.Timeout; got != tc.want {
			t.Errorf("health %s: timeout %v, want %v", tc.health, got, tc.want)
		}
	}

	// Ejection off altogether needs no times.
	mustParse(t, `
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://127.0.0.1:9000"]
      eject: {consecutive_failures: 0, base_time: 0s, max_time: 0s}
`)

	// A path without an interval checks nothing: a warning, not an error.
	c = mustParse(t, `
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://127.0.0.1:9000"]
      health: {path: /healthz}
`)
	if w := c.Warnings.Error(); !strings.Contains(w, "test.yaml:7: routes[0].upstream.health.path: no check is made: health.interval is 0s") {
		t.Errorf("warnings: %s", w)
	}
}

func TestHealthErrors(t *testing.T) {
	for _, tt := range []struct{ upstream, want string }{
		{`balance: random`, `test.yaml:7: routes[0].upstream.balance: unknown balance "random" (round_robin, least_request)`},
		{`health: {interval: 5s}`, `test.yaml:7: routes[0].upstream.health: active checks (health.interval 5s) need the path to ask for, such as /healthz`},
		{`health: {interval: 5s, path: healthz}`, `test.yaml:7: routes[0].upstream.health.path: "healthz" does not start with /`},
		{`health: {interval: 5s, path: "/a b"}`, `test.yaml:7: routes[0].upstream.health.path: "/a b": a check's path has no fragment or white space`},
		{`health: {interval: -1s, path: /h}`, `test.yaml:7: routes[0].upstream.health.interval: -1s: want 0 (no active checks) or a positive duration such as 5s`},
		{`health: {interval: 1s, path: /h, timeout: 1s}`, `test.yaml:7: routes[0].upstream.health.timeout: timeout 1s must be below interval 1s: a check must end before the next begins`},
		{`health: {interval: 5s, path: /h, timeout: 0s}`, `test.yaml:7: routes[0].upstream.health.timeout: 0s must be positive`},
		{`health: {interval: 5s, path: /h, healthy_after: 0}`, `test.yaml:7: routes[0].upstream.health.healthy_after: 0: want 1 or more`},
		{`health: {interval: 5s, path: /h, unhealthy_after: -2}`, `test.yaml:7: routes[0].upstream.health.unhealthy_after: -2: want 1 or more`},
		{`eject: {consecutive_failures: -1}`, `test.yaml:7: routes[0].upstream.eject.consecutive_failures: -1: want 0 (never) or a count of 1 or more`},
		{`eject: {consecutive_5xx: -1}`, `test.yaml:7: routes[0].upstream.eject.consecutive_5xx: -1: want 0 (never) or a count of 1 or more`},
		{`eject: {base_time: 0s}`, `test.yaml:7: routes[0].upstream.eject.base_time: 0s must be positive`},
		{`eject: {base_time: 2m}`, `test.yaml:7: routes[0].upstream.eject.base_time: max_time 1m0s is below base_time 2m0s`},
		{`eject: {max_time: 1s}`, `test.yaml:7: routes[0].upstream.eject.max_time: max_time 1s is below base_time 5s`},
		{`health: {interval: five}`, `test.yaml:7: routes[0].upstream.health.interval: "five" is not a duration (write it as 250ms, 10s or 1m)`},
	} {
		src := `
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://127.0.0.1:9000"]
      ` + tt.upstream + "\n"
		errs := parseErrors(t, src)
		if len(errs) != 1 || errs[0].Error() != tt.want {
			t.Errorf("%s:\n got %v\nwant %s", tt.upstream, errs, tt.want)
		}
	}
}

// upstream.health.grpc_service, given (even ""), makes the checks gRPC
// ones, on routes of protocol h2c or h2 alone; a GET path on such a route
// is warned about.
func TestHealthGRPC(t *testing.T) {
	for _, tc := range []struct {
		health string
		want   *string
	}{
		{`{grpc_service: "", interval: 5s}`, ptrTo("")},
		{`{grpc_service: orders.v1.Orders, interval: 5s}`, ptrTo("orders.v1.Orders")},
		{`{path: /healthz, interval: 5s}`, nil},
	} {
		c := mustParse(t, `
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://127.0.0.1:9000"]
      protocol: h2c
      health: `+tc.health+`
`)
		got := c.Routes[0].Upstream.Health.GRPCService
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("health %s: grpc_service %v, want %v", tc.health, got, tc.want)
		}
		warned := strings.Contains(c.Warnings.Error(), "test.yaml:8: routes[0].upstream.health.path: the check is an HTTP GET, which a gRPC server answers 415: for gRPC targets give grpc_service instead")
		if warned != (tc.want == nil) {
			t.Errorf("health %s: warnings %v", tc.health, c.Warnings)
		}
	}
	for _, tt := range []struct{ upstream, want string }{
		{`health: {grpc_service: "", interval: 5s}`,
			`test.yaml:7: routes[0].upstream.health.grpc_service: a gRPC check needs upstream.protocol h2c or h2, not http1`},
		{`{protocol: h2c, health: {grpc_service: "", path: /healthz, interval: 5s}}`,
			`test.yaml:5: routes[0].upstream.health.path: give path (a GET) or grpc_service (a gRPC check), not both`},
	} {
		up := "\n      targets: [\"http://127.0.0.1:9000\"]\n      " + tt.upstream
		if strings.HasPrefix(tt.upstream, "{") {
			up = ` {targets: ["http://127.0.0.1:9000"], ` + strings.TrimPrefix(tt.upstream, "{")
		}
		src := `
routes:
  - id: r
    match: {path: /r}
    upstream:` + up + "\n"
		errs := parseErrors(t, src)
		if len(errs) != 1 || errs[0].Error() != tt.want {
			t.Errorf("%s:\n got %v\nwant %s", tt.upstream, errs, tt.want)
		}
	}
	a, b, c := ptrTo(""), ptrTo(""), ptrTo("x")
	if !(Health{GRPCService: a}).Same(Health{GRPCService: b}) || (Health{GRPCService: a}).Same(Health{GRPCService: c}) ||
		(Health{GRPCService: a}).Same(Health{}) || !(Health{Path: "/h"}).Same(Health{Path: "/h"}) {
		t.Error("Health.Same")
	}
}

func ptrTo[T any](v T) *T { return &v }
