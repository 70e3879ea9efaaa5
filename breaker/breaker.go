package breaker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker is one circuit breaker. Its methods are safe for concurrent use.
type Breaker struct {
	s Settings // never changes after New

	// ph is the state as Allow's fast path sees it: CLOSED admits and OPEN
	// refuses without taking mu. It is replaced, never modified, under mu
	// at every transition.
	ph atomic.Pointer[phase]

	mu     sync.Mutex
	state  State
	forced bool
	// gen changes at every transition, a Force included. A call carries the
	// generation it was admitted in, and its outcome is dropped if that is
	// no longer current: a call admitted CLOSED that ends after the
	// breaker opened says nothing about the trials, nor about the fresh
	// window after the breaker closes again. Generation 0 marks calls that
	// are not tracked (forced closed).
	gen uint64

	openedAt time.Time // last transition to OPEN
	retryAt  time.Time // OPEN and not forced: when trials start

	// Seconds are numbered from origin, the first time the breaker was
	// given, with Time.Sub: between two readings of time.Now that uses the
	// monotonic clock, so a step of the wall clock neither empties the
	// window nor freezes it.
	origin    time.Time
	hasOrigin bool
	win       window

	// HALF_OPEN: one slot per trial call. A slot is free (seq 0), running,
	// or done; running+judged never exceeds HalfOpenCalls.
	trials     []trial
	trialSeq   uint64
	running    int
	judged     int
	trialFails int
	trialSlow  int
	nextExpiry time.Time // no running trial expires before this

	pending    []transition // not yet given to OnTransition
	delivering bool         // a goroutine is calling OnTransition

	fleet fleetState // Settings.Fleet: what the breaker shares (fleet.go)
}

type phase struct {
	gen     uint64
	state   State
	forced  bool
	retryAt time.Time

	// HALF_OPEN: the trials are the fleet's (Settings.Fleet), and full
	// says the fleet refused the last one asked for, so that the calls
	// after it are refused without asking until Follow tells more.
	fleet, full bool
}

type trial struct {
	seq   uint64 // which call holds the slot; 0: free
	start time.Time
	done  bool
}

type transition struct {
	from, to State
	at       time.Time
}

// ticket identifies an admitted call to report.
type ticket struct {
	gen  uint64
	seq  uint64 // trial calls; the fleet's id of a fleet trial
	slot int    // trial slot, -1 for a call admitted CLOSED, fleetSlot for a trial of the fleet's
}

// fleetSlot is the slot of a trial the fleet admitted: it holds none of
// this breaker's slots.
const fleetSlot = -2

// Outcome is how a call ended, as the caller judges it.
type Outcome struct {
	// Failed is the caller's verdict: a failure status, a connection
	// error, a timeout.
	Failed bool

	// Duration is how long the call took; it is slow when longer than
	// SlowCallDuration (if that is not zero).
	Duration time.Duration

	// Cancelled means the client went away: the call says nothing about
	// the upstream and is not counted. A cancelled trial frees its slot
	// for another trial.
	Cancelled bool
}

// New returns a CLOSED breaker with an empty window, or an error naming
// every field of s that is out of range.
func New(s Settings) (*Breaker, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b := &Breaker{
		s:      s,
		state:  Closed,
		gen:    1,
		win:    newWindow(int(s.Window / time.Second)),
		trials: make([]trial, s.HalfOpenCalls),
	}
	b.fleet.shared = s.Fleet != nil
	b.ph.Store(&phase{gen: b.gen, state: Closed})
	return b, nil
}

// Allow asks to make a call at now. If the call may go ahead it returns a
// done function to be called once, with the outcome and the time the call
// ended; further calls of done do nothing. If not, done is nil and err is
// an *OpenError, which matches ErrOpen.
//
// Allow is inlined into its caller, so when done does not escape the caller
// (it is called in the same function), its record lives on the caller's
// stack and a CLOSED call allocates nothing; a done that escapes costs two
// small allocations.
func (b *Breaker) Allow(now time.Time) (done func(o Outcome, end time.Time), err error) {
	// At cost 78 this is just inside the compiler's inlining budget of 80:
	// check with go build -gcflags=-m after changing it
	// (BenchmarkClosed's allocs/op notices too).
	c := new(call)
	if err = b.admit(now, c); err == nil {
		done = c.done
	}
	return
}

// call is one admitted call; its done method is what Allow returns.
type call struct {
	b        *Breaker
	t        ticket
	reported atomic.Bool
}

func (c *call) done(o Outcome, end time.Time) {
	if c.reported.CompareAndSwap(false, true) {
		c.b.report(c.t, o, end)
	}
}

// admit decides whether a call may go ahead at now and if so fills in its
// ticket. CLOSED admits and OPEN refuses on one atomic load; only
// HALF_OPEN and the end of OpenFor take the lock, and only the trials of
// a fleet (Settings.Fleet) ask it, outside the lock.
func (b *Breaker) admit(now time.Time, c *call) error {
	c.b = b
	err := b.admitHere(now, &c.t)
	if err == errAskFleet {
		err = b.fleetTrial(now, &c.t)
	}
	return err
}

func (b *Breaker) admitHere(now time.Time, t *ticket) (err error) {
	p := b.ph.Load()
	switch {
	case p.state == Closed && p.forced:
		return nil // generation 0: not recorded
	case p.state == Closed:
		*t = ticket{gen: p.gen, slot: -1}
		return nil
	case p.state == Open && p.forced:
		return &OpenError{State: Open, Forced: true}
	case p.state == Open && now.Before(p.retryAt):
		return &OpenError{State: Open, RetryAt: p.retryAt, RetryAfter: p.retryAt.Sub(now)}
	case p.state == HalfOpen && p.full:
		return b.fleetFull(now)
	case p.state == HalfOpen && p.fleet:
		return errAskFleet
	}
	b.mu.Lock()
	*t, err = b.admitLocked(now)
	notify := len(b.pending) > 0
	b.mu.Unlock()
	if notify {
		b.deliver()
	}
	return err
}

func (b *Breaker) admitLocked(now time.Time) (ticket, error) {
	for {
		switch {
		case b.state == Closed && b.forced:
			return ticket{}, nil
		case b.state == Closed:
			return ticket{gen: b.gen, slot: -1}, nil
		case b.state == Open && b.forced:
			return ticket{}, &OpenError{State: Open, Forced: true}
		case b.state == Open && now.Before(b.retryAt):
			return ticket{}, &OpenError{State: Open, RetryAt: b.retryAt, RetryAfter: b.retryAt.Sub(now)}
		case b.state == Open:
			b.transition(HalfOpen, false, now)
			continue
		}
		// HALF_OPEN.
		if b.fleet.half {
			return ticket{}, errAskFleet
		}
		if b.expire(now) {
			continue // the trials were decided: CLOSED or OPEN again
		}
		if b.running+b.judged < len(b.trials) {
			return b.startTrial(now), nil
		}
		var last time.Time
		for _, tr := range b.trials {
			if tr.seq != 0 && !tr.done && tr.start.After(last) {
				last = tr.start
			}
		}
		at := last.Add(b.s.TrialTimeout)
		return ticket{}, &OpenError{State: HalfOpen, RetryAt: at, RetryAfter: max(at.Sub(now), 0)}
	}
}

func (b *Breaker) startTrial(now time.Time) ticket {
	for i := range b.trials {
		if b.trials[i].seq != 0 {
			continue
		}
		b.trialSeq++
		b.trials[i] = trial{seq: b.trialSeq, start: now}
		if dl := now.Add(b.s.TrialTimeout); b.running == 0 || dl.Before(b.nextExpiry) {
			b.nextExpiry = dl
		}
		b.running++
		return ticket{gen: b.gen, seq: b.trialSeq, slot: i}
	}
	panic("breaker: no free trial slot") // admitLocked counted one
}

// expire fails the trials not reported within TrialTimeout of their start
// and reports whether that decided the trials.
func (b *Breaker) expire(now time.Time) bool {
	if b.running == 0 || !now.After(b.nextExpiry) {
		return false
	}
	var next time.Time
	for i := range b.trials {
		tr := &b.trials[i]
		if tr.seq == 0 || tr.done {
			continue
		}
		dl := tr.start.Add(b.s.TrialTimeout)
		if now.After(dl) {
			tr.done = true
			b.running--
			b.judged++
			b.trialFails++
		} else if next.IsZero() || dl.Before(next) {
			next = dl
		}
	}
	b.nextExpiry = next
	return b.judge(now)
}

// judge decides the trials once every outcome is in: their own failure and
// slow rates, not the window's, close or reopen the breaker. It reports
// whether it did.
func (b *Breaker) judge(now time.Time) bool {
	if b.judged < len(b.trials) {
		return false
	}
	n := float64(len(b.trials))
	if float64(b.trialFails)/n < b.s.FailureRate && float64(b.trialSlow)/n < b.s.SlowCallRate {
		b.transition(Closed, false, now)
	} else {
		b.transition(Open, false, now)
	}
	return true
}

func (b *Breaker) report(t ticket, o Outcome, end time.Time) {
	if t.gen == 0 {
		return // forced closed: nothing is recorded
	}
	slow := b.s.SlowCallDuration > 0 && o.Duration > b.s.SlowCallDuration
	if t.slot == fleetSlot {
		// The fleet judges its trials, whatever this breaker did since.
		b.s.Fleet.TrialDone(t.seq, o, slow, end)
		return
	}
	if t.slot < 0 && o.Cancelled {
		return // nothing to count and no slot to free: skip the lock
	}
	b.mu.Lock()
	if t.gen == b.gen {
		if t.slot < 0 {
			b.win.add(b.second(end), o.Failed, slow)
			if b.fleet.shared {
				b.fleet.count(o.Failed, slow)
			} else if b.tripped() {
				b.transition(Open, false, end)
			}
		} else if !b.expire(end) { // a late report of a trial finds it failed
			b.finishTrial(t, o, slow, end)
		}
	}
	notify := len(b.pending) > 0
	b.mu.Unlock()
	if notify {
		b.deliver()
	}
}

func (b *Breaker) finishTrial(t ticket, o Outcome, slow bool, end time.Time) {
	tr := &b.trials[t.slot]
	if tr.seq != t.seq || tr.done {
		return // timed out, already counted as failed
	}
	b.running--
	if o.Cancelled {
		*tr = trial{}
		return
	}
	tr.done = true
	b.judged++
	if o.Failed {
		b.trialFails++
	}
	if slow {
		b.trialSlow++
	}
	b.judge(end)
}

// tripped reports whether the window's rates reach a threshold. Rates are
// compared as quotients, not by multiplying the threshold: 3/10 is the same
// float64 as 0.3, while 0.3*10 is above 3.
func (b *Breaker) tripped() bool {
	w := &b.win
	if w.calls < int64(b.s.MinCalls) {
		return false
	}
	n := float64(w.calls)
	return float64(w.failures)/n >= b.s.FailureRate || float64(w.slow)/n >= b.s.SlowCallRate
}

// second returns the number of the one-second bucket t falls in.
func (b *Breaker) second(t time.Time) int64 {
	if !b.hasOrigin {
		b.origin, b.hasOrigin = t, true
	}
	d := t.Sub(b.origin)
	s := int64(d / time.Second)
	if d < 0 && d%time.Second != 0 {
		s-- // round down, not toward zero
	}
	return s
}

// transition moves to a new state (or re-enters one, with a new
// generation) and queues the OnTransition call if the state changed.
func (b *Breaker) transition(to State, forced bool, at time.Time) {
	from := b.state
	b.state, b.forced = to, forced
	b.gen++
	b.retryAt = time.Time{}
	switch to {
	case Closed:
		b.win.reset(b.second(at))
	case Open:
		b.openedAt = at
		if !forced {
			b.retryAt = at.Add(b.s.OpenFor)
		}
	case HalfOpen:
		clear(b.trials)
		b.running, b.judged, b.trialFails, b.trialSlow = 0, 0, 0, 0
	}
	b.fleet.unsent = Counts{}
	b.fleet.half = to == HalfOpen && b.fleet.shared && !forced
	b.ph.Store(&phase{gen: b.gen, state: to, forced: forced, retryAt: b.retryAt, fleet: b.fleet.half})
	if from != to && b.s.OnTransition != nil {
		b.pending = append(b.pending, transition{from, to, at})
	}
}

// deliver makes the queued OnTransition calls, unless another goroutine is
// already making them: that one will see what was queued. One deliverer at
// a time keeps the calls in order; queueing under the lock and calling
// outside it lets the callback use the Breaker.
func (b *Breaker) deliver() {
	b.mu.Lock()
	if b.delivering {
		b.mu.Unlock()
		return
	}
	b.delivering = true
	finished := false
	defer func() {
		if !finished { // the callback panicked: let the next transition deliver
			b.mu.Lock()
			b.delivering = false
			b.mu.Unlock()
		}
	}()
	for len(b.pending) > 0 {
		batch := b.pending
		b.pending = nil
		b.mu.Unlock()
		for _, t := range batch {
			b.s.OnTransition(t.from, t.to, t.at)
		}
		b.mu.Lock()
	}
	b.delivering = false
	finished = true
	b.mu.Unlock()
}

// Force puts the breaker in mode m at now. Forcing the mode it is already
// in does nothing, except Auto, which always restarts it CLOSED with an
// empty window. Calls in flight when the mode changes are not counted.
func (b *Breaker) Force(m Mode, now time.Time) {
	b.mu.Lock()
	switch m {
	case Auto:
		b.transition(Closed, false, now)
	case ForceOpen:
		if !b.forced || b.state != Open {
			b.transition(Open, true, now)
		}
	case ForceClosed:
		if !b.forced || b.state != Closed {
			b.transition(Closed, true, now)
		}
	default:
		b.mu.Unlock()
		panic(fmt.Sprintf("breaker: Force with unknown %v", m))
	}
	notify := len(b.pending) > 0
	b.mu.Unlock()
	if notify {
		b.deliver()
	}
}

// Resume makes b, a breaker new from New, carry on from old, another
// breaker of the same calls whose settings differ (a reload changed them),
// so that a change of settings neither closes an open breaker nor lifts an
// operator's force. A forced breaker stays forced in its state. One that
// is OPEN or HALF_OPEN on its own is OPEN here since old opened, its trials
// due after b's OpenFor from then (at the next Allow if that has passed):
// the trials of old in flight are old's. A CLOSED one stays CLOSED, with
// an empty window, as its buckets may not fit b's. Nothing is reported to
// OnTransition: as far as the calls can tell, the state has not changed.
func (b *Breaker) Resume(old *Breaker, now time.Time) {
	old.mu.Lock()
	state, forced, openedAt, episode := old.state, old.forced, old.openedAt, old.fleet.episode
	old.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	// The fleet's episode goes on too: b has seen what old saw of the fleet.
	b.fleet.episode = episode
	switch {
	case forced:
		b.transition(state, true, now)
	case state == Open || state == HalfOpen:
		b.transition(Open, false, openedAt)
	default:
		return
	}
	b.pending = b.pending[:0]
}

// State returns the state. An OPEN breaker whose OpenFor has passed stays
// OPEN until the next Allow starts its trials.
func (b *Breaker) State() State { return b.ph.Load().state }

// Forced returns the state an operator forced and true, or CLOSED and
// false in normal operation.
func (b *Breaker) Forced() (State, bool) {
	p := b.ph.Load()
	if !p.forced {
		return Closed, false
	}
	return p.state, true
}

// Snapshot is a breaker's state for the admin API and the dashboard.
type Snapshot struct {
	State  State
	Forced bool

	// Calls, Failures and Slow are the window's counts, as of the time
	// given to Snapshot. The window counts only in CLOSED (not forced); it
	// is emptied when the breaker closes. A breaker that shares its window
	// (Settings.Fleet) shows the fleet's, as Follow last gave it.
	Calls, Failures, Slow int64

	// OpenedAt is when the breaker last opened; zero if it never has.
	OpenedAt time.Time

	// NextTrial is when an OPEN breaker starts its trials; zero in other
	// states and when forced open.
	NextTrial time.Time

	// HALF_OPEN: trials admitted and not yet reported, trials decided
	// (reported or timed out), and how many of those failed or were slow.
	TrialsInFlight, TrialsDone, TrialFailures, TrialSlow int
}

// Snapshot returns the breaker's state at now. It changes nothing: a trial
// past its timeout still shows in flight until Allow or done looks.
func (b *Breaker) Snapshot(now time.Time) Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Snapshot{State: b.state, Forced: b.forced, OpenedAt: b.openedAt, NextTrial: b.retryAt}
	switch {
	case b.state == Closed && !b.forced && b.fleet.shared:
		s.Calls, s.Failures, s.Slow = b.fleet.window.Calls, b.fleet.window.Failures, b.fleet.window.Slow
	case b.state == Closed && !b.forced:
		s.Calls, s.Failures, s.Slow = b.win.at(b.second(now))
	case b.state == HalfOpen:
		s.TrialsInFlight, s.TrialsDone, s.TrialFailures, s.TrialSlow = b.running, b.judged, b.trialFails, b.trialSlow
	}
	return s
}
