package breaker

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// trialDesk is the trials of a fleet as a test sees them: it admits up to
// free trials and records what is reported. The fleet's window and
// decisions are the caller's (Follow); the gateway's tests run the real
// one in Redis.
type trialDesk struct {
	mu      sync.Mutex
	free    int
	next    uint64
	done    []Outcome
	asked   int
	onTrial func() // called on a refusal, before Trial returns
}

func (d *trialDesk) Trial(now time.Time) (uint64, bool) {
	d.mu.Lock()
	d.asked++
	if d.free > 0 {
		d.free--
		d.next++
		id := d.next
		d.mu.Unlock()
		return id, true
	}
	f := d.onTrial
	d.mu.Unlock()
	if f != nil {
		f()
	}
	return 0, false
}

func (d *trialDesk) TrialDone(id uint64, o Outcome, slow bool, end time.Time) {
	d.mu.Lock()
	d.done = append(d.done, o)
	d.mu.Unlock()
}

func fleetBreaker(t *testing.T, d *trialDesk) *Breaker {
	t.Helper()
	s := settings()
	s.MinCalls = 4
	s.Fleet = d
	b, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A shared breaker counts its calls for the fleet and opens only when the
// fleet says so, however its own window looks.
func TestFleetCountsAndFollows(t *testing.T) {
	b := fleetBreaker(t, &trialDesk{})
	for i := range 10 {
		done, err := b.Allow(at(time.Duration(i) * time.Millisecond))
		if err != nil {
			t.Fatalf("call %d refused while the fleet is closed: %v", i, err)
		}
		done(Outcome{Failed: i%2 == 0, Duration: time.Millisecond}, at(time.Duration(i)*time.Millisecond))
	}
	if got := b.State(); got != Closed {
		t.Fatalf("a shared breaker opened on its own window: %v", got)
	}
	c, ep := b.TakeCounts()
	if c != (Counts{Calls: 10, Failures: 5}) || ep != 0 {
		t.Fatalf("TakeCounts = %+v, episode %d; want 10 calls, 5 failures, episode 0", c, ep)
	}
	if c, _ := b.TakeCounts(); c != (Counts{}) {
		t.Fatalf("the counts were given twice: %+v", c)
	}
	b.Follow(FleetState{State: Closed, Window: Counts{Calls: 30, Failures: 3}}, at(time.Second))
	if s := b.Snapshot(at(time.Second)); s.Calls != 30 || s.Failures != 3 {
		t.Fatalf("Snapshot shows %d calls, %d failures; want the fleet's 30, 3", s.Calls, s.Failures)
	}
	b.Follow(FleetState{State: Open, Episode: 1, OpenedAt: at(time.Second)}, at(1100*time.Millisecond))
	_, err := b.Allow(at(2 * time.Second))
	var oe *OpenError
	if !errors.As(err, &oe) || oe.RetryAt != at(31*time.Second) {
		t.Fatalf("after the fleet opened at 1s: %v; want open until 31s", err)
	}
}

// The trials of a shared breaker are the fleet's: it asks for each, and
// once the fleet refuses, the calls that follow are refused without asking
// until the fleet is heard from.
func TestFleetTrials(t *testing.T) {
	d := &trialDesk{free: 2}
	b := fleetBreaker(t, d)
	b.Follow(FleetState{State: Open, Episode: 1, OpenedAt: at(0)}, at(0))
	var dones []func(Outcome, time.Time)
	for i := range 2 {
		done, err := b.Allow(at(31 * time.Second))
		if err != nil {
			t.Fatalf("trial %d refused: %v", i, err)
		}
		dones = append(dones, done)
	}
	for i := range 3 {
		if _, err := b.Allow(at(31 * time.Second)); !errors.Is(err, ErrOpen) {
			t.Fatalf("call %d after the fleet's trials were taken: %v", i, err)
		}
	}
	if d.asked != 3 {
		t.Fatalf("the fleet was asked %d times; want 3 (2 trials, 1 refusal, then none)", d.asked)
	}
	b.Follow(FleetState{State: HalfOpen, Episode: 1, OpenedAt: at(0)}, at(31*time.Second))
	if _, err := b.Allow(at(31 * time.Second)); !errors.Is(err, ErrOpen) || d.asked != 4 {
		t.Fatalf("after Follow: %v, asked %d; want a refusal after asking again", err, d.asked)
	}
	for _, done := range dones {
		done(Outcome{Duration: time.Millisecond}, at(32*time.Second))
	}
	if len(d.done) != 2 {
		t.Fatalf("%d trials reported to the fleet; want 2", len(d.done))
	}
	b.Follow(FleetState{State: Closed, Episode: 2}, at(32*time.Second))
	if b.State() != Closed {
		t.Fatalf("the fleet closed, the breaker is %v", b.State())
	}
}

// A breaker that cannot reach its fleet decides on its own window, which
// counted all along, and follows the fleet again when Share says so.
func TestFleetFallback(t *testing.T) {
	d := &trialDesk{}
	b := fleetBreaker(t, d)
	for i := range 4 {
		done, _ := b.Allow(at(0))
		done(Outcome{Failed: true}, at(0))
		_ = i
	}
	if b.State() != Closed {
		t.Fatal("opened on its own window while shared")
	}
	b.Share(false, at(time.Second))
	if b.State() != Open {
		t.Fatalf("after Share(false) with 4 failures of 4 in its window: %v", b.State())
	}
	// Its own trials now: the fleet is not asked.
	if _, err := b.Allow(at(32 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if d.asked != 0 {
		t.Fatalf("the fleet was asked %d times while out of reach", d.asked)
	}
	b.Share(true, at(33*time.Second))
	b.Follow(FleetState{State: Open, Episode: 3, OpenedAt: at(33 * time.Second)}, at(33*time.Second))
	if _, err := b.Allow(at(34 * time.Second)); !errors.Is(err, ErrOpen) {
		t.Fatalf("back with the fleet, which opened at 33s: %v", err)
	}
}

// A forced breaker keeps its force whatever the fleet decides.
func TestFleetForce(t *testing.T) {
	b := fleetBreaker(t, &trialDesk{})
	b.Force(ForceClosed, at(0))
	b.Follow(FleetState{State: Open, Episode: 1, OpenedAt: at(0)}, at(0))
	if st, forced := b.Forced(); !forced || st != Closed {
		t.Fatalf("the fleet's OPEN lifted a force closed: %v %v", st, forced)
	}
	b.Force(Auto, at(time.Second))
	b.Follow(FleetState{State: Open, Episode: 1, OpenedAt: at(0)}, at(time.Second))
	if b.State() != Open {
		t.Fatalf("after auto, the fleet's OPEN: %v", b.State())
	}
}

// A call the fleet refuses while its state moves under it is decided
// again, in the new state.
func TestFleetTrialAnswerMovesBreaker(t *testing.T) {
	d := &trialDesk{}
	b := fleetBreaker(t, d)
	d.onTrial = func() { b.Follow(FleetState{State: Closed, Episode: 2}, at(31*time.Second)) }
	b.Follow(FleetState{State: Open, Episode: 1, OpenedAt: at(0)}, at(0))
	done, err := b.Allow(at(31 * time.Second))
	if err != nil {
		t.Fatalf("the fleet closed while asked for a trial: %v", err)
	}
	done(Outcome{}, at(31*time.Second))
	if b.State() != Closed || len(d.done) != 0 {
		t.Fatalf("state %v, %d trials reported; want CLOSED, none", b.State(), len(d.done))
	}
}

// A breaker that resumes another (a reload changed the settings) has
// seen what the other saw of the fleet: an opening of its own, while the
// fleet was out of reach, lasts until its trials as it would have.
func TestFleetResume(t *testing.T) {
	old := fleetBreaker(t, &trialDesk{})
	old.Follow(FleetState{State: Closed, Episode: 3}, at(0))
	old.Share(false, at(0))
	for range 4 {
		done, _ := old.Allow(at(0))
		done(Outcome{Failed: true}, at(0))
	}
	old.Share(true, at(time.Second))
	b := fleetBreaker(t, &trialDesk{})
	b.Resume(old, at(time.Second))
	b.Follow(FleetState{State: Closed, Episode: 3}, at(2*time.Second))
	if b.State() != Open {
		t.Fatalf("the resumed breaker, open on its own in the fleet's episode 3: %v, want OPEN", b.State())
	}
	b.Follow(FleetState{State: Closed, Episode: 4}, at(3*time.Second))
	if b.State() != Closed {
		t.Fatalf("the fleet closed anew (episode 4): %v, want CLOSED", b.State())
	}
}

// A fleet that lost its state (its episode counts from 0 again) does not
// close an open breaker before its trials.
func TestFleetLostStateKeepsOpen(t *testing.T) {
	b := fleetBreaker(t, &trialDesk{})
	b.Follow(FleetState{State: Open, Episode: 3, OpenedAt: at(time.Second)}, at(time.Second))
	b.Follow(FleetState{State: Closed, Episode: 0}, at(2*time.Second))
	if got := b.State(); got != Open {
		t.Fatalf("after the fleet lost its state: %v; want OPEN until the trials", got)
	}
	// The fleet opens again from there: episode 1 is news.
	b.Follow(FleetState{State: Open, Episode: 1, OpenedAt: at(3 * time.Second)}, at(3*time.Second))
	_, err := b.Allow(at(4 * time.Second))
	var oe *OpenError
	if !errors.As(err, &oe) || oe.RetryAt != at(33*time.Second) {
		t.Fatalf("after the fleet opened again at 3s: %v; want open until 33s", err)
	}
}
