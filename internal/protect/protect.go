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
	admits   atomic.Uint64 // math.Float64bits of what the gate admits now
	warm     atomic.Bool   // WarmUp was called: the next Tick starts one
}

// New returns a protector with settings s, starting at now.
func New(s Settings, now time.Time) *Protector {
	c := NewController(s)
	p := &Protector{Gate: NewGate(c.Limit(), DefaultBurst, now), ctrl: c}
	p.limit.Store(math.Float64bits(c.Limit()))
	p.setAdmits(c.Admits(now))
	return p
}

func (p *Protector) setAdmits(v float64) {
	p.Gate.setLimit(v)
	p.admits.Store(math.Float64bits(v))
}

// Admits is what the gate admits now, in requests a second: the limit, or
// less during a warm-up.
func (p *Protector) Admits() float64 { return math.Float64frombits(p.admits.Load()) }

// Tick ends an interval at now: the controller learns from what the gate
// saw, and the gate takes the new limit.
func (p *Protector) Tick(now time.Time) (Tally, Step) {
	t := p.Gate.Tally(now)
	st := p.ctrl.Update(now, t)
	if p.warm.Swap(false) {
		p.ctrl.WarmUp(now)
	}
	admits := p.ctrl.Admits(now)
	p.Gate.Set(admits, p.ctrl.SlowAfter(), st == Cut)
	p.admits.Store(math.Float64bits(admits))
	p.limit.Store(math.Float64bits(p.ctrl.Limit()))
	p.baseline.Store(int64(p.ctrl.Baseline()))
	return t, st
}

// WarmUp makes admission ramp up from a tenth of the limit over the
// settings' WarmUp, from now: the upstream behind is coming back (its
// breaker closed). Safe from any goroutine: the gate is lowered at once,
// the ramp starts at the next Tick.
func (p *Protector) WarmUp() {
	if p.ctrl.Settings().WarmUp <= 0 || p.Limit() >= Unbounded {
		return
	}
	p.warm.Store(true)
	p.setAdmits(max(warmFloor*p.Limit(), p.ctrl.Settings().Min))
}

// Limit is the limit learned, in requests a second.
func (p *Protector) Limit() float64 { return math.Float64frombits(p.limit.Load()) }

// Baseline is the healthy latency learned (0: not yet).
func (p *Protector) Baseline() time.Duration { return time.Duration(p.baseline.Load()) }

// Settings are the protector's, defaults filled in.
func (p *Protector) Settings() Settings { return p.ctrl.Settings() }
