package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
type TargetStatus struct {
	Target string `json:"target"`
	// State is healthy, unhealthy (it failed its active checks) or
	// ejected (its exchanges failed; EjectedUntil says until when).
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// InFlight counts its requests in flight, with balance least_request.
	InFlight *int64 `json:"in_flight,omitempty"`

	// ConsecutiveFailures and Consecutive5xx are the exchanges in a row
	// that got no answer, and that got a 5xx.
	ConsecutiveFailures int `json:"consecutive_failures"`
	Consecutive5xx      int `json:"consecutive_5xx"`
	// Ejections counts the ejections in a row, each twice as long as the
	// one before.
	Ejections    int        `json:"ejections"`
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`

	// LastCheck is the last active check; nil before the first, and
	// without active checks.
	LastCheck *CheckStatus `json:"last_check,omitempty"`
}

// CheckStatus is a target's last active check.
type CheckStatus struct {
	At     time.Time `json:"at"`
	OK     bool      `json:"ok"`
	Result string    `json:"result"` // the status, or what failed
	// Passed and Failed are the checks in a row that passed, or failed,
	// up to this one.
	Passed int `json:"passed"`
	Failed int `json:"failed"`
}

// Routes lists the running routes with their targets' health.
func (g *Gateway) Routes() []RouteStatus {
	now := g.now()
	gen := g.gen.Load()
	out := []RouteStatus{}
	for i, r := range gen.routes {
		u := r.upstream
		// The routes are built from the config's, one for one.
		rs := RouteStatus{Route: r.id, Balance: string(gen.cfg.Routes[i].Upstream.Balance), Checks: u.health.Interval > 0}
		for _, t := range u.state {
			rs.Targets = append(rs.Targets, t.status(now, u.least))
		}
		out = append(out, rs)
	}
	return out
}

func (t *targetState) status(now time.Time, least bool) TargetStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := TargetStatus{
		Target: t.name, State: t.state(now), Since: t.since,
		ConsecutiveFailures: int(t.fails.Load()), Consecutive5xx: int(t.fives.Load()),
		Ejections: t.ejections,
	}
	if least {
		n := t.inflight.Load()
		s.InFlight = &n
	}
	if e := t.ejected.Load(); e > now.UnixNano() {
		until := time.Unix(0, e)
		s.EjectedUntil = &until
	}
	if !t.lastCheck.IsZero() {
		s.LastCheck = &CheckStatus{At: t.lastCheck, OK: t.lastOK, Result: t.lastWhat, Passed: t.okRun, Failed: t.failRun}
	}
	return s
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
		seen := map[*targetState]bool{}
		for _, t := range r.upstream.state {
			if seen[t] {
				continue // a target listed twice is one series
			}
			seen[t] = true
			v := 0.0
			if t.state(now) == stateHealthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, v, r.id, t.name)
		}
	}
}
