package protect

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// Protector is a route's protection: its gate and the controller that
// moves the gate's limit. Requests go through Gate; one goroutine calls
// Tick every Settings().Interval; Limit and Baseline may be read from any.
type Protector struct {
	Gate     *Gate
	Levels   *Levels // nil: one level, the gate alone
	ctrl     *Controller
	limit    atomic.Uint64 // math.Float64bits of the limit in force (Limit)
	baseline atomic.Int64  // ns
	admits   atomic.Uint64 // math.Float64bits of what the gate admits now
	warm     atomic.Bool   // WarmUp was called: the next Tick starts one
	peers    atomic.Int32  // the instances the limit is shared by; 0: none, alone
	pin      atomic.Uint64 // math.Float64bits of the limit pinned; 0: none

	// The ticking goroutine's: following the fleet; this instance's part
	// of the fleet's limit when it last did; what its controller proposed
	// at the last tick, before it followed the fleet.
	fleet    bool
	frac     float64
	proposal float64
	cut      bool // the last update cut the limit
	summed   int  // the others whose reports the last sum counted
}

// New returns a protector with settings s, starting at now.
func New(s Settings, now time.Time) *Protector {
	c := NewController(s)
	p := &Protector{Gate: NewGate(c.Limit(), DefaultBurst, now), ctrl: c}
	if s.Levels > 1 {
		w := s.MaxWait
		switch {
		case w == 0:
			w = DefaultMaxWait
		case w < 0: // NoWait
			w = 0
		}
		p.Levels = NewLevels(p.Gate, s.Levels, w)
	}
	p.limit.Store(math.Float64bits(c.Limit()))
	p.setAdmits(c.Admits(now))
	return p
}

func (p *Protector) setAdmits(v float64) {
	p.Gate.setLimit(v, p.Gate.At(time.Now()))
	p.admits.Store(math.Float64bits(v))
}

// Admits is what the gate admits now, in requests a second: the limit, or
// less during a warm-up; of a shared limit, this instance's part.
func (p *Protector) Admits() float64 { return math.Float64frombits(p.admits.Load()) }

// Tick ends an interval at now, for a protector on its own: the
// controller learns from what the gate saw, and the gate takes the new
// limit.
func (p *Protector) Tick(now time.Time) (Tally, Step) {
	r := p.Begin(now)
	return r.Tally, p.Alone(now, r)
}

// Begin ends an interval at now: the gate's tally, and the report the
// fleet gets of it. Alone or Join then moves the limit.
func (p *Protector) Begin(now time.Time) Report {
	t := p.Gate.Tally(now)
	p.ctrl.pinned = p.Pinned() > 0
	// A cut made alone was made on this instance's share: the fleet's
	// limit, scaled from it, is an estimate, not another's cut to follow.
	r := Report{Tally: t, Slot: SlotOf(now, p.ctrl.s.Interval), Limit: p.proposal, Cut: p.cut && p.fleet}
	switch {
	case r.Limit == 0:
		r.Limit = p.ctrl.Limit()
	case !p.fleet && p.frac > 0 && r.Limit < Unbounded:
		// Alone with the part of the fleet's limit it had: what the
		// fleet's would be, about.
		r.Limit = math.Min(r.Limit/p.frac, Unbounded)
	}
	if p.Levels != nil {
		p.Levels.demand(t.Elapsed, &r.Demand)
	} else if s := t.Elapsed.Seconds(); s > 0 {
		r.Demand[0] = float64(t.Admitted+t.Refused) / s
	}
	return r
}

// Alone moves the limit by own's tally alone: the fleet is out of reach,
// or there is none. A protector that followed the fleet takes its part
// of the fleet's limit as its own.
func (p *Protector) Alone(now time.Time, own Report) Step {
	st := Held
	if p.fleet {
		// The interval before was the fleet's: this one starts anew.
		p.fleet, p.ctrl.fleet = false, false
		p.ctrl.Scale(p.frac)
		p.ctrl.Pass(now, own.Tally)
	} else {
		st = p.ctrl.Update(now, own.Tally)
	}
	p.peers.Store(0)
	p.proposal, p.cut = p.ctrl.Limit(), st == Cut
	p.apply(now, st == Cut, p.ctrl.Limit(), 1)
	return st
}

// Join moves the limit by the fleet's tally (own and the others' latest
// reports), follows another instance's cut, and admits this instance's
// share of the fleet's limit: the lowest any instance proposes. A
// protector that was alone takes the fleet's limit as it stands, or,
// being the first back, scales its own up by the share it had.
func (p *Protector) Join(now time.Time, own Report, others []Peer) Step {
	lowest, cut := p.enter(others)
	before := p.ctrl.Limit()
	n := 0
	for _, r := range others {
		if current(own, r.Report) {
			n++
		}
	}
	st, sum := Held, Sum(own, others)
	if n == p.summed {
		st = p.ctrl.Update(now, sum)
	} else {
		p.ctrl.Pass(now, sum)
		p.summed = n
	}
	// Another instance's cut is this one's: what was admitted before it
	// counts no more.
	followed := p.ctrl.Follow(cut, before)
	if lowest < Unbounded {
		p.ctrl.Cap(lowest * (1 + maxProbe))
	}
	p.proposal, p.cut = p.ctrl.Limit(), st == Cut || followed
	p.share(now, own, others, math.Min(lowest, p.proposal), followed || st == Cut)
	return st
}

// enter joins the fleet, if the protector was alone, and returns the
// lowest limit the others propose, and the lowest of those that cut.
func (p *Protector) enter(others []Peer) (lowest, cut float64) {
	lowest, cut = Unbounded, Unbounded
	for _, r := range others {
		lowest = math.Min(lowest, r.Limit)
		if r.Cut {
			cut = math.Min(cut, r.Limit)
		}
	}
	if !p.fleet {
		p.fleet, p.ctrl.fleet = true, true
		p.summed = -1 // the interval before was this instance's alone
		switch {
		case len(others) > 0:
			p.ctrl.Adopt(lowest)
		case p.frac > 0:
			p.ctrl.Scale(1 / p.frac)
		}
	}
	return lowest, cut
}

// Enter joins the fleet at now, before this instance admits anything:
// it takes the fleet's limit as it stands, and a share of what the
// others leave (it has no demand yet), so that it starts within the
// fleet's limit.
func (p *Protector) Enter(now time.Time, others []Peer) {
	lowest, _ := p.enter(others)
	p.proposal = p.ctrl.Limit()
	p.share(now, Report{}, others, math.Min(lowest, p.proposal), false)
}

// share puts this instance's share of the fleet's limit in force.
func (p *Protector) share(now time.Time, own Report, others []Peer, limit float64, cut bool) {
	p.frac = 1 / float64(1+len(others))
	if limit > 0 && limit < Unbounded {
		if f := Share(limit, own, others) / limit; f >= 0 && f <= 1 {
			p.frac = f
		}
	}
	p.peers.Store(int32(1 + len(others)))
	p.apply(now, cut, limit, p.frac)
}

// apply puts limit, times this instance's part of it, in force, ramped
// as the controller's warm-up says.
func (p *Protector) apply(now time.Time, cut bool, limit, frac float64) {
	if p.warm.Swap(false) {
		p.ctrl.WarmUp(now)
	}
	admits := p.ctrl.Admits(now)
	if pin := p.Pinned(); pin > 0 {
		limit, admits = pin, pin*frac
	} else if admits < Unbounded {
		admits *= frac * limit / p.ctrl.Limit()
	}
	p.Gate.Set(admits, p.ctrl.SlowAfter(), cut, now)
	p.admits.Store(math.Float64bits(admits))
	p.limit.Store(math.Float64bits(limit))
	p.baseline.Store(int64(p.ctrl.Baseline()))
}

// Room says whether a request of level at now (Gate.At) would be
// admitted, or could wait for room.
func (p *Protector) Room(level int, now int64) bool {
	if p.Levels != nil {
		return p.Levels.Room(level, now)
	}
	return p.Gate.Room(now)
}

// Admit admits a request of level at now, waiting for room when the
// route has levels; false: turned away.
func (p *Protector) Admit(ctx context.Context, level int, now time.Time) (Ticket, bool) {
	if p.Levels != nil {
		return p.Levels.Admit(ctx, level, now)
	}
	return p.Gate.Admit(p.Gate.At(now))
}

// Pin makes the gate admit limit requests a second (the fleet's, shared
// as the learned one is) from the next interval, whatever is learned;
// 0 gives it back to what is learned. The controller goes on learning
// meanwhile: an operator's pin, for a while.
func (p *Protector) Pin(limit float64) { p.pin.Store(math.Float64bits(max(limit, 0))) }

// Pinned is the limit pinned, 0 for none.
func (p *Protector) Pinned() float64 { return math.Float64frombits(p.pin.Load()) }

// Peers is how many instances share the limit, this one included; 0
// while it protects alone.
func (p *Protector) Peers() int { return int(p.peers.Load()) }

// WarmUp makes admission ramp up from a tenth of the limit over the
// settings' WarmUp, from now: the upstream behind is coming back (its
// breaker closed). Safe from any goroutine: the gate is lowered at once
// to a tenth of what it admits (this instance's share, in a fleet), the
// ramp starts at the next Tick.
func (p *Protector) WarmUp() {
	if p.ctrl.Settings().WarmUp <= 0 || p.Limit() >= Unbounded {
		return
	}
	p.warm.Store(true)
	a := p.Admits()
	p.setAdmits(max(warmFloor*a, math.Min(p.ctrl.Settings().Min, a)))
}

// Limit is the limit in force, in requests a second: the one learned (the
// fleet's, while it is shared: Peers), or a pin.
func (p *Protector) Limit() float64 { return math.Float64frombits(p.limit.Load()) }

// Baseline is the healthy latency learned (0: not yet).
func (p *Protector) Baseline() time.Duration { return time.Duration(p.baseline.Load()) }

// Settings are the protector's, defaults filled in.
func (p *Protector) Settings() Settings { return p.ctrl.Settings() }
