package breaker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// settings are config's defaults (docs/configuration.md, breaker) with a
// 3 s upstream timeout.
func settings() Settings {
	return Settings{
		Window:        10 * time.Second,
		MinCalls:      20,
		FailureRate:   0.5,
		SlowCallRate:  1,
		OpenFor:       30 * time.Second,
		HalfOpenCalls: 10,
		TrialTimeout:  3 * time.Second,
	}
}

type event struct {
	from, to State
	at       time.Time
}

func (e event) String() string {
	return fmt.Sprintf("%v->%v@%v", e.from, e.to, e.at.Sub(t0))
}

// recorder collects OnTransition calls.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func (r *recorder) record(from, to State, at time.Time) {
	r.mu.Lock()
	r.events = append(r.events, event{from, to, at})
	r.mu.Unlock()
}

func (r *recorder) list() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

func (r *recorder) String() string {
	var parts []string
	for _, e := range r.list() {
		parts = append(parts, e.String())
	}
	return strings.Join(parts, " ")
}

// checkChain fails unless the transitions form one valid sequence from
// CLOSED ending in final: each starts where the last ended, none stays put,
// and only the edges of the state machine (or a Force, if forced) occur.
func checkChain(t *testing.T, events []event, final State, forced bool) {
	t.Helper()
	cur := Closed
	for i, e := range events {
		if e.from != cur {
			t.Fatalf("transition %d is %v, but the breaker was %v", i, e, cur)
		}
		if e.from == e.to {
			t.Fatalf("transition %d goes nowhere: %v", i, e)
		}
		if !forced && e.from == Closed && e.to != Open {
			t.Fatalf("transition %d: %v", i, e)
		}
		if !forced && e.from == Open && e.to != HalfOpen {
			t.Fatalf("transition %d: %v", i, e)
		}
		if e.to == HalfOpen && e.from != Open {
			t.Fatalf("transition %d: HALF_OPEN entered from %v", i, e.from)
		}
		cur = e.to
	}
	if cur != final {
		t.Fatalf("transitions end in %v, breaker is %v", cur, final)
	}
}

func newBreaker(t testing.TB, s Settings) (*Breaker, *recorder) {
	t.Helper()
	r := &recorder{}
	s.OnTransition = r.record
	b, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return b, r
}

// run makes n calls at now with outcome o and returns how many were
// refused.
func run(t testing.TB, b *Breaker, now time.Time, n int, o Outcome) (refused int) {
	t.Helper()
	for range n {
		done, err := b.Allow(now)
		if err != nil {
			if !errors.Is(err, ErrOpen) || done != nil {
				t.Fatalf("Allow: done %p, err %v", done, err)
			}
			refused++
			continue
		}
		done(o, now)
	}
	return refused
}

var (
	ok     = Outcome{Duration: 10 * time.Millisecond}
	failed = Outcome{Failed: true, Duration: 10 * time.Millisecond}
	slow   = Outcome{Duration: 2 * time.Second}
	both   = Outcome{Failed: true, Duration: 2 * time.Second}
	gone   = Outcome{Failed: true, Duration: 2 * time.Second, Cancelled: true}
)

// TestClosed walks the CLOSED decisions: each step makes n calls at a time
// and the breaker must be in want after it.
func TestClosed(t *testing.T) {
	type step struct {
		at   time.Duration
		n    int
		o    Outcome
		want State
	}
	slowAt := func(s Settings) Settings { s.SlowCallDuration = time.Second; return s }
	tests := []struct {
		name  string
		s     Settings
		steps []step
	}{
		{"19 failures are below min_calls", settings(), []step{
			{0, 19, failed, Closed},
		}},
		{"opens at min_calls with the rate reached", settings(), []step{
			{0, 10, ok, Closed},
			{0, 9, failed, Closed},
			{0, 1, failed, Open}, // 10/20 = 0.5
		}},
		{"stays closed just below the rate", settings(), []step{
			{0, 11, ok, Closed},
			{0, 9, failed, Closed}, // 9/20
			{0, 1, ok, Closed},     // 9/21
			{0, 1, failed, Closed}, // 10/22
			{0, 1, failed, Closed}, // 11/23
			{0, 1, failed, Open},   // 12/24
		}},
		{"a rate that is not a binary fraction opens exactly", func() Settings {
			s := settings()
			s.MinCalls, s.FailureRate = 10, 0.3
			return s
		}(), []step{
			{0, 7, ok, Closed},
			{0, 3, failed, Open}, // 3/10 == 0.3, though 0.3*10 > 3
		}},
		{"the slow-call rate opens it", func() Settings {
			s := slowAt(settings())
			s.SlowCallRate = 0.5
			return s
		}(), []step{
			{0, 10, ok, Closed},
			{0, 9, slow, Closed},
			{0, 1, slow, Open},
		}},
		{"a call as long as slow_call_duration is not slow", func() Settings {
			s := slowAt(settings())
			s.SlowCallRate = 0.5
			return s
		}(), []step{
			{0, 20, Outcome{Duration: time.Second}, Closed},
		}},
		{"slow_call_duration 0: calls are never slow", func() Settings {
			s := settings()
			s.SlowCallRate = 0.05
			return s
		}(), []step{
			{0, 40, Outcome{Duration: time.Hour}, Closed},
		}},
		{"slow and failed counts as failed", func() Settings {
			s := slowAt(settings())
			s.SlowCallRate = 1
			return s
		}(), []step{
			{0, 10, ok, Closed},
			{0, 10, both, Open}, // failures 0.5; slow 0.5 < 1
		}},
		{"slow and failed counts as slow", func() Settings {
			s := slowAt(settings())
			s.FailureRate, s.SlowCallRate = 1, 0.5
			return s
		}(), []step{
			{0, 10, ok, Closed},
			{0, 10, both, Open}, // slow 0.5; failures 0.5 < 1
		}},
		{"cancelled calls are not counted", settings(), []step{
			{0, 100, gone, Closed},
			{0, 19, failed, Closed}, // still below min_calls
			{0, 1, failed, Open},
		}},
		{"failures 11 s ago have left a 10 s window", settings(), []step{
			{0, 19, failed, Closed},
			{11 * time.Second, 1, failed, Closed},
		}},
		{"failures 10 s ago have left a 10 s window", settings(), []step{
			{0, 19, failed, Closed},
			{10 * time.Second, 1, failed, Closed},
		}},
		{"failures 9 s ago are in a 10 s window", settings(), []step{
			{0, 19, failed, Closed},
			{9*time.Second + 999*time.Millisecond, 1, failed, Open},
		}},
		{"the window slides second by second", settings(), []step{
			{0, 5, failed, Closed},
			{3 * time.Second, 5, failed, Closed},
			{6 * time.Second, 5, failed, Closed},
			{10 * time.Second, 5, failed, Closed}, // the first 5 left: 15 calls
			{12 * time.Second, 4, failed, Closed}, // 19 calls
			{12 * time.Second, 1, failed, Open},
		}},
		{"a report earlier than the first still counts", settings(), []step{
			{5 * time.Second, 10, failed, Closed},
			{4*time.Second + 500*time.Millisecond, 10, failed, Open},
		}},
		{"a report older than the window is dropped", settings(), []step{
			{20 * time.Second, 19, failed, Closed},
			{10 * time.Second, 5, failed, Closed},
			{20 * time.Second, 1, failed, Open},
		}},
		{"window of one second", func() Settings {
			s := settings()
			s.Window, s.MinCalls = time.Second, 2
			return s
		}(), []step{
			{0, 1, failed, Closed},
			{time.Second, 1, failed, Closed},
			{time.Second + 999*time.Millisecond, 1, failed, Open},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, r := newBreaker(t, tt.s)
			for i, st := range tt.steps {
				if refused := run(t, b, at(st.at), st.n, st.o); refused != 0 {
					t.Fatalf("step %d: %d calls refused", i, refused)
				}
				if got := b.State(); got != st.want {
					t.Fatalf("step %d: state %v, want %v (transitions %v)", i, got, st.want, r)
				}
			}
			checkChain(t, r.list(), b.State(), false)
		})
	}
}

func TestSnapshotCounts(t *testing.T) {
	s := settings()
	s.SlowCallDuration = time.Second
	b, _ := newBreaker(t, s)
	run(t, b, at(0), 3, ok)
	run(t, b, at(time.Second), 2, failed)
	run(t, b, at(2*time.Second), 4, slow)
	run(t, b, at(3*time.Second), 5, both)
	run(t, b, at(3*time.Second), 7, gone)

	for _, tt := range []struct {
		now                   time.Duration
		calls, failures, slow int64
	}{
		{3 * time.Second, 14, 7, 9},
		{9 * time.Second, 14, 7, 9},
		{10 * time.Second, 11, 7, 9},  // the oks left
		{11 * time.Second, 9, 5, 9},   // the failures left
		{13 * time.Second, 0, 0, 0},   // everything left
		{time.Second, 14, 7, 9},       // earlier than the last report
		{time.Hour, 0, 0, 0},          // long after
		{-time.Hour, 14, 7, 9},        // long before
		{12*time.Second + 1, 5, 5, 5}, // only the both
	} {
		sn := b.Snapshot(at(tt.now))
		if sn.Calls != tt.calls || sn.Failures != tt.failures || sn.Slow != tt.slow {
			t.Errorf("Snapshot at %v: calls %d failures %d slow %d, want %d %d %d",
				tt.now, sn.Calls, sn.Failures, sn.Slow, tt.calls, tt.failures, tt.slow)
		}
		if sn.State != Closed || sn.Forced || !sn.OpenedAt.IsZero() || !sn.NextTrial.IsZero() {
			t.Errorf("Snapshot at %v: %+v", tt.now, sn)
		}
	}
}

func TestDoneTwiceCountsOnce(t *testing.T) {
	s := settings()
	s.MinCalls, s.FailureRate = 2, 1
	b, _ := newBreaker(t, s)
	done, err := b.Allow(at(0))
	if err != nil {
		t.Fatal(err)
	}
	done(failed, at(0))
	done(failed, at(0))
	if sn := b.Snapshot(at(0)); sn.Calls != 1 || sn.State != Closed {
		t.Fatalf("after done twice: %+v", sn)
	}
}

// openAt opens b (settings()) with 20 failures at d.
func openAt(t testing.TB, b *Breaker, d time.Duration) {
	t.Helper()
	run(t, b, at(d), 20, failed)
	if b.State() != Open {
		t.Fatalf("breaker is %v after 20 failures", b.State())
	}
}

func openError(t *testing.T, err error) *OpenError {
	t.Helper()
	var oe *OpenError
	if !errors.As(err, &oe) || !errors.Is(err, ErrOpen) {
		t.Fatalf("err = %v, want an *OpenError matching ErrOpen", err)
	}
	return oe
}

func TestOpenRefusesUntilOpenFor(t *testing.T) {
	b, r := newBreaker(t, settings())
	openAt(t, b, 5*time.Second)

	for _, d := range []time.Duration{5 * time.Second, 20 * time.Second, 35*time.Second - time.Millisecond} {
		done, err := b.Allow(at(d))
		if done != nil {
			t.Fatalf("refused call at %v got a done", d)
		}
		oe := openError(t, err)
		want := OpenError{State: Open, RetryAt: at(35 * time.Second), RetryAfter: 35*time.Second - d}
		if *oe != want {
			t.Errorf("at %v: %+v, want %+v", d, *oe, want)
		}
		if oe.Error() != "breaker: open, next trial in "+want.RetryAfter.String() {
			t.Errorf("Error() = %q", oe.Error())
		}
	}
	sn := b.Snapshot(at(10 * time.Second))
	if sn.State != Open || !sn.OpenedAt.Equal(at(5*time.Second)) || !sn.NextTrial.Equal(at(35*time.Second)) || sn.Calls != 0 {
		t.Errorf("Snapshot: %+v", sn)
	}
	checkChain(t, r.list(), Open, false)
}

// halfOpen opens b at 0 and starts its 10 trials at 30 s, holding their
// done functions.
func halfOpen(t *testing.T, b *Breaker) []func(Outcome, time.Time) {
	t.Helper()
	openAt(t, b, 0)
	var trials []func(Outcome, time.Time)
	for i := range 10 {
		done, err := b.Allow(at(30 * time.Second))
		if err != nil {
			t.Fatalf("trial %d refused: %v", i, err)
		}
		trials = append(trials, done)
	}
	if b.State() != HalfOpen {
		t.Fatalf("state %v after the trials started", b.State())
	}
	return trials
}

func TestHalfOpenAdmitsExactlyTheTrials(t *testing.T) {
	b, _ := newBreaker(t, settings())
	trials := halfOpen(t, b)
	for _, d := range []time.Duration{30 * time.Second, 31 * time.Second, 33 * time.Second} {
		done, err := b.Allow(at(d))
		if done != nil {
			t.Fatalf("an 11th trial at %v was admitted", d)
		}
		oe := openError(t, err)
		want := OpenError{State: HalfOpen, RetryAt: at(33 * time.Second), RetryAfter: 33*time.Second - d}
		if *oe != want {
			t.Errorf("refused at %v: %+v, want %+v", d, *oe, want)
		}
		if msg := "breaker: half-open, all trial calls in flight; decided within " + want.RetryAfter.String(); oe.Error() != msg {
			t.Errorf("Error() = %q, want %q", oe.Error(), msg)
		}
	}
	sn := b.Snapshot(at(31 * time.Second))
	if sn.State != HalfOpen || sn.TrialsInFlight != 10 || sn.TrialsDone != 0 || !sn.NextTrial.IsZero() {
		t.Errorf("Snapshot: %+v", sn)
	}
	trials[0](ok, at(31*time.Second))
	trials[1](failed, at(31*time.Second))
	sn = b.Snapshot(at(31 * time.Second))
	if sn.TrialsInFlight != 8 || sn.TrialsDone != 2 || sn.TrialFailures != 1 {
		t.Errorf("Snapshot: %+v", sn)
	}
	// A reported trial does not free its slot: still exactly ten.
	if refused := run(t, b, at(31*time.Second), 5, ok); refused != 5 {
		t.Errorf("%d of 5 calls refused, want all", refused)
	}
}

func TestTrialsDecide(t *testing.T) {
	for _, tt := range []struct {
		name           string
		slowRate       float64
		failures, slow int
		want           State
	}{
		{"all succeed", 1, 0, 0, Closed},
		{"failures below the rate", 1, 4, 0, Closed},
		{"failures at the rate", 1, 5, 0, Open},
		{"all fail", 1, 10, 0, Open},
		{"slow below the rate", 0.5, 0, 4, Closed},
		{"slow at the rate", 0.5, 0, 5, Open},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := settings()
			s.SlowCallDuration, s.SlowCallRate = time.Second, tt.slowRate
			b, r := newBreaker(t, s)
			trials := halfOpen(t, b)
			for i, done := range trials {
				o := ok
				switch {
				case i < tt.failures:
					o = failed
				case i < tt.failures+tt.slow:
					o = slow
				}
				if b.State() != HalfOpen {
					t.Fatalf("decided after %d of 10 outcomes", i)
				}
				done(o, at(31*time.Second+time.Duration(i)*time.Millisecond))
			}
			end := at(31*time.Second + 9*time.Millisecond)
			if got := b.State(); got != tt.want {
				t.Fatalf("state %v, want %v", got, tt.want)
			}
			ev := r.list()
			if last := ev[len(ev)-1]; last != (event{HalfOpen, tt.want, end}) {
				t.Errorf("last transition %v", last)
			}
			checkChain(t, ev, tt.want, false)

			if tt.want == Open {
				// A fresh OpenFor from the last outcome.
				_, err := b.Allow(end)
				if oe := openError(t, err); !oe.RetryAt.Equal(end.Add(30*time.Second)) || oe.RetryAfter != 30*time.Second {
					t.Errorf("reopened: %+v", oe)
				}
				if sn := b.Snapshot(end); !sn.OpenedAt.Equal(end) {
					t.Errorf("OpenedAt %v, want %v", sn.OpenedAt, end)
				}
				return
			}
			// CLOSED, and the trials are not in the window
			// (TestClosedWindowIsEmptyAfterTrials shows it is emptied).
			if sn := b.Snapshot(end); sn.Calls != 0 || sn.State != Closed {
				t.Errorf("Snapshot after closing: %+v", sn)
			}
		})
	}
}

func TestClosedWindowIsEmptyAfterTrials(t *testing.T) {
	// A short OpenFor, so the failures that opened the breaker would still
	// be in the window if it were not emptied.
	s := settings()
	s.OpenFor = time.Second
	b, _ := newBreaker(t, s)
	openAt(t, b, 0)
	for range 10 {
		done, err := b.Allow(at(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		done(ok, at(time.Second))
	}
	if b.State() != Closed {
		t.Fatalf("state %v", b.State())
	}
	run(t, b, at(time.Second), 19, failed)
	if sn := b.Snapshot(at(time.Second)); sn.State != Closed || sn.Calls != 19 {
		t.Fatalf("Snapshot: %+v", sn)
	}
}

func TestTrialTimeout(t *testing.T) {
	t.Run("found by Allow", func(t *testing.T) {
		b, r := newBreaker(t, settings())
		trials := halfOpen(t, b) // started at 30 s, timeout 3 s
		for _, done := range trials[1:] {
			done(ok, at(31*time.Second))
		}
		// Reported within TrialTimeout at 33 s exactly: not yet late.
		if _, err := b.Allow(at(33 * time.Second)); openError(t, err).State != HalfOpen {
			t.Fatalf("refusal from %v", err)
		}
		// Just after: the lost trial counts as failed, 1/10 closes the
		// breaker, and this call is admitted CLOSED.
		done, err := b.Allow(at(33*time.Second + 1))
		if err != nil {
			t.Fatalf("Allow after the timeout: %v (transitions %v)", err, r)
		}
		done(failed, at(33*time.Second+1))
		if b.State() != Closed {
			t.Fatalf("state %v", b.State())
		}
		// The lost trial reports at last: ignored.
		trials[0](failed, at(40*time.Second))
		if sn := b.Snapshot(at(40 * time.Second)); sn.Calls != 1 || sn.Failures != 1 {
			t.Errorf("Snapshot: %+v", sn)
		}
		checkChain(t, r.list(), Closed, false)
	})
	t.Run("a late success stays a failure", func(t *testing.T) {
		s := settings()
		s.HalfOpenCalls = 2
		b, _ := newBreaker(t, s)
		openAt(t, b, 0)
		first, _ := b.Allow(at(30 * time.Second))
		second, _ := b.Allow(at(32 * time.Second))
		// The first trial is late at 33.5 s, the second is not.
		if _, err := b.Allow(at(33*time.Second + 500*time.Millisecond)); err == nil {
			t.Fatal("a third trial was admitted")
		}
		first(ok, at(34*time.Second))
		if sn := b.Snapshot(at(34 * time.Second)); sn.TrialsDone != 1 || sn.TrialFailures != 1 || sn.TrialsInFlight != 1 {
			t.Fatalf("Snapshot: %+v", sn)
		}
		second(ok, at(34*time.Second)) // 1 of 2 failed: 0.5 reopens
		if b.State() != Open {
			t.Fatalf("state %v", b.State())
		}
	})
	t.Run("found by done, reopens", func(t *testing.T) {
		s := settings()
		s.FailureRate = 0.2
		b, r := newBreaker(t, s)
		trials := halfOpen(t, b)
		for _, done := range trials[2:] {
			done(ok, at(31*time.Second))
		}
		// Trial 1 reports success, but after its timeout: trial 0 and
		// trial 1 are both late, 2/10 reopens the breaker.
		trials[1](ok, at(34*time.Second))
		if b.State() != Open {
			t.Fatalf("state %v (transitions %v)", b.State(), r)
		}
		if ev := r.list(); ev[len(ev)-1] != (event{HalfOpen, Open, at(34 * time.Second)}) {
			t.Errorf("transitions %v", ev)
		}
		trials[0](ok, at(35*time.Second))
		if sn := b.Snapshot(at(35 * time.Second)); sn.State != Open || !sn.NextTrial.Equal(at(64*time.Second)) {
			t.Errorf("Snapshot: %+v", sn)
		}
	})
}

func TestCancelledTrialFreesItsSlot(t *testing.T) {
	b, _ := newBreaker(t, settings())
	trials := halfOpen(t, b)
	trials[0](gone, at(31*time.Second))
	if sn := b.Snapshot(at(31 * time.Second)); sn.TrialsInFlight != 9 || sn.TrialsDone != 0 {
		t.Fatalf("Snapshot: %+v", sn)
	}
	done, err := b.Allow(at(31 * time.Second))
	if err != nil {
		t.Fatalf("no trial replaced the cancelled one: %v", err)
	}
	if _, err := b.Allow(at(31 * time.Second)); err == nil {
		t.Fatal("an 11th trial was admitted")
	}
	for _, d := range trials[1:] {
		d(ok, at(32*time.Second))
	}
	if b.State() != HalfOpen {
		t.Fatalf("decided on 9 outcomes: %v", b.State())
	}
	done(ok, at(32*time.Second))
	if b.State() != Closed {
		t.Fatalf("state %v", b.State())
	}
}

func TestStaleOutcomesAreIgnored(t *testing.T) {
	s := settings()
	s.HalfOpenCalls = 2
	b, r := newBreaker(t, s)

	// 20 calls admitted CLOSED, still in flight when it opens.
	var closed []func(Outcome, time.Time)
	for range 20 {
		done, err := b.Allow(at(0))
		if err != nil {
			t.Fatal(err)
		}
		closed = append(closed, done)
	}
	openAt(t, b, 0)

	// They end during the trials: the trials alone decide.
	t1, _ := b.Allow(at(30 * time.Second))
	t2, _ := b.Allow(at(30 * time.Second))
	for _, done := range closed[:10] {
		done(failed, at(30*time.Second))
	}
	if sn := b.Snapshot(at(30 * time.Second)); sn.TrialsDone != 0 || sn.TrialsInFlight != 2 {
		t.Fatalf("stale outcomes reached the trials: %+v", sn)
	}
	t1(ok, at(31*time.Second))
	t2(ok, at(31*time.Second))
	if b.State() != Closed {
		t.Fatalf("state %v", b.State())
	}
	// Or after it closed again: the fresh window stays empty.
	for _, done := range closed[10:] {
		done(failed, at(31*time.Second))
	}
	t1(failed, at(31*time.Second)) // and a second report of a trial
	if sn := b.Snapshot(at(31 * time.Second)); sn.Calls != 0 {
		t.Fatalf("stale outcomes reached the new window: %+v", sn)
	}

	// A trial of an earlier HALF_OPEN does not count in a later one.
	openAt(t, b, 40*time.Second)
	old, _ := b.Allow(at(70 * time.Second))
	late, _ := b.Allow(at(70 * time.Second))
	late(failed, at(80*time.Second)) // both late: reopens at 80 s
	if b.State() != Open {
		t.Fatalf("state %v", b.State())
	}
	n1, _ := b.Allow(at(110 * time.Second))
	old(ok, at(110*time.Second))
	if sn := b.Snapshot(at(110 * time.Second)); sn.TrialsDone != 0 || sn.TrialsInFlight != 1 {
		t.Fatalf("a stale trial counted: %+v", sn)
	}
	n1(ok, at(111*time.Second))
	checkChain(t, r.list(), b.State(), false)
}

func TestForce(t *testing.T) {
	b, r := newBreaker(t, settings())

	b.Force(ForceOpen, at(time.Second))
	if s, forced := b.Forced(); s != Open || !forced {
		t.Fatalf("Forced() = %v, %v", s, forced)
	}
	for _, d := range []time.Duration{time.Second, time.Hour} {
		done, err := b.Allow(at(d))
		oe := openError(t, err)
		if done != nil || *oe != (OpenError{State: Open, Forced: true}) || oe.Error() != "breaker: forced open" {
			t.Fatalf("forced open at %v: %+v", d, oe)
		}
	}
	sn := b.Snapshot(at(time.Hour))
	if sn.State != Open || !sn.Forced || !sn.NextTrial.IsZero() || !sn.OpenedAt.Equal(at(time.Second)) {
		t.Fatalf("Snapshot: %+v", sn)
	}
	b.Force(ForceOpen, at(2*time.Second)) // no change
	if sn := b.Snapshot(at(time.Hour)); !sn.OpenedAt.Equal(at(time.Second)) {
		t.Fatalf("forcing open again changed it: %+v", sn)
	}

	// A call admitted forced closed is not recorded, before or after Auto.
	b.Force(ForceClosed, at(2*time.Second))
	if s, forced := b.Forced(); s != Closed || !forced {
		t.Fatalf("Forced() = %v, %v", s, forced)
	}
	inFlight, err := b.Allow(at(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if refused := run(t, b, at(2*time.Second), 100, failed); refused != 0 || b.State() != Closed {
		t.Fatalf("forced closed: %d refused, state %v", refused, b.State())
	}
	if sn := b.Snapshot(at(2 * time.Second)); sn.Calls != 0 || !sn.Forced {
		t.Fatalf("forced closed recorded calls: %+v", sn)
	}

	b.Force(Auto, at(3*time.Second))
	if _, forced := b.Forced(); forced {
		t.Fatal("still forced after Auto")
	}
	inFlight(failed, at(3*time.Second))
	run(t, b, at(3*time.Second), 19, failed)
	if sn := b.Snapshot(at(3 * time.Second)); sn.State != Closed || sn.Forced || sn.Calls != 19 {
		t.Fatalf("after Auto: %+v", sn)
	}

	// Auto resets an automatically open breaker to CLOSED, empty.
	run(t, b, at(3*time.Second), 1, failed)
	if b.State() != Open {
		t.Fatalf("state %v", b.State())
	}
	b.Force(Auto, at(4*time.Second))
	if sn := b.Snapshot(at(4 * time.Second)); sn.State != Closed || sn.Calls != 0 {
		t.Fatalf("after Auto: %+v", sn)
	}

	want := []event{
		{Closed, Open, at(time.Second)},
		{Open, Closed, at(2 * time.Second)},
		{Closed, Open, at(3 * time.Second)},
		{Open, Closed, at(4 * time.Second)},
	}
	if got := r.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}

	defer func() {
		if recover() == nil {
			t.Fatal("Force with an unknown mode did not panic")
		}
	}()
	b.Force(Mode(9), at(5*time.Second))
}

func TestForceOpenFromHalfOpen(t *testing.T) {
	b, r := newBreaker(t, settings())
	trials := halfOpen(t, b)
	b.Force(ForceOpen, at(31*time.Second))
	for _, done := range trials {
		done(ok, at(31*time.Second))
	}
	if s, forced := b.Forced(); s != Open || !forced {
		t.Fatalf("Forced() = %v, %v (transitions %v)", s, forced, r)
	}
	checkChain(t, r.list(), Open, true)
}

func TestTransitionSequence(t *testing.T) {
	s := settings()
	s.HalfOpenCalls = 1
	b, r := newBreaker(t, s)
	openAt(t, b, time.Second)
	run(t, b, at(31*time.Second), 1, failed)
	run(t, b, at(61*time.Second), 1, ok)
	want := []event{
		{Closed, Open, at(time.Second)},
		{Open, HalfOpen, at(31 * time.Second)},
		{HalfOpen, Open, at(31 * time.Second)},
		{Open, HalfOpen, at(61 * time.Second)},
		{HalfOpen, Closed, at(61 * time.Second)},
	}
	if got := r.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions\n%v, want\n%v", got, want)
	}
}

// The callback runs outside the lock: it may read the breaker and even
// change it, and the transition it causes is delivered after it, in order.
func TestCallbackMayUseTheBreaker(t *testing.T) {
	var b *Breaker
	var got []string
	s := settings()
	s.OnTransition = func(from, to State, now time.Time) {
		got = append(got, fmt.Sprintf("%v->%v state=%v", from, to, b.State()))
		_ = b.Snapshot(now)
		if to == Open {
			b.Force(Auto, now)
		}
	}
	b, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	run(t, b, at(0), 20, failed)
	want := []string{"CLOSED->OPEN state=OPEN", "OPEN->CLOSED state=CLOSED"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("callbacks %q, want %q", got, want)
	}
}

func TestCallbackPanicDoesNotStopLaterCallbacks(t *testing.T) {
	var calls int
	s := settings()
	s.OnTransition = func(from, to State, _ time.Time) {
		calls++
		if calls == 1 {
			panic("first")
		}
	}
	b, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() { _ = recover() }()
		b.Force(ForceOpen, at(0))
	}()
	b.Force(Auto, at(0))
	if calls != 2 {
		t.Fatalf("%d callbacks, want 2", calls)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(settings()); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	largest := settings()
	largest.Window, largest.HalfOpenCalls = MaxWindow, MaxHalfOpenCalls
	if _, err := New(largest); err != nil {
		t.Fatalf("the largest window and half_open_calls: %v", err)
	}
	for _, tt := range []struct {
		change func(*Settings)
		want   string
	}{
		{func(s *Settings) { s.Window = 0 }, "Window 0s is shorter than 1s"},
		{func(s *Settings) { s.Window = 1500 * time.Millisecond }, "Window 1.5s is not a whole number of seconds"},
		{func(s *Settings) { s.MinCalls = 0 }, "MinCalls 0 must be at least 1"},
		{func(s *Settings) { s.FailureRate = 0 }, "FailureRate 0 is outside (0,1]"},
		{func(s *Settings) { s.FailureRate = 1.5 }, "FailureRate 1.5 is outside (0,1]"},
		{func(s *Settings) { s.SlowCallDuration = -time.Second }, "SlowCallDuration -1s is negative"},
		{func(s *Settings) { s.SlowCallRate = -0.1 }, "SlowCallRate -0.1 is outside (0,1]"},
		{func(s *Settings) { s.OpenFor = 0 }, "OpenFor 0s must be positive"},
		{func(s *Settings) { s.Window = 2000000 * time.Hour }, "Window 2000000h0m0s is longer than 1h0m0s"},
		{func(s *Settings) { s.HalfOpenCalls = 0 }, "HalfOpenCalls 0 is outside 1..10000"},
		{func(s *Settings) { s.HalfOpenCalls = MaxHalfOpenCalls + 1 }, "HalfOpenCalls 10001 is outside 1..10000"},
		{func(s *Settings) { s.TrialTimeout = 0 }, "TrialTimeout 0s must be positive"},
	} {
		s := settings()
		tt.change(&s)
		b, err := New(s)
		if b != nil || err == nil || !strings.Contains(err.Error(), "breaker: "+tt.want) {
			t.Errorf("want an error containing %q, got %v", tt.want, err)
		}
	}
	// Every problem at once, each a SettingError that names its field.
	var fields []string
	if errs, ok := (&Settings{}).Validate().(interface{ Unwrap() []error }); ok {
		for _, e := range errs.Unwrap() {
			var se *SettingError
			if !errors.As(e, &se) {
				t.Fatalf("%v is not a *SettingError", e)
			}
			fields = append(fields, se.Field)
		}
	}
	if want := []string{"Window", "MinCalls", "FailureRate", "SlowCallRate", "OpenFor", "HalfOpenCalls", "TrialTimeout"}; !slices.Equal(fields, want) {
		t.Errorf("zero Settings: fields %v, want %v", fields, want)
	}
	_, err := New(Settings{})
	for _, field := range []string{"Window", "MinCalls", "FailureRate", "SlowCallRate", "OpenFor", "HalfOpenCalls", "TrialTimeout"} {
		if err == nil || !strings.Contains(err.Error(), field+" ") {
			t.Errorf("zero Settings: %v does not name %s", err, field)
		}
	}
}

func TestStrings(t *testing.T) {
	for v, want := range map[fmt.Stringer]string{
		Closed: "CLOSED", Open: "OPEN", HalfOpen: "HALF_OPEN", State(7): "State(7)",
		Auto: "auto", ForceOpen: "force_open", ForceClosed: "force_closed", Mode(7): "Mode(7)",
	} {
		if got := v.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}

// clock is the tests' shared time: each reading moves it on by step, so
// goroutines see time pass without sleeping.
type clock struct {
	ns   atomic.Int64
	step time.Duration
}

func (c *clock) now() time.Time { return t0.Add(time.Duration(c.ns.Add(int64(c.step)))) }

// Many goroutines report at once: the transition they cause happens once.
func TestConcurrentReportsTransitionOnce(t *testing.T) {
	const n = 64
	s := settings()
	s.MinCalls, s.HalfOpenCalls = n, n
	b, r := newBreaker(t, s)
	report := func(state State, o Outcome, now time.Time) {
		dones := make([]func(Outcome, time.Time), n)
		for i := range dones {
			var err error
			if dones[i], err = b.Allow(now); err != nil {
				t.Fatal(err)
			}
		}
		if b.State() != state {
			t.Fatalf("state %v, want %v", b.State(), state)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, done := range dones {
			wg.Go(func() {
				<-start
				done(o, now)
			})
		}
		close(start)
		wg.Wait()
	}
	report(Closed, failed, at(0))              // CLOSED -> OPEN
	report(HalfOpen, ok, at(30*time.Second))   // -> HALF_OPEN -> CLOSED
	report(Closed, failed, at(31*time.Second)) // -> OPEN
	want := []event{
		{Closed, Open, at(0)},
		{Open, HalfOpen, at(30 * time.Second)},
		{HalfOpen, Closed, at(30 * time.Second)},
		{Closed, Open, at(31 * time.Second)},
	}
	if got := r.list(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

// 64 goroutines make calls with mixed outcomes while time passes, so the
// breaker cycles through every state; the transitions must form one valid
// chain, and the trial slots must never be overfilled.
func TestConcurrentCycles(t *testing.T) {
	const goroutines, calls = 64, 3000
	s := Settings{
		Window:           2 * time.Second,
		MinCalls:         20,
		FailureRate:      0.5,
		SlowCallDuration: 5 * time.Millisecond,
		SlowCallRate:     0.8,
		OpenFor:          50 * time.Millisecond,
		HalfOpenCalls:    5,
		TrialTimeout:     20 * time.Millisecond,
	}
	b, r := newBreaker(t, s)
	c := &clock{step: 20 * time.Microsecond}
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range calls {
				// Phases of health and sickness, so it both opens and
				// closes.
				sick := (i/500)%2 == 1
				done, err := b.Allow(c.now())
				if err != nil {
					var oe *OpenError
					if done != nil || !errors.As(err, &oe) || oe.RetryAfter < 0 {
						t.Errorf("refusal: done %p, err %v", done, err)
						return
					}
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				if sn := b.Snapshot(c.now()); sn.TrialsInFlight > s.HalfOpenCalls {
					t.Errorf("%d trials in flight", sn.TrialsInFlight)
				}
				o := Outcome{Duration: time.Duration(rng.IntN(8)) * time.Millisecond}
				o.Failed = rng.IntN(100) < map[bool]int{false: 10, true: 90}[sick]
				o.Cancelled = rng.IntN(100) < 5
				switch rng.IntN(100) {
				case 0: // lost: never reported
				case 1: // reported twice
					done(o, c.now())
					done(Outcome{Failed: true}, c.now())
				default:
					done(o, c.now())
				}
			}
		})
	}
	wg.Wait()
	ev := r.list()
	checkChain(t, ev, b.State(), false)
	seen := map[[2]State]int{}
	for _, e := range ev {
		seen[[2]State{e.from, e.to}]++
	}
	for _, edge := range [][2]State{{Closed, Open}, {Open, HalfOpen}, {HalfOpen, Closed}, {HalfOpen, Open}} {
		if seen[edge] == 0 {
			t.Errorf("no %v->%v transition in %d (admitted %d, refused %d)", edge[0], edge[1], len(ev), admitted.Load(), refused.Load())
		}
	}
	t.Logf("%d transitions, %d admitted, %d refused", len(ev), admitted.Load(), refused.Load())
}

// While OPEN and HALF_OPEN, the test itself counts the trials in flight:
// every call fails, so the breaker never closes and every call it admits
// is a trial.
func TestConcurrentTrialsNeverExceedHalfOpenCalls(t *testing.T) {
	const goroutines, want = 64, 600
	s := settings()
	s.OpenFor, s.HalfOpenCalls = time.Millisecond, 4
	s.TrialTimeout = time.Hour // a timed-out trial leaves the breaker's count, not the test's
	b, r := newBreaker(t, s)
	openAt(t, b, 0)
	c := &clock{step: 10 * time.Microsecond}
	var inFlight, most, trials atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			// A trial is held over a few turns of the loop, and every
			// turn yields, so that trials of different goroutines
			// overlap.
			var held func(Outcome, time.Time)
			report := func() {
				inFlight.Add(-1)
				held(Outcome{Failed: true, Cancelled: rng.IntN(4) == 0}, c.now())
				held = nil
			}
			for i := 0; i < 1e5 && trials.Load() < want; i++ {
				runtime.Gosched()
				if held != nil {
					if rng.IntN(3) == 0 {
						report()
					}
					continue
				}
				done, err := b.Allow(c.now())
				if err != nil {
					continue
				}
				trials.Add(1)
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if n > int64(s.HalfOpenCalls) {
					t.Errorf("%d trials in flight", n)
				}
				held = done
			}
			if held != nil {
				report()
			}
		})
	}
	wg.Wait()
	if st := b.State(); st == Closed {
		t.Fatalf("closed on failures only")
	}
	checkChain(t, r.list(), b.State(), false)
	t.Logf("%d trials, at most %d in flight, %d transitions", trials.Load(), most.Load(), len(r.list()))
	if trials.Load() < want {
		t.Errorf("only %d trials ran", trials.Load())
	}
}

// CLOSED under 64 goroutines loses no count; OPEN refuses every call with
// the right retry time.
func TestConcurrentClosedAndOpen(t *testing.T) {
	const goroutines, calls = 64, 500
	hammer := func(b *Breaker, now time.Time, f func(done func(Outcome, time.Time), err error)) {
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range calls {
					f(b.Allow(now))
				}
			})
		}
		wg.Wait()
	}

	s := settings()
	s.MinCalls = goroutines * calls * 2 // never decides
	closed, r := newBreaker(t, s)
	hammer(closed, at(0), func(done func(Outcome, time.Time), err error) {
		if err != nil {
			t.Error(err)
			return
		}
		done(failed, at(0))
	})
	if sn := closed.Snapshot(at(0)); sn.Calls != goroutines*calls || sn.Failures != goroutines*calls {
		t.Fatalf("lost counts: %+v", sn)
	}
	if len(r.list()) != 0 {
		t.Fatalf("transitions %v", r.list())
	}

	open, r := newBreaker(t, settings())
	openAt(t, open, 0)
	hammer(open, at(10*time.Second), func(done func(Outcome, time.Time), err error) {
		var oe *OpenError
		if done != nil || !errors.As(err, &oe) || oe.RetryAfter != 20*time.Second {
			t.Errorf("OPEN: done %p, err %v", done, err)
		}
	})
	if len(r.list()) != 1 || open.State() != Open {
		t.Fatalf("transitions %v", r.list())
	}
}

// An operator flips the forced mode while 64 goroutines make calls.
func TestConcurrentForce(t *testing.T) {
	const goroutines, calls = 64, 1000
	s := settings()
	s.OpenFor, s.HalfOpenCalls, s.TrialTimeout = time.Millisecond, 3, time.Millisecond
	b, r := newBreaker(t, s)
	c := &clock{step: time.Microsecond}
	stop := make(chan struct{})
	var operator sync.WaitGroup
	operator.Go(func() {
		modes := []Mode{ForceOpen, ForceClosed, Auto, ForceOpen, Auto}
		for i := 0; i < 5000; i++ {
			select {
			case <-stop:
				return
			default:
				b.Force(modes[i%len(modes)], c.now())
			}
		}
	})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range calls {
				done, err := b.Allow(c.now())
				if err != nil {
					if done != nil || !errors.Is(err, ErrOpen) {
						t.Errorf("refusal: done %p, err %v", done, err)
					}
					continue
				}
				done(Outcome{Failed: rng.IntN(2) == 0}, c.now())
			}
		})
	}
	wg.Wait()
	close(stop)
	operator.Wait()
	checkChain(t, r.list(), b.State(), true)
}

// BenchmarkClosed is the CLOSED fast path: Allow and done under
// GOMAXPROCS goroutines (run with -cpu 2 for two).
func BenchmarkClosed(b *testing.B) {
	br, _ := newBreaker(b, settings())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now = now.Add(time.Microsecond)
			done, err := br.Allow(now)
			if err != nil {
				b.Fatal(err)
			}
			done(ok, now)
		}
	})
}

// BenchmarkClosedFleet is BenchmarkClosed for a breaker of a fleet
// (Settings.Fleet), which counts its calls for the fleet's window as well.
func BenchmarkClosedFleet(b *testing.B) {
	s := settings()
	s.Fleet = &trialDesk{}
	br, _ := newBreaker(b, s)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now = now.Add(time.Microsecond)
			done, err := br.Allow(now)
			if err != nil {
				b.Fatal(err)
			}
			done(ok, now)
		}
	})
}

var sink func(Outcome, time.Time)

// BenchmarkClosedEscaping is the CLOSED path when done escapes the caller
// (stored, or handed to another function that keeps it).
func BenchmarkClosedEscaping(b *testing.B) {
	br, _ := newBreaker(b, settings())
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		done, err := br.Allow(now)
		if err != nil {
			b.Fatal(err)
		}
		sink = done
		done(ok, now)
	}
}

// BenchmarkOpen is the refusal path of an OPEN breaker.
func BenchmarkOpen(b *testing.B) {
	br, _ := newBreaker(b, settings())
	openAt(b, br, 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := br.Allow(at(time.Second)); err == nil {
				b.Fatal("admitted")
			}
		}
	})
}

// Resume carries a breaker's state over to one with other settings, and
// reports no transition.
func TestResume(t *testing.T) {
	longer := settings()
	longer.OpenFor = time.Minute
	for _, tt := range []struct {
		name      string
		prepare   func(b *Breaker) // at(0)..at(40s)
		state     State
		forced    bool
		nextTrial time.Time
	}{
		{"closed", func(b *Breaker) { run(t, b, at(0), 5, failed) }, Closed, false, time.Time{}},
		{"open", func(b *Breaker) { run(t, b, at(0), 20, failed) }, Open, false, at(time.Minute)},
		{"half open", func(b *Breaker) {
			run(t, b, at(0), 20, failed)
			if _, err := b.Allow(at(31 * time.Second)); err != nil { // a trial, never reported
				t.Fatal(err)
			}
		}, Open, false, at(time.Minute)},
		{"forced open", func(b *Breaker) { b.Force(ForceOpen, at(time.Second)) }, Open, true, time.Time{}},
		{"forced closed", func(b *Breaker) {
			run(t, b, at(0), 20, failed)
			b.Force(ForceClosed, at(time.Second))
		}, Closed, true, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			old, _ := newBreaker(t, settings())
			tt.prepare(old)
			b, r := newBreaker(t, longer)
			b.Resume(old, at(40*time.Second))
			s := b.Snapshot(at(40 * time.Second))
			if s.State != tt.state || s.Forced != tt.forced || !s.NextTrial.Equal(tt.nextTrial) || s.Calls != 0 {
				t.Errorf("after Resume: %+v; want %v forced %v, next trial %v, an empty window", s, tt.state, tt.forced, tt.nextTrial.Sub(t0))
			}
			if ev := r.list(); len(ev) != 0 {
				t.Errorf("Resume reported transitions %v", ev)
			}
			// The resumed breaker runs on: an open one starts its
			// trials at its own open_for after old opened.
			if tt.state == Open && !tt.forced {
				if _, err := b.Allow(at(59 * time.Second)); err == nil {
					t.Error("admitted a call before the new open_for had passed")
				}
				if _, err := b.Allow(at(time.Minute)); err != nil {
					t.Errorf("no trial once the new open_for had passed: %v", err)
				}
			}
		})
	}
}
