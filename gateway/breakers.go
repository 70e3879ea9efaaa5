package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// routeBreaker is a route's circuit breaker and what it judges by.
type routeBreaker struct {
	b        *breaker.Breaker
	settings config.Breaker
	timeout  time.Duration // the upstream timeout: a trial that never reports fails after it
	failing  [600]bool     // failure_statuses
	fleet    *fleetLink    // scope fleet; nil: instance
}

// failed judges an exchange: a connection error or timeout, or a status
// of failure_statuses; for a gRPC call, also the HTTP equivalent of a
// grpc-status that says the upstream failed (grpcFailure).
func (rb *routeBreaker) failed(o *upstream.Result) bool {
	return o.Failed() || o.Status >= 0 && o.Status < len(rb.failing) && rb.failing[o.Status] ||
		o.GRPCFailed > 0 && rb.failing[o.GRPCFailed]
}

// newBreaker makes the breaker of a route; old, if not nil, is the one a
// reload replaces, whose state the new one resumes.
func (g *Gateway) newBreaker(rc *config.Route, old *routeBreaker) (*routeBreaker, error) {
	c := rc.Breaker
	route := rc.ID
	state := g.metrics.breakerState.WithLabelValues(route)
	var fleet *fleetLink
	var shared breaker.Fleet // nil unless fleet is not
	if c.Scope == config.BreakerFleet {
		fleet = newFleetLink(g, route, c, rc.Upstream.Timeout)
		shared = fleet
	} else {
		g.metrics.breakerFallback.DeleteLabelValues(route)
	}
	b, err := breaker.New(breaker.Settings{
		Fleet:  shared,
		Window: c.Window, MinCalls: c.MinCalls, FailureRate: c.FailureRate,
		SlowCallDuration: c.SlowCallDuration, SlowCallRate: c.SlowCallRate,
		OpenFor: c.OpenFor, HalfOpenCalls: c.HalfOpenCalls, TrialTimeout: rc.Upstream.Timeout,
		OnTransition: func(from, to breaker.State, at time.Time) {
			state.Set(float64(to))
			if to == breaker.Closed && from != breaker.Closed {
				g.warmUp(route)
			}
			g.metrics.breakerChanges.WithLabelValues(route, from.String(), to.String()).Inc()
			g.log.Warn("circuit breaker "+to.String(), "route", route, "from", from.String(), "to", to.String())
		},
	})
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", route, err)
	}
	if old != nil {
		// New settings: the new breaker carries on from the old one's
		// state, so that lengthening open_for during an outage does not
		// close the breaker in front of the failing upstream.
		b.Resume(old.b, g.now())
	}
	if fleet != nil {
		fleet.b = b
	}
	state.Set(float64(b.State()))
	rb := &routeBreaker{b: b, settings: c, timeout: rc.Upstream.Timeout, fleet: fleet}
	for _, s := range c.FailureStatuses {
		if s >= 0 && s < len(rb.failing) {
			rb.failing[s] = true
		}
	}
	return rb, nil
}

func sameBreaker(a, b config.Breaker) bool {
	return a.Enabled == b.Enabled && a.Window == b.Window && a.MinCalls == b.MinCalls &&
		a.FailureRate == b.FailureRate && a.SlowCallDuration == b.SlowCallDuration &&
		a.SlowCallRate == b.SlowCallRate && a.OpenFor == b.OpenFor &&
		a.HalfOpenCalls == b.HalfOpenCalls && slices.Equal(a.FailureStatuses, b.FailureStatuses) &&
		a.Scope == b.Scope
}

// refuse answers a request the open breaker turns away: the route's
// fallback, with Retry-After until the next trial when there is one, and
// with fallback.record, "recorded" saying whether its event is durable.
func (g *Gateway) refuse(w http.ResponseWriter, x *exchange, err error) outcome {
	var oe *breaker.OpenError
	if errors.As(err, &oe) && !oe.Forced && oe.RetryAfter > 0 {
		answer.SetRetryAfter(w.Header(), oe.RetryAfter)
	}
	x.route.metrics.countRefused()
	fallback := x.route.fallback
	if !x.route.record {
		x.reply(w, fallback, "")
		return answered(fallback.Status, resultBreaker)
	}
	x.resolveClient()
	extra := `,"recorded":false`
	if g.recordRefused(x, events.TypeBreakerRejected) {
		extra = `,"recorded":true`
	}
	x.reply(w, fallback, extra)
	return answered(fallback.Status, resultBreaker)
}

// BreakerStatus is one route's breaker as the admin API shows it.
type BreakerStatus struct {
	Route      string  `json:"route"`
	State      string  `json:"state"`
	Value      int     `json:"value"` // 0 closed, 1 open, 2 half-open, as the metric
	Forced     bool    `json:"forced"`
	Calls      int64   `json:"calls"`
	Failures   int64   `json:"failures"`
	Slow       int64   `json:"slow"`
	RetryAfter float64 `json:"retry_after,omitempty"` // seconds until the next trial
	TTL        float64 `json:"ttl,omitempty"`         // seconds until a force with a ttl ends

	// A breaker of scope fleet: Calls, Failures and Slow are the fleet's,
	// unless FleetFallback says the breaker decides on this instance's
	// window (Redis does not answer).
	Scope         string `json:"scope,omitempty"`
	FleetFallback bool   `json:"fleet_fallback,omitempty"`
}

// Breakers lists the breakers of the running configuration's routes.
func (g *Gateway) Breakers() []BreakerStatus {
	now := g.now()
	var out []BreakerStatus
	for _, r := range g.gen.Load().routes {
		if r.breaker == nil {
			continue
		}
		s := r.breaker.b.Snapshot(now)
		bs := BreakerStatus{Route: r.id, State: s.State.String(), Value: int(s.State), Forced: s.Forced,
			Calls: s.Calls, Failures: s.Failures, Slow: s.Slow}
		if !s.NextTrial.IsZero() && s.NextTrial.After(now) {
			bs.RetryAfter = milliRound(s.NextTrial.Sub(now))
		}
		if s.Forced {
			bs.TTL = milliRound(g.forces.left(r.id))
		}
		if f := r.breaker.fleet; f != nil {
			bs.Scope, bs.FleetFallback = string(config.BreakerFleet), f.status() != ""
		}
		out = append(out, bs)
	}
	return out
}

// milliRound is d in seconds, to the millisecond.
func milliRound(d time.Duration) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(d.Seconds(), 'f', 3, 64), 64)
	return f
}

// ErrNoBreaker is returned for a route without a breaker.
var ErrNoBreaker = errors.New("no such route with a breaker")

// MaxForceTTL bounds the ttl of a force: a breaker held open or closed
// for longer than a week is a setting, not an intervention, and belongs in
// the config (a route without a breaker, or one with another fallback).
const MaxForceTTL = 7 * 24 * time.Hour

// ForceBreaker forces a route's breaker open or closed, or gives it back
// to its window ("auto"); states are read in any case ("OPEN" as "open").
// A force with a ttl above zero, at most MaxForceTTL, gives the breaker
// back to its window after ttl, unless another force came first; a force
// stays until the next one otherwise. Auto takes no ttl.
//
// A force of this instance's own takes the place of a fleet force: the
// fleet's set of forces (fleetforces.go) no longer steers the breaker
// until the fleet forces it again.
func (g *Gateway) ForceBreaker(route, mode string, ttl time.Duration) error {
	if err := g.forceBreaker(route, mode, ttl); err != nil {
		return err
	}
	g.keptForces.unmark(route)
	return nil
}

// forceBreaker is ForceBreaker, for a force of the fleet's.
func (g *Gateway) forceBreaker(route, mode string, ttl time.Duration) error {
	m, err := parseForce(mode, ttl)
	if err != nil {
		return err
	}
	for _, r := range g.gen.Load().routes {
		if r.id == route && r.breaker != nil {
			g.forces.mu.Lock()
			defer g.forces.mu.Unlock()
			if f := g.forces.timers[route]; f != nil {
				f.timer.Stop()
				delete(g.forces.timers, route)
			}
			r.breaker.b.Force(m, g.now())
			if ttl > 0 {
				f := &forceTimer{until: time.Now().Add(ttl)}
				f.timer = time.AfterFunc(ttl, func() {
					g.forces.mu.Lock()
					mine := g.forces.timers[route] == f
					if mine {
						delete(g.forces.timers, route)
					}
					g.forces.mu.Unlock()
					if mine {
						g.forceBreaker(route, "auto", 0)
					}
				})
				if g.forces.timers == nil {
					g.forces.timers = map[string]*forceTimer{}
				}
				g.forces.timers[route] = f
			}
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrNoBreaker, route)
}

// parseForce reads ForceBreaker's mode and checks its ttl.
func parseForce(mode string, ttl time.Duration) (breaker.Mode, error) {
	var m breaker.Mode
	switch strings.ToLower(mode) {
	case "open":
		m = breaker.ForceOpen
	case "closed":
		m = breaker.ForceClosed
	case "auto":
		m = breaker.Auto
	default:
		return m, fmt.Errorf("state %q: want open, closed or auto", mode)
	}
	switch {
	case m == breaker.Auto && ttl != 0:
		return m, fmt.Errorf("ttl %v: auto gives the breaker back to its window at once and takes no ttl; a ttl is for open or closed", ttl)
	case ttl < 0:
		return m, fmt.Errorf("ttl %v: want a positive duration", ttl)
	case ttl > MaxForceTTL:
		return m, fmt.Errorf("ttl %v is too long: at most %.0fh (7 days)", ttl, MaxForceTTL.Hours())
	}
	return m, nil
}

// routeBreaker is the breaker of the running route id; nil: none.
func (g *Gateway) routeBreaker(id string) *routeBreaker {
	for _, r := range g.gen.Load().routes {
		if r.id == id && r.breaker != nil {
			return r.breaker
		}
	}
	return nil
}

// left is how long the force of route has to run, or 0 for none that
// ends by itself.
func (f *forces) left(route string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.timers[route]; t != nil {
		// On the wall clock, as the timer runs.
		return max(time.Until(t.until), 0)
	}
	return 0
}

// forces are the timers that end forces given a ttl, by route.
type forces struct {
	mu     sync.Mutex
	timers map[string]*forceTimer
}

// forceTimer ends a force at until.
type forceTimer struct {
	timer *time.Timer
	until time.Time
}
