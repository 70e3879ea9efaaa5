package protect

import (
	"math"
	"time"
)

// Settings configure a route's protection.
type Settings struct {
	// Min and Max bound the limit, in requests a second; Max 0 is none.
	Min, Max float64
	// Start is the limit before anything is learned; 0: Max, or Unbounded
	// without a Max: everything is admitted until the first overload,
	// which finds what the upstream takes.
	Start float64
	// Tolerance is how many times its baseline an answer may take before
	// it counts as slow. Default 2.
	Tolerance float64
	// Interval is how often the controller looks. Default 500 ms.
	Interval time.Duration
	// BaselineWindow is how far back the baseline looks. Default 1 min.
	BaselineWindow time.Duration
	// Levels is how many priority levels share the limit (Levels); 0 or
	// 1: none. MaxWait is how long a request of a level may wait for room;
	// 0: DefaultMaxWait; NoWait: none, a request without room is turned
	// away at once.
	Levels  int
	MaxWait time.Duration
	// WarmUp is how long admission takes to ramp from a tenth of the limit
	// up to it after an idle spell (no request for WarmUp or 10 s, the
	// longer) or when WarmUp is called (the breaker closed). Zero: no
	// warm-up; NoWarmUp in Settings given to New means zero.
	WarmUp time.Duration
}

// NoWarmUp turns warm-up off (a zero WarmUp takes the default); NoWait
// the priority levels' queues (a zero MaxWait takes the default).
const (
	NoWarmUp = -1
	NoWait   = -1
)

// Unbounded is the limit of a controller without a Max that has not seen
// overload yet: a billion requests a second, no limit at all.
const Unbounded = 1e9

// Defaults.
const (
	DefaultTolerance      = 2
	DefaultInterval       = 500 * time.Millisecond
	DefaultBaselineWindow = time.Minute
	DefaultMin            = 1
	DefaultWarmUp         = 5 * time.Second
	// idleAfter is the least idle spell that warms up again.
	idleAfter = 10 * time.Second
	// warmFloor is where a warm-up starts, as a share of the limit.
	warmFloor = 0.1
)

func (s Settings) withDefaults() Settings {
	if s.Tolerance <= 1 {
		s.Tolerance = DefaultTolerance
	}
	if s.Interval <= 0 {
		s.Interval = DefaultInterval
	}
	switch {
	case s.WarmUp == 0:
		s.WarmUp = DefaultWarmUp
	case s.WarmUp < 0:
		s.WarmUp = 0
	}
	if s.BaselineWindow < s.Interval {
		s.BaselineWindow = DefaultBaselineWindow
	}
	if s.Min <= 0 {
		s.Min = DefaultMin
	}
	if s.Max > 0 && s.Max < s.Min {
		s.Max = s.Min
	}
	if s.Start <= 0 {
		s.Start = s.Max
		if s.Start == 0 {
			s.Start = Unbounded
		}
	}
	s.Start = s.clamp(s.Start)
	return s
}

func (s Settings) clamp(v float64) float64 {
	if s.Max > 0 && v > s.Max {
		v = s.Max
	}
	return math.Max(math.Min(v, Unbounded), s.Min)
}

// Tally is what a gate saw in one interval.
type Tally struct {
	Elapsed time.Duration // the interval's length
	// Admitted and Refused count the requests admitted and turned away.
	Admitted, Refused int64
	// Good, Slow, Failed and Throttled count the exchanges that ended,
	// of those admitted since the last cut: in time, slower than the
	// tolerance, failed (no answer, a timeout, a 5xx), and the upstream's
	// 429 or 503.
	Good, Slow, Failed, Throttled int64
	// RetryAfter is the longest Retry-After a throttling answer asked for.
	RetryAfter time.Duration
	// Overdue counts the requests in flight for longer than the tolerance,
	// of those admitted since the last cut.
	Overdue int64
	// Median is the median latency of the answers that ended in the
	// interval (0: fewer than MinSamples).
	Median time.Duration
	// InFlight counts the requests admitted and not ended yet, of the
	// cohorts the gate follows, at the interval's end.
	InFlight int64
}

// MinSamples is how many answers an interval needs for its median to
// count towards the baseline, and its shares of slow and failed answers
// to count as congestion; MinBad is the fewest slow, throttled or failed
// answers that do.
const (
	MinSamples = 5
	MinBad     = 3
)

// MaxHold bounds the pause an upstream's Retry-After makes: an upstream
// cannot hold the limit down for longer than this in one answer.
const MaxHold = 30 * time.Second

// RebaseAfter is how many intervals in a row of slow answers, at a limit
// cut meanwhile, make the baseline the recent median.
const RebaseAfter = 4

// Controller learns the limit from the gate's tallies, one an interval.
// It is not safe for concurrent use: one goroutine ticks it.
type Controller struct {
	s        Settings
	limit    float64
	lastMax  float64 // the limit that last congested; 0: none yet
	step     float64 // the probe's fraction past lastMax; 0: not probing
	probed   int     // intervals the probe has risen
	medians  []time.Duration
	next     int
	baseline time.Duration
	hold     time.Time     // no rise before: the upstream's Retry-After
	prev     Tally         // the interval before, whose answers in time count in a cut
	settle   bool          // the interval after a cut: no rise
	learned  bool          // a cut has found the upstream's capacity once
	slowRun  int           // intervals in a row whose median was slow (rebase)
	idle     time.Duration // how long no request came
	warmFrom time.Time     // when the warm-up under way began; zero: none
	warmNext bool          // warm up when traffic comes back
	fleet    bool          // the tallies are a fleet's: the others' lag an interval
	pinned   bool          // an operator pinned what is admitted: no rise
}

// NewController returns a controller that starts at s.Start.
func NewController(s Settings) *Controller {
	s = s.withDefaults()
	// A route is idle until its first request: that one warms up too.
	return &Controller{s: s, limit: s.Start, medians: make([]time.Duration, int(s.BaselineWindow/s.Interval)), warmNext: s.WarmUp > 0}
}

// Settings are the controller's, defaults filled in.
func (c *Controller) Settings() Settings { return c.s }

// Limit is the limit learned, in requests a second.
func (c *Controller) Limit() float64 { return c.limit }

// Admits is what the gate admits at now: the limit, or during a warm-up
// a share of it that grows from a tenth to the whole over WarmUp.
func (c *Controller) Admits(now time.Time) float64 {
	if c.limit >= Unbounded {
		return c.limit // nothing learned to warm up to
	}
	if c.warmNext {
		return c.s.clamp(warmFloor * c.limit)
	}
	if c.warmFrom.IsZero() {
		return c.limit
	}
	f := float64(now.Sub(c.warmFrom)) / float64(c.s.WarmUp)
	if f >= 1 {
		c.warmFrom = time.Time{}
		return c.limit
	}
	return c.s.clamp(c.limit * (warmFloor + (1-warmFloor)*max(f, 0)))
}

// WarmUp starts a warm-up at now (the breaker closed: the upstream is
// coming back, and must not get the whole surge at once).
func (c *Controller) WarmUp(now time.Time) {
	if c.s.WarmUp > 0 {
		c.warmFrom, c.warmNext = now, false
	}
}

// noteIdle follows idle spells: after one, the next traffic warms up.
func (c *Controller) noteIdle(now time.Time, t Tally) {
	if c.s.WarmUp <= 0 {
		return
	}
	if t.Admitted+t.Refused > 0 {
		if c.warmNext {
			c.warmNext = false
			if c.limit < Unbounded { // nothing learned: nothing to ramp up to
				c.warmFrom = now.Add(-t.Elapsed) // from when the interval's traffic began, about
			}
		}
		c.idle = 0
		return
	}
	c.idle += t.Elapsed
	if c.idle >= max(c.s.WarmUp, idleAfter) {
		c.warmNext = true
	}
}

// Baseline is the healthy latency learned; 0 until an interval had
// MinSamples answers.
func (c *Controller) Baseline() time.Duration { return c.baseline }

// SlowAfter is the latency past which an answer is slow: Tolerance × the
// baseline, and at least MinSlack more than it; 0 while there is no
// baseline.
func (c *Controller) SlowAfter() time.Duration {
	if c.baseline == 0 {
		return 0
	}
	return max(time.Duration(float64(c.baseline)*c.s.Tolerance), c.baseline+MinSlack)
}

// MinSlack is the least an answer may take past the baseline before it is
// slow: an upstream that answers in a millisecond is not overloaded for
// answering in three, which a garbage collection or a busy core does.
const MinSlack = 25 * time.Millisecond

// Step is what one Update did.
type Step uint8

const (
	Held Step = iota // the limit stayed
	Rose
	Cut
)

// Update takes an interval's tally, seen at now, and moves the limit.
func (c *Controller) Update(now time.Time, t Tally) Step {
	c.learnBaseline(t)
	if t.Elapsed <= 0 {
		t.Elapsed = c.s.Interval
	}
	c.noteIdle(now, t)
	defer func() { c.prev = t }()
	if c.rebase(t) {
		return Held
	}
	if c.settle && c.fleet {
		// The other instances' reports of the interval after a cut are
		// of requests admitted before they followed it.
		c.settle = false
		return Held
	}
	if c.congested(t) {
		if t.RetryAfter > 0 && c.throttledShare(t) {
			// The upstream asked for a pause: no rise until it has passed,
			// within a bound an upstream cannot stretch.
			if h := now.Add(min(t.RetryAfter, MaxHold)); h.After(c.hold) {
				c.hold = h
			}
		}
		c.cut(t)
		return Cut
	}
	if c.settle {
		// What was admitted before the cut is still being answered:
		// the interval after it says little of the new limit.
		c.settle = false
		return Held
	}
	if now.Before(c.hold) || !c.binds(t) || c.pinned {
		// A pin is what binds, not this limit: it learns from cuts
		// meanwhile, and does not rise on the pin's refusals.
		c.step, c.probed = 0, 0
		return Held
	}
	if c.lastMax > 0 && c.limit >= c.lastMax && t.Overdue >= MinBad && t.Overdue*200 > t.Admitted {
		// A probe past the last level that congested meets the first
		// sign, short of congestion: requests in flight past the
		// tolerance, over 0.5 % of those admitted. It holds, and starts
		// again from its smallest step, rather than overshoot by the
		// steps it takes while the sign grows to congestion.
		c.step, c.probed = 0, 0
		return Held
	}
	return c.rise()
}

// Follow cuts the limit to lowest, another instance's cut, when that is
// under 0.95 × before, the limit before this interval's update (a cut
// this one made too, or one a little under it, is not followed: the
// instances' limits differ by their last steps, and each admits its
// share of its own). It reports whether it did.
func (c *Controller) Follow(lowest, before float64) bool {
	lowest = c.s.clamp(lowest)
	if lowest >= c.limit || lowest >= 0.95*before {
		return false
	}
	c.limit = lowest
	c.step, c.probed = 0, 0
	c.settle, c.learned = true, true
	return true
}

// Cap keeps the limit under v: a fleet's instance rises no further than a
// step past the lowest of the others, whose limit is the fleet's.
func (c *Controller) Cap(v float64) {
	c.limit = math.Min(c.limit, c.s.clamp(v))
}

// Adopt takes limit as its own: the fleet's, on joining it. The fleet is
// running: a warm-up waits for it to be idle.
func (c *Controller) Adopt(limit float64) {
	c.limit = c.s.clamp(limit)
	c.warmNext = false
	if c.limit < Unbounded {
		// Where the fleet last congested is not known: near its limit,
		// so that a rise probes from there slowly, as the others do.
		c.lastMax = c.limit
	}
	c.step, c.probed = 0, 0
	c.learned = c.learned || c.limit < Unbounded
}

// Scale multiplies the limit, and the level it last congested at, by f:
// an instance's part of a fleet's limit becomes its own, or back.
func (c *Controller) Scale(f float64) {
	if c.limit < Unbounded {
		c.limit = c.s.clamp(c.limit * f)
	}
	c.lastMax *= f
}

// Pass takes an interval's tally, seen at now, for its latencies and its
// traffic only: the fleet it sums changed in it (an instance joined, or
// left with its counts), so that its shares of slow and failed answers may
// be another fleet's. Its rate of answers in time still counts in the
// next cut's, as the interval before it.
func (c *Controller) Pass(now time.Time, t Tally) {
	c.learnBaseline(t)
	if t.Elapsed <= 0 {
		t.Elapsed = c.s.Interval
	}
	c.noteIdle(now, t)
	c.prev = t
}

// learnBaseline keeps the interval's median and takes the lowest of the
// window's.
func (c *Controller) learnBaseline(t Tally) {
	c.medians[c.next] = t.Median
	c.next = (c.next + 1) % len(c.medians)
	c.baseline = 0
	for _, m := range c.medians {
		if m > 0 && (c.baseline == 0 || m < c.baseline) {
			c.baseline = m
		}
	}
}

// congested says whether the interval saw the upstream short of capacity.
func (c *Controller) congested(t Tally) bool {
	answered := t.Good + t.Slow + t.Failed + t.Throttled
	if answered >= MinSamples {
		// Shares, and a few at least: one slow answer in twenty, or an
		// upstream's 429 to one user, is no overload.
		switch {
		case t.Slow+t.Throttled >= MinBad && (t.Slow+t.Throttled)*50 > answered:
			return true
		case t.Failed >= MinBad && t.Failed*10 > answered:
			return true
		}
	}
	// In flight past the tolerance, beyond a few stragglers: 2 % of what
	// the limit admits in an interval, or of what was admitted while
	// nothing is learned (the limit a billion).
	base := c.limit
	if base >= Unbounded && t.Elapsed > 0 {
		base = float64(t.Admitted) / t.Elapsed.Seconds()
	}
	return c.baseline > 0 && float64(t.Overdue) > 2+0.02*base*c.s.Interval.Seconds()
}

// cut drops the limit to a little under the rate the upstream answered in
// time over the last two intervals (one alone may have had the answers of
// a moment's overshoot held back).
func (c *Controller) cut(t Tally) {
	good := float64(t.Good+c.prev.Good) / (t.Elapsed + c.prev.Elapsed).Seconds()
	// What the upstream took is where the limit congests: the rise goes
	// back towards it, slowly near it. An outage (nothing came in time,
	// or most of what answered failed) says nothing of that: the level
	// before stays, to come back to.
	outage := good == 0 || t.Failed*2 > t.Good+t.Slow+t.Failed+t.Throttled
	if !outage || c.lastMax == 0 {
		c.lastMax = math.Max(good, c.s.Min)
	}
	// A strong sign (a fifth of the interval's requests slow, overdue,
	// throttled or failed) is followed at once, however far; a weak one
	// at most halves the limit in a step, so that a false alarm (a few
	// slow answers that were not the upstream's doing) costs no more.
	target := cutTo * good
	if !c.strong(t) {
		// Half of what binds: the limit once it was learned; before, the
		// rate admitted, the limit being far above it.
		bound := c.limit
		if !c.learned {
			bound = math.Min(bound, float64(t.Admitted)/t.Elapsed.Seconds())
		}
		target = math.Max(target, bound/2)
	}
	c.limit = c.s.clamp(math.Min(c.limit, target))
	c.step, c.probed = 0, 0
	c.settle = true
	c.learned = true
}

// strong says a fifth or more of the interval's requests were slow,
// overdue, throttled or failed.
func (c *Controller) strong(t Tally) bool {
	bad := t.Slow + t.Throttled + t.Failed + t.Overdue
	return bad*5 >= t.Good+bad && bad >= MinBad
}

// throttledShare says the upstream's own 429s and 503s were a share of
// its answers worth a pause.
func (c *Controller) throttledShare(t Tally) bool {
	answered := t.Good + t.Slow + t.Failed + t.Throttled
	return t.Throttled >= MinBad && t.Throttled*50 > answered
}

// rebase takes an upstream that answers slower than its baseline at every
// load as slower: when answers stayed slow for RebaseAfter intervals with
// no other sign of overload, the limit having been cut meanwhile, the
// baseline is the recent median. A latency that the gateway's load made
// would have come down with the cut.
//
// The medians are of the answers to requests admitted since the last cut
// settled (Gate): those of before it, slow for the overshoot that made
// the cut, do not count.
func (c *Controller) rebase(t Tally) bool {
	slow := t.Median > 0 && c.baseline > 0 && t.Median > c.SlowAfter()
	if !slow || t.Failed*10 > t.Good+t.Slow+t.Failed || t.Throttled > 0 {
		c.slowRun = 0
		return false
	}
	if c.slowRun++; c.slowRun < RebaseAfter {
		return false
	}
	clear(c.medians)
	c.medians[0], c.next, c.baseline, c.slowRun = t.Median, 1, t.Median, 0
	return true
}

// binds says whether the limit held demand back in the interval. During
// a warm-up the ramp, not the limit, holds it back: that says nothing of
// the limit.
func (c *Controller) binds(t Tally) bool {
	if !c.warmFrom.IsZero() {
		return false
	}
	return t.Refused > 0 || float64(t.Admitted) >= 0.9*c.limit*t.Elapsed.Seconds()
}

// rise moves the limit up: slowly back to where it last congested, then
// probing past it, faster each interval it does not congest.
func (c *Controller) rise() Step {
	before := c.limit
	if c.limit < c.lastMax {
		// Back towards where it congested: a tenth of the way each
		// interval, at least 1 %, so that a cut too deep recovers in
		// seconds and the approach to the edge is slow.
		c.limit = math.Min(c.limit+math.Max(0.01*c.limit, 0.1*(c.lastMax-c.limit)), c.lastMax)
	} else {
		// The step doubles every other interval: a level is seen to hold
		// (its requests answered or overdue) an interval or so after it
		// is set, and a step that doubled each interval would overshoot
		// by the two it took meanwhile.
		switch {
		case c.step == 0:
			c.step = 0.005
		case c.probed%2 == 1:
			c.step = math.Min(2*c.step, maxProbe)
		}
		c.probed++
		c.limit *= 1 + c.step
	}
	c.limit = c.s.clamp(c.limit)
	if c.limit == before {
		return Held
	}
	return Rose
}

// maxProbe is the largest step of a probe, as a share of the limit.
const maxProbe = 0.1

// cutTo is the share of the rate answered in time that a cut leaves: a
// little under what the upstream took, so that the limit sits under its
// capacity more than over it.
const cutTo = 0.9
