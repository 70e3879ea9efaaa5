package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/protect"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// A route with protect learns how many requests a second its upstream can
// take now and admits no more (package internal/protect). Its protector
// is kept across reloads that leave the route's protect block alone, so
// that a reload does not forget what was learned; one goroutine ticks
// every protector. Its pacing goes by the wall clock, as timers do: it
// measures the upstream's latencies, which the gateway's clock
// (Options.Now) does not.

// routeProtect is a route's protector and what goes with it.
type routeProtect struct {
	p        *protect.Protector
	settings config.Protect
	limit    prometheus.Gauge
	baseline prometheus.Gauge
	refused  prometheus.Counter
	logged   float64 // the limit the last INFO line gave; the ticking goroutine's
}

// protectorFor returns the route's protector, the running one when its
// settings did not change.
func (g *Gateway) protectorFor(gen *generation, rc *config.Route) (*routeProtect, error) {
	pc := *rc.Protect
	pc.Reject = config.Reject{} // the answer is the generation's; what is learned is not
	same := func(rp *routeProtect) bool { return rp.settings == pc }
	return g.pools.protectors.Hold(gen.lease, rc.ID, same, func(*routeProtect, bool) (*routeProtect, error) {
		warm := pc.WarmUp
		if warm == 0 {
			warm = protect.NoWarmUp
		}
		p := protect.New(protect.Settings{Min: pc.Min, Max: pc.Max, Tolerance: pc.Tolerance, WarmUp: warm}, time.Now())
		return &routeProtect{
			p:        p,
			settings: pc,
			limit:    g.metrics.protectLimit.WithLabelValues(rc.ID),
			baseline: g.metrics.protectBaseline.WithLabelValues(rc.ID),
			refused:  g.metrics.protectRefused.WithLabelValues(rc.ID),
			logged:   p.Limit(),
		}, nil
	})
}

// dropProtector takes the series of a route's protection away once no
// generation has it.
func (g *Gateway) dropProtector(route string, replaced bool) {
	if !replaced {
		g.metrics.protectLimit.DeleteLabelValues(route)
		g.metrics.protectBaseline.DeleteLabelValues(route)
		g.metrics.protectRefused.DeleteLabelValues(route)
	}
}

// tickProtectors moves every protector's limit, once an interval.
func (g *Gateway) tickProtectors() {
	t := time.NewTicker(protect.DefaultInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case now := <-t.C:
			g.pools.protectors.Each(func(route string, rp *routeProtect) { g.tickProtector(route, rp, now) })
		}
	}
}

func (g *Gateway) tickProtector(route string, rp *routeProtect, now time.Time) {
	_, step := rp.p.Tick(now)
	limit := rp.p.Limit()
	rp.limit.Set(limit)
	rp.baseline.Set(rp.p.Baseline().Seconds())
	// A change of more than half the limit is a line: the upstream lost
	// (or found) much of its capacity.
	if limit < rp.logged/2 || limit > rp.logged*1.5 {
		what := "rose"
		if step == protect.Cut {
			what = "cut"
		}
		g.log.LogAttrs(context.Background(), slog.LevelInfo, "protect: the upstream's limit "+what,
			slog.String("route", route),
			slog.Float64("limit", limit), slog.Float64("from", rp.logged),
			slog.Float64("baseline", rp.p.Baseline().Seconds()))
		rp.logged = limit
	}
}

// warmUp ramps the admission of route's protection up again, when its
// breaker closed: the upstream is coming back.
func (g *Gateway) warmUp(route string) {
	gen := g.gen.Load()
	if gen == nil {
		return
	}
	for _, r := range gen.routes {
		if r.id == route && r.protect != nil {
			r.protect.p.WarmUp()
		}
	}
}

// admit asks the route's protection for room for x's request; it answers
// the request itself when there is none.
func (g *Gateway) admit(w http.ResponseWriter, x *exchange) (protect.Ticket, outcome, bool) {
	rp := x.route.protect
	tk, ok := rp.p.Gate.Admit(time.Now().UnixNano())
	if ok {
		return tk, outcome{}, true
	}
	rp.refused.Inc()
	// The limit admits a request every 1/limit seconds: a second is long
	// enough for any limit worth having, and short enough to come back
	// as soon as there is room.
	answer.SetRetryAfter(w.Header(), time.Second)
	a := x.route.overloaded
	extra := ""
	if x.route.record {
		x.resolveClient()
		extra = `,"recorded":false`
		if g.recordRefused(x, events.TypeOverloaded) {
			extra = `,"recorded":true`
		}
	}
	x.reply(w, a, extra)
	return tk, answered(a.Status, resultOverloaded), false
}

// ended tells the route's protection how the exchange of tk ended.
func ended(rp *routeProtect, tk protect.Ticket, o *upstream.Result, h http.Header) {
	r, retryAfter := protectResult(o, h)
	rp.p.Gate.End(tk, o.Took, r, retryAfter)
}

// protectResult is what an exchange tells protection: an answer (its
// latency says whether in time), a failure, the upstream's own 429 or 503
// (with its Retry-After, from the answer's fields h), or nothing.
func protectResult(o *upstream.Result, h http.Header) (protect.Result, time.Duration) {
	switch o.End {
	case upstream.Failed, upstream.TimedOut:
		return protect.Failed, 0
	case upstream.Done:
	default:
		// Never sent, the client's doing, or its own deadline: nothing
		// about the upstream.
		return protect.Dropped, 0
	}
	switch s := o.Status; {
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		var ra time.Duration
		if v := h["Retry-After"]; len(v) == 1 {
			if n, err := strconv.Atoi(v[0]); err == nil && n > 0 && n <= 3600 {
				ra = time.Duration(n) * time.Second
			}
		}
		return protect.Throttled, ra
	case s >= 500 || o.GRPCFailed >= 500:
		return protect.Failed, 0
	}
	return protect.Answered, 0
}

// overloadedAnswer is the answer of a route's protect block.
func overloadedAnswer(cfg *config.Config, pc *config.Protect) *answer.Answer {
	return answer.NewAnswer(pc.Reject.Status, pc.Reject.Code, cfg.Message(pc.Reject.Code)).WithGRPC(answer.GRPCUnavailable)
}

// ProtectStatus is one route's protection as the admin API shows it.
type ProtectStatus struct {
	Route    string  `json:"route"`
	Limit    float64 `json:"limit"`    // requests a second
	Baseline float64 `json:"baseline"` // seconds; 0: not learned yet
	// Admitting is what is admitted now: the limit, or less while
	// admission warms up.
	Admitting float64 `json:"admitting"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max,omitempty"`
}

// Protected lists the running routes' protection.
func (g *Gateway) Protected() []ProtectStatus {
	out := []ProtectStatus{}
	for _, r := range g.gen.Load().routes {
		if rp := r.protect; rp != nil {
			s := rp.p.Settings()
			out = append(out, ProtectStatus{Route: r.id, Limit: rp.p.Limit(), Baseline: rp.p.Baseline().Seconds(),
				Admitting: rp.p.Admits(), Min: s.Min, Max: s.Max})
		}
	}
	return out
}
