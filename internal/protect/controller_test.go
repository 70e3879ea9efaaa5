package protect

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

// tally of an interval in which n requests were admitted at the limit
// and answered in time, with the median med.
func healthyTally(n int64, med time.Duration) Tally {
	return Tally{Elapsed: DefaultInterval, Admitted: n, Refused: 1, Good: n, Median: med}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{})
	s := c.Settings()
	if s.Min != DefaultMin || s.Tolerance != DefaultTolerance || s.Interval != DefaultInterval || s.BaselineWindow != DefaultBaselineWindow {
		t.Errorf("defaults %+v", s)
	}
	if c.Limit() != Unbounded {
		t.Errorf("start %v, want Unbounded without a max", c.Limit())
	}
	if c := NewController(Settings{Min: 5, Max: 300}); c.Limit() != 300 {
		t.Errorf("start %v, want the max", c.Limit())
	}
	if c := NewController(Settings{Min: 50, Max: 20}); c.Settings().Max != 50 {
		t.Errorf("a max under the min: %v", c.Settings().Max)
	}
}

// The baseline is the lowest median of the window's intervals, and
// forgets one that left the window.
func TestBaselineWindow(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{Min: 1, Max: 100, BaselineWindow: 2 * time.Second}) // 4 intervals
	now := t0
	for _, med := range []time.Duration{300, 100, 200, 0, 400} {
		now = now.Add(DefaultInterval)
		c.Update(now, Tally{Elapsed: DefaultInterval, Median: med * time.Millisecond})
	}
	if c.Baseline() != 100*time.Millisecond {
		t.Errorf("baseline %v, want the lowest of the window, 100ms", c.Baseline())
	}
	if c.SlowAfter() != 200*time.Millisecond {
		t.Errorf("slow after %v, want 2 × the baseline", c.SlowAfter())
	}
	for range 3 { // 100 leaves the window; 200, 0 (no median) and 400 stay... then 200 goes too
		now = now.Add(DefaultInterval)
		c.Update(now, Tally{Elapsed: DefaultInterval, Median: 500 * time.Millisecond})
	}
	if c.Baseline() != 400*time.Millisecond {
		t.Errorf("baseline %v, want 400ms once 100 and 200 left the window", c.Baseline())
	}
}

// Each signal of congestion cuts the limit to cutTo × what the upstream
// answered in time; stragglers below the thresholds do not.
func TestCongestion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		t    Tally
		cut  bool
	}{
		{"healthy", Tally{Good: 100}, false},
		{"one slow in a hundred", Tally{Good: 99, Slow: 1}, false},
		{"3 % slow", Tally{Good: 97, Slow: 3}, true},
		{"5 % failed", Tally{Good: 95, Failed: 5}, false},
		{"11 % failed", Tally{Good: 89, Failed: 11}, true},
		{"one throttled", Tally{Good: 100, Throttled: 1}, false},
		{"three throttled", Tally{Good: 100, Throttled: 3}, true},
		{"two slow of ten", Tally{Good: 8, Slow: 2}, false},
		{"three slow of ten", Tally{Good: 7, Slow: 3}, true},
		{"slow among too few answers", Tally{Good: 2, Slow: 2}, false},
		{"a few overdue", Tally{Good: 100, Overdue: 3}, false},
		{"many overdue", Tally{Good: 100, Overdue: 20}, true},
	} {
		c := NewController(Settings{Min: 1, Max: 400})
		c.learned = true                                      // a limit found before: a weak sign halves it at most
		c.Update(t0, healthyTally(100, 200*time.Millisecond)) // a baseline, and a first interval
		tc.t.Elapsed = DefaultInterval
		tc.t.Median = 200 * time.Millisecond
		st := c.Update(t0.Add(DefaultInterval), tc.t)
		if (st == Cut) != tc.cut {
			t.Errorf("%s: %v, want cut %v", tc.name, st, tc.cut)
			continue
		}
		// What came in time over the two intervals, (100 + Good) a second;
		// at most halved for a weak sign.
		want := cutTo * float64(100+tc.t.Good)
		if bad := tc.t.Slow + tc.t.Failed + tc.t.Throttled + tc.t.Overdue; bad*5 < tc.t.Good+bad {
			want = max(want, 400.0/2)
		}
		if tc.cut && c.Limit() != want {
			t.Errorf("%s: cut to %v, want %v", tc.name, c.Limit(), want)
		}
	}
}

// A strong sign (a fifth of the requests failing) is followed at once,
// down to Min and no further; a weak one halves the limit at most.
func TestCutDepth(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{Min: 20, Max: 400})
	c.Update(t0, Tally{Elapsed: DefaultInterval, Failed: 50})
	c.Update(t0.Add(DefaultInterval), Tally{Elapsed: DefaultInterval, Failed: 50})
	if c.Limit() != 20 {
		t.Errorf("limit %v after nothing answered, want min 20", c.Limit())
	}
	w := NewController(Settings{Min: 20, Max: 400})
	w.learned = true
	w.Update(t0, Tally{Elapsed: DefaultInterval, Good: 20, Slow: 3, Median: 100 * time.Millisecond})
	if w.Limit() != 200 {
		t.Errorf("limit %v after 3 slow answers of 23, want 400 halved", w.Limit())
	}
	// Without a max, nothing learned yet: everything is admitted, and the
	// first sign, weak, halves what was admitted.
	u := NewController(Settings{})
	if u.Limit() != Unbounded {
		t.Fatalf("start %v without a max, want Unbounded", u.Limit())
	}
	u.Update(t0, Tally{Elapsed: DefaultInterval, Admitted: 150, Good: 145, Slow: 5, Median: 100 * time.Millisecond})
	if want := max(cutTo*145*2, 150*2/2.0); u.Limit() != want {
		t.Errorf("the first cut without a max: %v, want %v", u.Limit(), want)
	}
}

// An upstream that answers slower at every load is taken as slower: the
// baseline follows after a few intervals, and the limit stops falling.
func TestRebase(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{Min: 1, Max: 400, WarmUp: NoWarmUp})
	now := t0
	step := func(tl Tally) Step {
		now = now.Add(DefaultInterval)
		tl.Elapsed = DefaultInterval
		return c.Update(now, tl)
	}
	for range 4 {
		step(Tally{Admitted: 100, Refused: 1, Good: 100, Median: 20 * time.Millisecond})
	}
	// From now on 200 ms, whatever the load: slow at first.
	cuts := 0
	for range 12 {
		// The gate counts 200 ms answers slow while the threshold is
		// under 200 ms.
		tl := Tally{Admitted: 50, Good: 50, Median: 200 * time.Millisecond}
		if c.SlowAfter() < 200*time.Millisecond {
			tl.Good, tl.Slow = 0, 50
		}
		if step(tl) == Cut {
			cuts++
		}
	}
	if c.Baseline() != 200*time.Millisecond {
		t.Errorf("baseline %v after 6 s at 200 ms, want 200ms", c.Baseline())
	}
	if cuts > 4 || c.Limit() < 400/16 {
		t.Errorf("%d cuts, the limit at %v: the rebase should have come within a few", cuts, c.Limit())
	}
}

// The limit rises only while it binds, by the rules of the doc: back
// towards what the upstream last took, then probing past it, never past
// Max, and not while the upstream's Retry-After runs.
func TestRise(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{Min: 1, Max: 1000, WarmUp: NoWarmUp})
	now := t0
	step := func(tl Tally) Step {
		now = now.Add(DefaultInterval)
		tl.Elapsed, tl.Median = DefaultInterval, 100*time.Millisecond
		return c.Update(now, tl)
	}
	step(healthyTally(400, 0))
	// 200 answered a second, then slow answers: cut to 0.95 × 200... with
	// the interval before's 400 in time: (400+100)/1s.
	step(Tally{Good: 100, Slow: 50, Admitted: 150})
	if c.Limit() != cutTo*500 {
		t.Fatalf("cut to %v, want %v (a strong sign: a third slow)", c.Limit(), cutTo*500)
	}
	if st := step(healthyTally(1000, 0)); st != Held {
		t.Errorf("the interval after a cut: %v, want held", st)
	}
	// Not binding: admitted under 90 % of the limit, none refused.
	if st := step(Tally{Admitted: 100, Good: 100}); st != Held {
		t.Errorf("a limit that does not bind: %v, want held", st)
	}
	// Binding: back towards 500 by a tenth of the gap, at least 1 %.
	before := c.Limit()
	step(healthyTally(400, 0))
	if want := before + max(0.01*before, 0.1*(500-before)); math.Abs(c.Limit()-want) > 1e-9 {
		t.Errorf("rise to %v, want %v", c.Limit(), want)
	}
	for range 40 {
		step(healthyTally(1000, 0))
	}
	if c.Limit() != 1000 {
		t.Errorf("limit %v after probing for 20 s, want the max 1000", c.Limit())
	}
	// Throttled with Retry-After: cut, and no rise until it has passed.
	step(Tally{Admitted: 100, Refused: 1, Good: 100})
	step(Tally{Good: 100, Throttled: 4, RetryAfter: 3 * time.Second})
	cut := c.Limit()
	if cut != 500 {
		t.Fatalf("throttled: cut to %v, want 500 (0.9 × 200, but at most halved)", cut)
	}
	for range 5 { // up to 2.5 s of the 3
		step(healthyTally(1000, 0))
	}
	if c.Limit() != cut {
		t.Errorf("rose to %v within the upstream's Retry-After", c.Limit())
	}
	step(healthyTally(1000, 0))
	if c.Limit() <= cut {
		t.Errorf("held at %v after the Retry-After passed", c.Limit())
	}
}

// After an idle spell, and when the breaker closes, admission ramps from
// a tenth of the limit to the whole of it over WarmUp; the limit learned
// stays, and does not rise on a ramp that holds demand back.
func TestWarmUp(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{Min: 1, Max: 400, WarmUp: 4 * time.Second})
	now := t0
	step := func(tl Tally) {
		now = now.Add(DefaultInterval)
		tl.Elapsed = DefaultInterval
		c.Update(now, tl)
	}
	if got := c.Admits(now); got != 40 {
		t.Fatalf("before the first request: admits %v, want a tenth of 400", got)
	}
	step(Tally{Admitted: 20, Refused: 5, Good: 20, Median: 100 * time.Millisecond})
	// The ramp began with the interval that brought traffic: 0.5 s of 4.
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if got, want := c.Admits(now), 400*(0.1+0.9*0.5/4); !near(got, want) {
		t.Errorf("0.5 s into the warm-up: admits %v, want %v", got, want)
	}
	if got := c.Admits(now.Add(1500 * time.Millisecond)); !near(got, 400*(0.1+0.9*2/4.0)) {
		t.Errorf("2 s in: admits %v", got)
	}
	if got := c.Admits(now.Add(4 * time.Second)); got != 400 {
		t.Errorf("after the warm-up: admits %v, want the limit 400", got)
	}
	// Idle for 10 s (the least idle spell): the next traffic warms up.
	for range 20 {
		step(Tally{})
	}
	if got := c.Admits(now); got != 40 {
		t.Errorf("after 10 s idle: admits %v, want 40", got)
	}
	step(Tally{Admitted: 10, Good: 10})
	if c.Limit() != 400 {
		t.Errorf("the limit learned moved to %v with the warm-up", c.Limit())
	}
	// The breaker closed: a warm-up from now.
	c.Admits(now.Add(time.Hour)) // the one under way is over
	c.WarmUp(now)
	if got := c.Admits(now); got != 40 {
		t.Errorf("when the breaker closed: admits %v, want 40", got)
	}
	// Off: no ramp.
	off := NewController(Settings{Min: 1, Max: 400, WarmUp: NoWarmUp})
	off.WarmUp(now)
	if got := off.Admits(now); got != 400 {
		t.Errorf("warm-up off: admits %v, want 400", got)
	}
}

// A probe past the level that last congested holds at the first requests
// in flight past the tolerance, short of congestion, and starts again from
// its smallest step; far under that level, a few do not hold the rise.
func TestProbeHoldsAtFirstSign(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{Min: 1, Max: 10000, WarmUp: NoWarmUp})
	now := t0
	c.Adopt(1000) // learned, congested last at 1,000
	for range 6 { // probing: the step grows
		now = now.Add(DefaultInterval)
		c.Update(now, healthyTally(int64(c.Limit()/2), 200*time.Millisecond))
	}
	if c.step <= 0.005 {
		t.Fatalf("step %v after six intervals of probing", c.step)
	}
	before := c.Limit()
	tl := healthyTally(int64(before/2), 200*time.Millisecond)
	tl.Overdue = 4 // 0.8 % of the interval's admissions: under congestion's 2 %
	now = now.Add(DefaultInterval)
	if st := c.Update(now, tl); st != Held || c.Limit() != before || c.step != 0 {
		t.Errorf("at the first sign: %v, limit %v (was %v), step %v; want held, the step back to none", st, c.Limit(), before, c.step)
	}
	// Under the level that congested, a few in flight do not hold it.
	c.cut(Tally{Elapsed: DefaultInterval, Good: 250, Admitted: 500})
	c.settle = false
	low := c.Limit()
	tl = healthyTally(int64(low/2), 200*time.Millisecond)
	tl.Overdue = 4
	now = now.Add(DefaultInterval)
	if st := c.Update(now, tl); st != Rose {
		t.Errorf("under the last level: %v at %v (last level %v), want a rise", st, c.Limit(), c.lastMax)
	}
	if low >= c.lastMax {
		t.Errorf("the cut left %v, not under the last level %v", low, c.lastMax)
	}
}

// An outage, most answers failing and a few in time, cuts the limit but
// leaves the level it last congested at: once the upstream is back, the
// limit climbs back towards it at a tenth of the gap, not by probing from
// the floor.
func TestOutageKeepsTheLastLevel(t *testing.T) {
	t.Parallel()
	c := NewController(Settings{Min: 10, Max: 10000, WarmUp: NoWarmUp})
	now := t0
	c.Adopt(500)
	c.cut(Tally{Elapsed: DefaultInterval, Good: 240, Slow: 20, Admitted: 260}) // congested at 480/s
	level := c.lastMax
	for range 4 { // the outage: a few answers in time, most failing
		now = now.Add(DefaultInterval)
		c.Update(now, Tally{Elapsed: DefaultInterval, Admitted: 50, Good: 3, Failed: 47, Refused: 100})
	}
	if c.lastMax != level {
		t.Errorf("after the outage the last level is %v, want %v as before it", c.lastMax, level)
	}
	before := c.Limit()
	c.settle = false
	now = now.Add(DefaultInterval)
	if st := c.Update(now, healthyTally(int64(before/2), 200*time.Millisecond)); st != Rose || c.Limit()-before < 0.09*(level-before) {
		t.Errorf("back: %v from %v to %v, want a tenth of the way to %v", st, before, c.Limit(), level)
	}
}
