package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// RouteStatus is one route's targets as GET /admin/routes shows them.
type RouteStatus struct {
	Route   string         `json:"route"`
	Balance string         `json:"balance"`
	Checks  bool           `json:"health_checks"` // upstream.health.interval is set
	Targets []TargetStatus `json:"targets"`
}

// TargetStatus is one target of a route, and what the gateway knows of
// its health.
type TargetStatus = upstream.TargetStatus

// CheckStatus is a target's last active check.
type CheckStatus = upstream.CheckStatus

// Routes lists the running routes with their targets' health.
func (g *Gateway) Routes() []RouteStatus {
	now := g.now()
	gen := g.gen.Load()
	out := []RouteStatus{}
	for i, r := range gen.routes {
		u := r.upstream
		// The routes are built from the config's, one for one.
		rs := RouteStatus{Route: r.id, Balance: string(gen.cfg.Routes[i].Upstream.Balance), Checks: u.Checked()}
		for t := range u.Targets() {
			rs.Targets = append(rs.Targets, t.Status(now, u.Least()))
		}
		out = append(out, rs)
	}
	return out
}

// healthCollector exports gateway_upstream_healthy for the targets of the
// running routes, read as a scrape comes: a route or target a reload
// removes leaves no series behind.
type healthCollector struct{ g *Gateway }

var healthyDesc = prometheus.NewDesc("gateway_upstream_healthy",
	"1 while a route's target is in rotation, 0 while it is out: failed its active checks (upstream.health) or ejected after failed exchanges (upstream.eject).",
	[]string{"route", "target"}, nil)

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- healthyDesc }

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	gen := c.g.gen.Load()
	if gen == nil {
		return
	}
	now := c.g.now()
	for _, r := range gen.routes {
		seen := map[*upstream.Target]bool{}
		for t := range r.upstream.Targets() {
			if seen[t] {
				continue // a target listed twice is one series
			}
			seen[t] = true
			v := 0.0
			if t.State(now) == upstream.StateHealthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, v, r.id, t.Name())
		}
	}
}
