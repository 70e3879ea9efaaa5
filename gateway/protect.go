package gateway

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/protect"
	"github.com/floodgate-gw/floodgate/internal/spec"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// A route with protect learns how many requests a second its upstream can
// take now and admits no more (package internal/protect). Its protector
// is kept across reloads that leave the route's protect block alone, so
// that a reload does not forget what was learned; one goroutine ticks
// every protector. Its pacing and the latencies it measures go by the
// monotonic clock (time.Now's), not the gateway's (Options.Now): a step of
// the wall clock changes nothing, and a test's clock does not stop it.

// routeProtect is a route's protector and what goes with it.
type routeProtect struct {
	p         *protect.Protector
	settings  config.Protect
	limit     prometheus.Gauge
	baseline  prometheus.Gauge
	admitting prometheus.Gauge
	inFlight  prometheus.Gauge
	refused   prometheus.Counter
	queued    prometheus.Gauge
	logged    float64     // the limit the last INFO line gave; the ticking goroutine's
	mode      protectMode // what else moved the limit, at the last tick
	fleet     fleetProtect

	// With priority: the key part whose value names a request's level,
	// the levels highest first, and each one's refused counter.
	levelPart spec.Part
	levels    []string
	byLevel   []prometheus.Counter
}

// protectMode is what, besides the upstream, sets a protected route's
// limit: this instance deciding alone, an operator's pin.
type protectMode struct {
	alone  bool
	pinned float64
}

// level is x's priority level: the index of its value, or the last level
// for a value that is none of them; 0 without priority.
func (rp *routeProtect) level(x *exchange) int {
	if len(rp.levels) == 0 {
		return 0
	}
	v := x.value(rp.levelPart)
	for i, l := range rp.levels {
		if l == v {
			return i
		}
	}
	return len(rp.levels) - 1
}

// sameProtect says whether a and b protect alike (what is learned under
// one holds for the other); the answer is not compared.
func sameProtect(a, b config.Protect) bool {
	pa, pb := a.Priority, b.Priority
	a.Priority, b.Priority = nil, nil
	if a != b || (pa == nil) != (pb == nil) {
		return false
	}
	return pa == nil || pa.Key == pb.Key && pa.MaxWait == pb.MaxWait && slices.Equal(pa.Levels, pb.Levels)
}

// protectorFor returns the route's protector, the running one when its
// settings did not change.
func (g *Gateway) protectorFor(gen *generation, rc *config.Route) (*routeProtect, error) {
	pc := *rc.Protect
	pc.Reject = config.Reject{} // the answer is the generation's; what is learned is not
	pin := pc.Pin               // an override's, laid over the protector kept
	pc.Pin = 0
	same := func(rp *routeProtect) bool { return sameProtect(rp.settings, pc) }
	rp, err := g.pools.protectors.Hold(gen.lease, rc.ID, same, func(*routeProtect, bool) (*routeProtect, error) {
		warm := pc.WarmUp
		if warm == 0 {
			warm = protect.NoWarmUp
		}
		ps := protect.Settings{Min: pc.Min, Max: pc.Max, Tolerance: pc.Tolerance, WarmUp: warm}
		if pr := pc.Priority; pr != nil {
			ps.Levels, ps.MaxWait = len(pr.Levels), pr.MaxWait
			if pr.MaxWait == 0 {
				ps.MaxWait = protect.NoWait
			}
		}
		p := protect.New(ps, time.Now())
		rp := &routeProtect{
			p:         p,
			settings:  pc,
			limit:     g.metrics.protectLimit.WithLabelValues(rc.ID),
			baseline:  g.metrics.protectBaseline.WithLabelValues(rc.ID),
			admitting: g.metrics.protectAdmitting.WithLabelValues(rc.ID),
			inFlight:  g.metrics.protectInFlight.WithLabelValues(rc.ID),
			refused:   g.metrics.protectRefused.WithLabelValues(rc.ID),
			queued:    g.metrics.protectQueued.WithLabelValues(rc.ID),
			fleet:     fleetProtect{alone: newAlone(g.metrics.protectFallback.WithLabelValues(rc.ID))},
		}
		if pr := pc.Priority; pr != nil {
			rp.levelPart, rp.levels = spec.PartOf(pr.Key), pr.Levels
			for _, l := range pr.Levels {
				rp.byLevel = append(rp.byLevel, g.metrics.protectRefusedLevel.WithLabelValues(rc.ID, l))
			}
		}
		if gen.bus != nil {
			g.enterFleet(gen.bus, rc.ID, rp)
		}
		rp.logged = p.Limit()
		rp.limit.Set(p.Limit())
		rp.admitting.Set(p.Admits())
		return rp, nil
	})
	if err == nil {
		rp.p.Pin(pin)
	}
	return rp, err
}

// dropProtector takes the series of a route's protection away once no
// generation has it.
func (g *Gateway) dropProtector(route string, replaced bool) {
	if !replaced {
		for _, v := range []*prometheus.GaugeVec{g.metrics.protectLimit, g.metrics.protectBaseline,
			g.metrics.protectAdmitting, g.metrics.protectInFlight, g.metrics.protectFallback, g.metrics.protectQueued} {
			v.DeleteLabelValues(route)
		}
		g.metrics.protectRefusedLevel.DeletePartialMatch(prometheus.Labels{"route": route})
		g.metrics.protectRefused.DeleteLabelValues(route)
		if gen := g.gen.Load(); gen != nil && !g.closing.Load() {
			g.leaveFleet(gen.bus, route)
		}
	}
}

// tickProtectors moves every protector's limit, once an interval, at the
// interval's multiples of the wall clock: the instances of a fleet end
// their intervals together. With the Redis store, each writes its reports
// at the interval's end and reads the fleet's a moment later (protectRead),
// when every instance has written its own.
func (g *Gateway) tickProtectors() {
	for {
		end := protect.Next(time.Now(), protect.DefaultInterval)
		select {
		case <-g.stop:
			return
		case <-time.After(time.Until(end)):
		}
		bus := g.gen.Load().bus
		type ended struct {
			rp   *routeProtect
			own  protect.Report
			sent error
		}
		var es map[string]*ended
		g.pools.protectors.Each(func(route string, rp *routeProtect) {
			if bus == nil {
				g.protectBack(route, rp) // no fleet to fall back from (the store is memory now)
				own := rp.p.Begin(end)
				g.tickProtector(route, rp, own.Tally, rp.p.Alone(end, own))
				return
			}
			if es == nil {
				es = map[string]*ended{}
			}
			e := &ended{rp: rp, own: rp.p.Begin(end)}
			e.sent = g.sendReport(bus, route, e.own)
			es[route] = e
		})
		if es == nil {
			continue
		}
		select {
		case <-g.stop:
			return
		case <-time.After(time.Until(end.Add(protectRead))):
		}
		for route, e := range es {
			g.tickProtector(route, e.rp, e.own.Tally, g.joinFleet(bus, route, e.rp, end, e.own, e.sent))
		}
	}
}

// tickProtector follows what an interval's step did to the route's
// protection (t is the interval's tally): its gauges, and a line when the
// limit moved by more than half.
func (g *Gateway) tickProtector(route string, rp *routeProtect, t protect.Tally, step protect.Step) {
	limit := rp.p.Limit()
	rp.limit.Set(limit)
	rp.admitting.Set(rp.p.Admits())
	rp.inFlight.Set(float64(t.InFlight))
	if l := rp.p.Levels; l != nil {
		rp.queued.Set(float64(l.Waiting()))
	}
	rp.baseline.Set(rp.p.Baseline().Seconds())
	// A change of more than half the limit is a line: the upstream lost
	// (or found) much of its capacity. Not when the limit changed for
	// another reason, said elsewhere: an operator's pin (the override's
	// line), this instance going alone or back to the fleet (the WARN and
	// INFO of protectfleet.go).
	mode := protectMode{alone: rp.p.Peers() == 0, pinned: rp.p.Pinned()}
	if mode != rp.mode {
		rp.mode, rp.logged = mode, limit
	}
	if limit < rp.logged/2 || limit > rp.logged*1.5 {
		what := "rose"
		if step == protect.Cut || limit < rp.logged {
			what = "cut"
		}
		g.log.LogAttrs(context.Background(), slog.LevelInfo, "protect: the upstream's limit "+what,
			slog.String("route", route),
			slog.Float64("limit", math.Round(limit*10)/10), slog.Float64("from", math.Round(rp.logged*10)/10),
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

// guard is a request's admission by its route's protection.
type guard struct {
	rp     *routeProtect // nil: the route has none
	ticket protect.Ticket
	at     time.Time // when it was admitted
	ended  bool      // its end was counted
}

// room says whether the route's protection has room for x's request now;
// it answers the request when it has none. Asked before the limits, so
// that a request it would turn away spends none of its client's quota.
func (g *Gateway) room(w http.ResponseWriter, x *exchange) (outcome, bool) {
	rp := x.route.protect
	lv := rp.level(x)
	if rp.p.Room(lv, rp.p.Gate.At(time.Now())) {
		return outcome{}, true
	}
	return g.turnAway(w, x, lv), false
}

// admit admits x's request through its route's protection, after the
// limits; it answers the request when there is no room (the room the
// limits' step took meanwhile). With priority, a request waits for room
// up to max_wait while no request of a higher level waits.
func (g *Gateway) admit(w http.ResponseWriter, x *exchange) (outcome, bool) {
	rp := x.route.protect
	lv := rp.level(x)
	tk, ok := rp.p.Admit(x.r.Context(), lv, time.Now())
	if !ok {
		return g.turnAway(w, x, lv), false
	}
	x.guard = guard{rp: rp, ticket: tk, at: time.Now()}
	return outcome{}, true
}

// turnAway answers a request protection turned away.
func (g *Gateway) turnAway(w http.ResponseWriter, x *exchange, level int) outcome {
	rp := x.route.protect
	rp.refused.Inc()
	if rp.byLevel != nil {
		rp.byLevel[level].Inc()
	}
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
	return answered(a.Status, resultOverloaded)
}

// ended tells the route's protection how x's exchange went, once: at the
// answer's head, or when it failed before one. The latency is from the
// admission, or from the end of the client's upload if that came later
// (a slow upload is the client's), to now; a stream or a joined
// connection after the head is not the upstream's either.
func (x *exchange) ended(o *upstream.Result, h http.Header) {
	gd := &x.guard
	if gd.rp == nil || gd.ended {
		return
	}
	gd.ended = true
	from := gd.at
	if o.BodyRead.After(from) {
		from = o.BodyRead
	}
	r, retryAfter := protectResult(o, h, gd.rp.settings.Throttling)
	gd.rp.p.Gate.End(gd.ticket, max(time.Since(from), 0), r, retryAfter)
}

// protectResult is what an exchange tells protection: an answer (its
// latency says whether in time), a failure of the upstream's, its own 429
// or 503 or gRPC RESOURCE_EXHAUSTED (with its Retry-After, from the
// answer's fields h), or nothing
// of its capacity (Dropped: the client's doing or deadline, a 4xx or a
// 500, the application's answers to the request, which a client can
// provoke at will; the gate still counts a Dropped that had waited past
// the threshold as slow).
func protectResult(o *upstream.Result, h http.Header, throttling bool) (protect.Result, time.Duration) {
	switch o.End {
	case upstream.Failed, upstream.TimedOut:
		return protect.Failed, 0
	case upstream.ClientBody:
		// Its upload failed, or stalled: however long that took is the
		// client's, not the upstream's.
		return protect.Ignored, 0
	case upstream.Done:
	default:
		return protect.Dropped, 0
	}
	s := o.Status
	if o.GRPCFailed > 0 {
		s = o.GRPCFailed
	}
	if v := h["Grpc-Status"]; len(v) == 1 && o.GRPCFailed == 0 {
		switch v[0] {
		case "0":
		case grpcResourceExhausted:
			// A gRPC upstream's own throttling, in a trailers-only answer.
			if !throttling {
				return protect.Dropped, 0
			}
			return protect.Throttled, retryAfter(h)
		default:
			return protect.Dropped, 0 // the application's answer, as a 4xx
		}
	}
	switch {
	case (s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable) && !throttling:
		return protect.Dropped, 0
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		return protect.Throttled, retryAfter(h)
	case s == http.StatusBadGateway || s == http.StatusGatewayTimeout:
		return protect.Failed, 0
	case s >= 400:
		return protect.Dropped, 0
	}
	return protect.Answered, 0
}

// grpcResourceExhausted is RESOURCE_EXHAUSTED's grpc-status: a gRPC
// upstream's 429.
const grpcResourceExhausted = "8"

// retryAfter reads a Retry-After of seconds or an HTTP date; 0 for none,
// or one in the past. The controller bounds what it takes of it.
func retryAfter(h http.Header) time.Duration {
	v := h["Retry-After"]
	if len(v) != 1 {
		return 0
	}
	if n, err := strconv.ParseInt(v[0], 10, 64); err == nil {
		return time.Duration(min(max(n, 0), 86400)) * time.Second
	}
	if t, err := http.ParseTime(v[0]); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
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
	// Instances is how many gateways share the limit, this one included,
	// with the Redis store; 0 while this one protects alone. Admitting is
	// then this instance's share.
	Instances int `json:"instances,omitempty"`
	// Pinned is the limit a runtime override pins (then Limit too); 0:
	// none, the limit is learned.
	Pinned float64 `json:"pinned,omitempty"`
}

// Protected lists the running routes' protection.
func (g *Gateway) Protected() []ProtectStatus {
	out := []ProtectStatus{}
	for _, r := range g.gen.Load().routes {
		if rp := r.protect; rp != nil {
			s := rp.p.Settings()
			out = append(out, ProtectStatus{Route: r.id, Limit: rp.p.Limit(), Baseline: rp.p.Baseline().Seconds(),
				Admitting: rp.p.Admits(), Min: s.Min, Max: s.Max, Instances: rp.p.Peers(), Pinned: rp.p.Pinned()})
		}
	}
	return out
}
