package protect

import "time"

// Protector is a route's protection: its gate and the controller that
// moves the gate's limit. Requests go through Gate; one goroutine calls
// Tick every Settings().Interval.
type Protector struct {
	Gate *Gate
	ctrl *Controller
}

// New returns a protector with settings s, starting at now.
func New(s Settings, now time.Time) *Protector {
	c := NewController(s)
	return &Protector{Gate: NewGate(c.Limit(), DefaultBurst, now), ctrl: c}
}

// Tick ends an interval at now: the controller learns from what the gate
// saw, and the gate takes the new limit.
func (p *Protector) Tick(now time.Time) (Tally, Step) {
	t := p.Gate.Tally(now)
	st := p.ctrl.Update(now, t)
	p.Gate.Set(p.ctrl.Limit(), p.ctrl.SlowAfter(), st == Cut)
	return t, st
}

// Limit is the limit in force, in requests a second.
func (p *Protector) Limit() float64 { return p.ctrl.Limit() }

// Baseline is the healthy latency learned (0: not yet).
func (p *Protector) Baseline() time.Duration { return p.ctrl.Baseline() }

// Settings are the protector's, defaults filled in.
func (p *Protector) Settings() Settings { return p.ctrl.Settings() }
