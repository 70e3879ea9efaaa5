package admin

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/gateway"
)

// routeViewer is a backend that lists its routes; the gateway's tests
// read real targets' health.
type routeViewer struct {
	*fakeBackend
	routes []gateway.RouteStatus
}

func (v *routeViewer) Routes() []gateway.RouteStatus { return v.routes }

func TestRoutesEndpoint(t *testing.T) {
	b := &routeViewer{fakeBackend: &fakeBackend{}}
	b.cfg.Store(parseConfig(t, "tok"))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	until := at.Add(5 * time.Second)
	inFlight := int64(3)
	b.routes = []gateway.RouteStatus{{Route: "api", Balance: "least_request", Checks: true, Targets: []gateway.TargetStatus{
		{Target: "http://10.0.0.1:9000", State: "healthy", Since: at, InFlight: &inFlight,
			LastCheck: &gateway.CheckStatus{At: at, OK: true, Result: "200", Passed: 4}},
		{Target: "http://10.0.0.2:9000", State: "ejected", Since: at, ConsecutiveFailures: 0, Ejections: 1, EjectedUntil: &until,
			LastCheck: &gateway.CheckStatus{At: at, OK: false, Result: "connection refused", Failed: 1}},
	}}}
	h := NewHandler(b, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if r := do(t, h, "GET", "/admin/routes"); r.code != 401 {
		t.Fatalf("without the token: %d %s", r.code, r.body)
	}
	auth := []string{"Authorization", "Bearer tok"}
	wantJSON(t, do(t, h, "GET", "/admin/routes", auth...), 200, `{"routes":[{"route":"api","balance":"least_request","health_checks":true,"targets":[
		{"target":"http://10.0.0.1:9000","state":"healthy","since":"2026-01-02T03:04:05Z","in_flight":3,"consecutive_failures":0,"consecutive_5xx":0,"ejections":0,
		 "last_check":{"at":"2026-01-02T03:04:05Z","ok":true,"result":"200","passed":4,"failed":0}},
		{"target":"http://10.0.0.2:9000","state":"ejected","since":"2026-01-02T03:04:05Z","consecutive_failures":0,"consecutive_5xx":0,"ejections":1,"ejected_until":"2026-01-02T03:04:10Z",
		 "last_check":{"at":"2026-01-02T03:04:05Z","ok":false,"result":"connection refused","passed":0,"failed":1}}]}]}`)
	if r := do(t, h, "POST", "/admin/routes", auth...); r.code != 405 {
		t.Fatalf("POST: %d", r.code)
	}
}

func TestRoutesEndpointWithoutRoutes(t *testing.T) {
	_, h := newTest(t, "")
	if r := do(t, h, "GET", "/admin/routes"); r.code != 501 || !strings.Contains(r.body, `"not_implemented"`) {
		t.Fatalf("%d %s", r.code, r.body)
	}
}

// protectViewer is a backend with protected routes.
type protectViewer struct {
	*fakeBackend
	ps []gateway.ProtectStatus
}

func (v *protectViewer) Protected() []gateway.ProtectStatus { return v.ps }

func TestProtectEndpoint(t *testing.T) {
	b := &protectViewer{fakeBackend: &fakeBackend{}, ps: []gateway.ProtectStatus{
		{Route: "coupon", Limit: 180, Baseline: 0.2, Admitting: 180, Min: 1},
	}}
	b.cfg.Store(parseConfig(t, "tok"))
	h := NewHandler(b, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if r := do(t, h, "GET", "/admin/protect"); r.code != 401 {
		t.Fatalf("without the token: %d %s", r.code, r.body)
	}
	wantJSON(t, do(t, h, "GET", "/admin/protect", "Authorization", "Bearer tok"), 200,
		`{"routes":[{"route":"coupon","limit":180,"baseline":0.2,"admitting":180,"min":1}]}`)
	_, plain := newTest(t, "")
	if r := do(t, plain, "GET", "/admin/protect"); r.code != 501 {
		t.Fatalf("a backend without protection: %d %s", r.code, r.body)
	}
}
