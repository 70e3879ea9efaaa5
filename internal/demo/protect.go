package demo

import (
	"fmt"
	"time"

	"github.com/floodgate-gw/floodgate/config"
)

// What the demo shows of the route's protection (protect:): how it is
// set, the coupon API's slowdown it is there for, and what it did then.
// The limit it learned is read from the gateway's metrics
// (gateway_protect_limit), as a dashboard would.

// protectIntro says how the route's protection is set, and what the demo
// changed of the example's (orig: nil when it did not parse); nothing
// when the route has none.
func (d *demo) protectIntro(orig *config.Route) {
	p := d.route.Protect
	if p == nil {
		return
	}
	bounds := fmt.Sprintf("at least %g requests/s", p.Min)
	if p.Max > 0 {
		bounds = fmt.Sprintf("%g to %g requests/s", p.Min, p.Max)
	}
	fmt.Fprintf(d.out, "  protect     admits what the API takes now, learned from its answers: %s; an answer\n"+
		"              over %g times its healthy latency is a sign of overload, as a 504 is\n", bounds, p.Tolerance)
	if orig != nil && orig.Protect != nil && orig.Protect.Min != p.Min {
		fmt.Fprintf(d.out, "protection's min lowered for the demo's traffic: %g (the example's: %g)\n", p.Min, orig.Protect.Min)
	}
}

// slowdownPhases are the lines that announce the coupon API's slowdown
// and its end, by the second they come before.
func (d *demo) slowdownPhases() map[int]string {
	s := d.s
	slow := fmt.Sprintf("the coupon API slows down at %v, for %v: it serves %d requests/s in 200 ms, the rest in 3 s;",
		s.slows, s.slowFor, s.slowCapacity)
	back := fmt.Sprintf("the coupon API serves %d requests/s again at %v", demoCapacity, s.slows+s.slowFor)
	timeout := d.route.Upstream.Timeout
	if d.route.Protect == nil {
		slow += fmt.Sprintf(" the limits still let the same through: what it cannot serve waits for a 504 at the route's %v timeout", timeout)
	} else {
		slow += fmt.Sprintf(" once protection sees answers come late (in a second or two), its limit follows the API down, "+
			"and what the API cannot take is turned away at once (503 overloaded), not left to wait for a 504 "+
			"at the route's %v timeout", timeout)
		back += ": the limit rises while requests press on it, slowly back to where the API was overloaded, then faster past it"
	}
	return map[int]string{int(s.slows / time.Second): wrap(slow, ""), int((s.slows + s.slowFor) / time.Second): wrap(back, "")}
}

// protectSummary says what protection did: how far its limit fell while
// the API was slow and how far it rose after, what the requests it could
// not admit met before it fell, and after; and when it fell before the
// slowdown, why.
func (d *demo) protectSummary() {
	rows := d.res.rows
	if d.route.Protect == nil || len(rows) == 0 {
		return
	}
	s, out := d.s, d.out
	slow, back, fails := int(s.slows/time.Second), int((s.slows+s.slowFor)/time.Second), int(s.outage/time.Second)
	first := rows[0].protect.limit
	low, lowAt, before, early := first, -1, first, -1
	var timeouts, overloaded int64
	for _, r := range rows {
		switch {
		case r.T < slow:
			if early < 0 && r.protect.limit < first {
				early = r.T
			}
		case r.T < fails:
			// The limit may fall in the second the API comes back: the
			// answers it judges by come late.
			if r.T <= back && r.protect.limit < low {
				low, lowAt = r.protect.limit, r.T
			}
			timeouts += r.OtherBy["504"]
			overloaded += r.protect.overloaded
			before = r.protect.limit
		}
	}
	line := fmt.Sprintf("protection's limit: %s at first", rps(first))
	if lowAt >= 0 {
		line += fmt.Sprintf("; %s at its lowest (%ds), the API serving %d/s from %v to %v", rps(low), lowAt, s.slowCapacity, s.slows, s.slows+s.slowFor)
	}
	line += fmt.Sprintf("; %s at %ds, before the API failed. From %v to %v, %d requests waited for the route's %v timeout (504), "+
		"%d were turned away at once (503 overloaded)", rps(before), fails-1, s.slows, s.outage, timeouts, d.route.Upstream.Timeout, overloaded)
	if early >= 0 {
		line += fmt.Sprintf(". Its limit fell at %ds, before the API slowed down: answers came late or failed while this "+
			"machine was too busy to keep up (the crowd, the gateway and the API share its cores), which "+
			"protection cannot tell from a slow API; --rate 2000 asks less of it", early)
	}
	fmt.Fprintln(out, wrap(line, "  "))
}
