package main

import (
	"net/http"
	"strings"
	"testing"
)

// GET /admin/routes of a running serve: the route's target, its checks'
// last result, and the metric beside it.
func TestServeAdminRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	f.write(strings.Replace(baseConfig, `upstream: {targets: ["{{UPSTREAM}}"]}`,
		`upstream: {targets: ["{{UPSTREAM}}"], health: {path: /healthz, interval: 300ms, timeout: 250ms, unhealthy_after: 1}}`, 1))
	p := f.serve()
	var target map[string]any
	p.waitFor("the target to fail its check", func() bool {
		r := p.admin("GET", "/admin/routes")
		if r.code != 200 {
			t.Fatalf("GET /admin/routes: %d %s", r.code, r.body)
		}
		routes, _ := r.json(t)["routes"].([]any)
		if len(routes) != 1 {
			t.Fatalf("routes %s", r.body)
		}
		target = routes[0].(map[string]any)["targets"].([]any)[0].(map[string]any)
		return target["state"] == "unhealthy"
	})
	if lc, _ := target["last_check"].(map[string]any); target["target"] != f.upstream.URL || lc["result"] != "503" {
		t.Errorf("target %v", target)
	}
	want := `gateway_upstream_healthy{route="api",target="` + f.upstream.URL + `"} 0`
	if r := request(t, "GET", "http://"+f.admin+"/metrics"); !strings.Contains(r.body, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	p.waitLog(`"msg":"upstream target failed its health checks","route":"api"`)
}
