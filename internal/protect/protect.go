package protect

import (
	"math"
	"sync/atomic"
	"time"
)

// Protector is a route's protection: its gate and the controller that
// moves the gate's limit. Requests go through Gate; one goroutine calls
// Tick every Settings().Interval; Limit and Baseline may be read from any.
type Protector struct {
	Gate     *Gate
	ctrl     *Controller
	limit    atomic.Uint64 // math.Float64bits of the controller's limit
	baseline atomic.Int64  // ns
}

// New returns a protector with settings s, starting at now.
func New(s Settings, now time.Time) *Protector {
	c := NewController(s)
	p := &Protector{Gate: NewGate(c.Limit(), DefaultBurst, now), ctrl: c}
	p.limit.Store(math.Float64bits(c.Limit()))
	return p
}

// Tick ends an interval at now: the controller learns from what the gate
// saw, and the gate takes the new limit.
func (p *Protector) Tick(now time.Time) (Tally, Step) {
	t := p.Gate.Tally(now)
	st := p.ctrl.Update(now, t)
	p.Gate.Set(p.ctrl.Limit(), p.ctrl.SlowAfter(), st == Cut)
	p.limit.Store(math.Float64bits(p.ctrl.Limit()))
	p.baseline.Store(int64(p.ctrl.Baseline()))
	return t, st
}

// Limit is the limit in force, in requests a second.
func (p *Protector) Limit() float64 { return math.Float64frombits(p.limit.Load()) }

// Baseline is the healthy latency learned (0: not yet).
func (p *Protector) Baseline() time.Duration { return time.Duration(p.baseline.Load()) }

// Settings are the protector's, defaults filled in.
func (p *Protector) Settings() Settings { return p.ctrl.Settings() }
