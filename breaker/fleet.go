package breaker

import (
	"errors"
	"time"
)

// A shared breaker's own window does not open it: the fleet's does, by
// Follow. Its own window goes on counting all the same, so that when the
// fleet cannot be reached (Share false) the breaker decides on its own
// calls of the last Window at once, as a breaker of one instance.

// Fleet is where a breaker's trials are admitted and judged for the whole
// fleet (Settings.Fleet). Its methods are called without the breaker's
// lock held, and may call Follow and Share.
type Fleet interface {
	// Trial asks for one of the fleet's HalfOpenCalls trial calls at now.
	// ok: admitted, id is what TrialDone will be given. Not ok: every
	// trial is taken, or the fleet is in another state, which Trial should
	// have given to Follow (or to Share, if the fleet is out of reach):
	// the breaker then decides the call again in the state it is in.
	Trial(now time.Time) (id uint64, ok bool)

	// TrialDone reports how the trial id ended: its outcome, whether it was
	// slow, and when it ended. Every trial Trial admitted is reported
	// once, a cancelled one too (it frees its place for another).
	TrialDone(id uint64, o Outcome, slow bool, end time.Time)
}

// Counts are calls counted in a window.
type Counts struct {
	Calls, Failures, Slow int64
}

// FleetState is what the fleet decided, for Follow.
type FleetState struct {
	// State is the fleet's.
	State State

	// Episode numbers the fleet's openings and closings: it changes each
	// time the fleet's breaker opens or closes, and counts reported for
	// one episode are not added to another.
	Episode uint64

	// OpenedAt is when the fleet's breaker opened, on this breaker's clock
	// (the one its times come from); OPEN and HALF_OPEN.
	OpenedAt time.Time

	// Window is the fleet's window; CLOSED.
	Window Counts
}

// fleetState is what a breaker keeps of its fleet, under its lock.
type fleetState struct {
	shared  bool   // the fleet decides; false: the breaker's own window does
	half    bool   // HALF_OPEN with the fleet's trials
	episode uint64 // the last one Follow gave
	unsent  Counts // counted in this generation since TakeCounts
	window  Counts // the fleet's, as Follow last gave it
}

func (f *fleetState) count(failed, slow bool) {
	f.unsent.Calls++
	if failed {
		f.unsent.Failures++
	}
	if slow {
		f.unsent.Slow++
	}
}

// errAskFleet makes admit ask the fleet for a trial, outside the lock.
var errAskFleet = errors.New("breaker: ask the fleet")

// fleetTrial asks the fleet for a trial call at now. When the fleet does
// not admit the call, its answer may have moved the breaker (Follow,
// Share): the call is decided again in the new state, a few times at
// most, since a fleet whose state keeps changing is not worth waiting for.
func (b *Breaker) fleetTrial(now time.Time, t *ticket) error {
	for range 3 {
		p := b.ph.Load()
		id, ok := b.s.Fleet.Trial(now)
		if ok {
			*t = ticket{gen: p.gen, seq: id, slot: fleetSlot}
			return nil
		}
		if b.ph.Load() == p {
			// Every trial of the fleet is taken: so are they until the
			// fleet says otherwise.
			b.mu.Lock()
			if b.ph.Load() == p {
				q := *p
				q.full = true
				b.ph.Store(&q)
			}
			b.mu.Unlock()
			return b.fleetFull(now)
		}
		if err := b.admitHere(now, t); err != errAskFleet {
			return err
		}
	}
	return b.fleetFull(now)
}

// fleetFull is the refusal of a call while every trial of the fleet is
// taken: the trials are decided within TrialTimeout.
func (b *Breaker) fleetFull(now time.Time) error {
	return &OpenError{State: HalfOpen, RetryAt: now.Add(b.s.TrialTimeout), RetryAfter: b.s.TrialTimeout}
}

// TakeCounts returns the calls this breaker counted in its window since
// the last TakeCounts, with the fleet's episode they belong to, and
// forgets them: the caller adds them to the fleet's window. Only a shared
// breaker, CLOSED and not forced, counts them; a transition drops them.
func (b *Breaker) TakeCounts() (Counts, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.fleet.unsent
	b.fleet.unsent = Counts{}
	return c, b.fleet.episode
}

// Follow makes a shared breaker take the state the fleet decided, at now.
// A forced breaker stays forced, and one that is not shared (Share false)
// ignores the fleet. A new episode (the fleet opened or closed since the
// last Follow) moves the breaker to the fleet's state; within an episode,
// the breaker opens when the fleet is OPEN or HALF_OPEN, and closes when
// it is HALF_OPEN itself and the fleet CLOSED. A breaker that opened on its
// own window while the fleet was out of reach, or that was OPEN when the
// fleet lost its state (an episode below the last one), stays OPEN until
// its trials: the fleet then tells it whether to close.
func (b *Breaker) Follow(st FleetState, now time.Time) {
	b.mu.Lock()
	if !b.fleet.shared || b.forced {
		b.mu.Unlock()
		return
	}
	b.fleet.window = st.Window
	// An episode below the last one seen is a fleet that lost its state
	// (Redis restarted empty, the key was evicted): that is news of
	// nothing, and the breaker keeps its own state until its trials.
	lost := st.Episode < b.fleet.episode
	changed := st.Episode != b.fleet.episode && !lost
	if st.Episode != b.fleet.episode {
		b.fleet.episode = st.Episode
		b.fleet.unsent = Counts{}
	}
	switch {
	case st.State == Closed && b.state == HalfOpen, st.State == Closed && changed && b.state != Closed:
		b.transition(Closed, false, now)
	case st.State != Closed && (b.state == Closed || changed && !(b.state == Open && b.openedAt.Equal(st.OpenedAt))):
		b.transition(Open, false, st.OpenedAt)
	case st.State == Open && b.state == HalfOpen && b.fleet.half:
		// The fleet is not ready for trials yet: this clock ran ahead.
		b.transition(Open, false, st.OpenedAt)
	case b.state == HalfOpen && b.fleet.half:
		// A fleet refusal lasts until the fleet is heard from again.
		if p := b.ph.Load(); p.full {
			q := *p
			q.full = false
			b.ph.Store(&q)
		}
	}
	notify := len(b.pending) > 0
	b.mu.Unlock()
	if notify {
		b.deliver()
	}
}

// Share makes a breaker with Settings.Fleet follow its fleet (true, as it
// does from New) or decide on its own window (false), at now: the caller
// cannot reach the fleet. A breaker that stops sharing in the fleet's
// trials starts its own; one whose own window already reaches a threshold
// opens.
func (b *Breaker) Share(on bool, now time.Time) {
	if b.s.Fleet == nil {
		return
	}
	b.mu.Lock()
	if b.fleet.shared != on {
		b.fleet.shared = on
		b.fleet.unsent = Counts{}
		switch {
		case on || b.forced:
		case b.state == HalfOpen && b.fleet.half:
			b.transition(HalfOpen, false, now)
		case b.state == Closed:
			b.win.advance(b.second(now))
			if b.tripped() {
				b.transition(Open, false, now)
			}
		}
	}
	notify := len(b.pending) > 0
	b.mu.Unlock()
	if notify {
		b.deliver()
	}
}
