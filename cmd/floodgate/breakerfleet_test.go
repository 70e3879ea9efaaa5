package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

const fleetBreakerConfig = `
server: {listen: "{{LISTEN}}"}
admin: {listen: "{{ADMIN}}", token: {{TOKEN}}}
store: {type: redis, redis: {addrs: ["{{REDIS}}"], timeout: 200ms}}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true, scope: fleet, min_calls: 12, open_for: 1h}
`

// Three floodgate serve processes share a fleet breaker: failures spread
// over them, too few on any one to decide alone, open it on all three.
// With Redis stopped, each says in /readyz and /metrics that it decides
// on its own window, and stops saying so when Redis is back.
func TestFleetBreakerAcrossProcesses(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	failing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	var ps []*proc
	for range 3 {
		f := newFixture(t, failing)
		f.write(strings.ReplaceAll(fleetBreakerConfig, "{{REDIS}}", srv.Addr()))
		ps = append(ps, f.serve())
	}
	state := func(p *proc) map[string]any {
		bs := p.admin("GET", "/admin/breakers").json(t)["breakers"].([]any)
		return bs[0].(map[string]any)
	}
	// min_calls failures reach the upstream, whatever the timing: the
	// fleet's window cannot open the breaker before it holds them. The
	// calls after may meet it open, once the instances have synced.
	for i := range 15 {
		r := ps[i%3].get("/coupon")
		if r.code != http.StatusServiceUnavailable || i < 12 && strings.Contains(r.body, "service_unavailable") {
			t.Fatalf("call %d: %d %s, want the upstream's 503 while the fleet is closed", i, r.code, r.body)
		}
	}
	for _, p := range ps {
		p.waitFor("the breaker to open with the fleet's", func() bool { return state(p)["state"] == "OPEN" })
		if s := state(p); s["scope"] != "fleet" || s["fleet_fallback"] != nil {
			t.Fatalf("breaker %v", s)
		}
		if r := p.get("/coupon"); r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "service_unavailable") {
			t.Fatalf("open: %d %s, want the fallback", r.code, r.body)
		}
	}

	srv.Stop()
	for _, p := range ps {
		p.waitFor("/readyz to say the breaker decides alone", func() bool {
			r := p.admin("GET", "/readyz")
			return r.code == http.StatusOK && strings.Contains(r.body, "breaker of route coupon decides on this instance's window")
		})
		p.waitFor("the fallback gauge", func() bool {
			return strings.Contains(p.admin("GET", "/metrics").body, `gateway_breaker_fleet_fallback{route="coupon"} 1`)
		})
		if s := state(p); s["fleet_fallback"] != true {
			t.Fatalf("breaker %v, want fleet_fallback", s)
		}
	}
	srv.Restart()
	for _, p := range ps {
		p.waitFor("/readyz to stop saying so", func() bool {
			r := p.admin("GET", "/readyz")
			return r.code == http.StatusOK && !strings.Contains(r.body, "breaker of route coupon")
		})
		if !strings.Contains(p.admin("GET", "/metrics").body, `gateway_breaker_fleet_fallback{route="coupon"} 0`) {
			t.Fatal("the fallback gauge is not 0 with Redis back")
		}
	}
}
