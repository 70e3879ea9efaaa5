package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/fleetbus"
)

// A breaker of scope fleet counts its calls as any other, and every
// fleetTick the gateway adds the counts to the fleet's window in Redis and
// reads back what the fleet decided, in one round trip per breaker: the
// request path makes none, except a trial's admission and its report.
// When Redis does not answer, the breaker decides on this instance's own
// window (which counted all along) until a tick gets through again.

// fleetTick is how often a fleet breaker's counts go to Redis and the
// fleet's state comes back: the delay before every instance follows an
// opening, and the lag of the fleet's window behind the calls.
const fleetTick = 200 * time.Millisecond

var errNoWindows = errors.New("the store keeps no breaker windows")

// fleetLink ties a route's breaker to the fleet's: it is the breaker's
// breaker.Fleet, and ticks.
type fleetLink struct {
	g     *Gateway
	route string
	rule  fleetbus.BreakerRule
	b     *breaker.Breaker // set once, right after breaker.New
	alone alone            // deciding on this instance's window; gateway_breaker_fleet_fallback
}

func newFleetLink(g *Gateway, route string, c config.Breaker, trialTimeout time.Duration) *fleetLink {
	l := &fleetLink{
		g: g, route: route,
		rule: fleetbus.BreakerRule{
			Window: c.Window, MinCalls: c.MinCalls, FailureRate: c.FailureRate, SlowCallRate: c.SlowCallRate,
			OpenFor: c.OpenFor, HalfOpenCalls: c.HalfOpenCalls, TrialTimeout: trialTimeout,
		},
		alone: newAlone(g.metrics.breakerFallback.WithLabelValues(route)),
	}
	return l
}

// windows is the fleet bus that keeps the fleet breakers' windows: the
// running store's.
func (l *fleetLink) windows() (*fleetbus.Bus, error) {
	if b := l.g.gen.Load().bus; b != nil {
		return b, nil
	}
	return nil, errNoWindows
}

// Trial implements breaker.Fleet.
func (l *fleetLink) Trial(now time.Time) (uint64, bool) {
	w, err := l.windows()
	if err != nil {
		l.fallBack(err)
		return 0, false
	}
	ok, st, err := w.BreakerTrial(context.Background(), l.route, l.rule)
	if err != nil {
		l.fallBack(err)
		return 0, false
	}
	l.follow(st)
	return st.Episode, ok
}

// TrialDone implements breaker.Fleet. A report Redis does not take is
// lost: the fleet counts the trial failed after its timeout.
func (l *fleetLink) TrialDone(id uint64, o breaker.Outcome, slow bool, end time.Time) {
	w, err := l.windows()
	if err != nil {
		l.fallBack(err)
		return
	}
	st, err := w.BreakerTrialDone(context.Background(), l.route, l.rule, id, o.Failed, slow, o.Cancelled)
	if err != nil {
		l.fallBack(err)
		return
	}
	l.follow(st)
}

// tick adds the breaker's counts to the fleet's window and follows the
// fleet.
func (l *fleetLink) tick() {
	w, err := l.windows()
	if err != nil {
		l.fallBack(err)
		return
	}
	c, ep := l.b.TakeCounts()
	st, err := w.BreakerTick(context.Background(), l.route, l.rule, ep, c.Calls, c.Failures, c.Slow)
	if err != nil {
		l.fallBack(err)
		return
	}
	l.follow(st)
}

// reset closes the fleet's breaker with an empty window: an operator
// gave the fleet's breakers back to their window.
func (l *fleetLink) reset() error {
	w, err := l.windows()
	if err != nil {
		return err
	}
	st, err := w.BreakerReset(context.Background(), l.route, l.rule)
	if err != nil {
		return err
	}
	l.follow(st)
	return nil
}

// follow gives the fleet's state to the breaker, its times moved from the
// Redis clock to this instance's.
func (l *fleetLink) follow(st fleetbus.BreakerState) {
	now := l.g.now()
	l.back(now)
	l.b.Follow(breaker.FleetState{
		State:    breaker.State(st.State),
		Episode:  st.Episode,
		OpenedAt: now.Add(st.OpenedAt.Sub(st.Now)),
		Window:   breaker.Counts{Calls: st.Calls, Failures: st.Failures, Slow: st.Slow},
	}, now)
}

func (l *fleetLink) fallBack(err error) {
	if l.alone.set(err) {
		l.g.log.Warn("circuit breaker decides on this instance's window: the fleet's is out of reach",
			"route", l.route, "error", err.Error())
	}
	l.b.Share(false, l.g.now())
}

func (l *fleetLink) back(now time.Time) {
	if l.alone.clear() {
		l.g.log.Info("circuit breaker follows the fleet's window again", "route", l.route)
	}
	l.b.Share(true, now)
}

// status is what /readyz says of the link: "" while it follows the fleet.
func (l *fleetLink) status() string {
	cause, on := l.alone.why()
	if !on {
		return ""
	}
	return "breaker of route " + l.route + " decides on this instance's window, the fleet's is out of reach: " + cause
}

// tickFleetBreakers ticks the fleet breakers of the running configuration
// until the gateway closes.
func (g *Gateway) tickFleetBreakers() {
	t := time.NewTicker(fleetTick)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		for _, r := range g.gen.Load().routes {
			if r.breaker != nil && r.breaker.fleet != nil {
				r.breaker.fleet.tick()
			}
		}
	}
}

// resetFleetBreaker closes the fleet's breaker of route with an empty
// window, for a force back to auto across the fleet: the instances then
// follow a fleet that starts afresh, as a breaker forced to auto does,
// rather than the opening the force had overridden.
func (g *Gateway) resetFleetBreaker(route string) error {
	rb := g.routeBreaker(route)
	if rb == nil || rb.fleet == nil {
		return nil
	}
	return rb.fleet.reset()
}

// fleetStatus lists what the fleet breakers falling back say, for
// Degraded.
func (gen *generation) fleetStatus() []string {
	var ds []string
	for _, r := range gen.routes {
		if r.breaker != nil && r.breaker.fleet != nil {
			if s := r.breaker.fleet.status(); s != "" {
				ds = append(ds, s)
			}
		}
	}
	return ds
}
