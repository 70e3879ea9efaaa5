package protect

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Gate admits requests at the controller's limit and counts how they
// ended, for the controller's next tally. Admit and Done are safe for
// concurrent use and allocate nothing; Tally and Set are called by the
// goroutine that ticks the controller.
type Gate struct {
	// The gate's clock: ns since epoch, taken from the monotonic reading
	// of the times it is given (time.Now's), so that a step of the wall
	// clock changes nothing (At).
	epoch time.Time

	// Admission: GCRA. tat is the theoretical arrival time (Unix ns) of
	// the next request at the limit, emission the ns between requests,
	// burst how far ahead of now tat may run.
	tat      atomic.Int64
	emission atomic.Int64
	burst    int64

	slowAfter atomic.Int64 // ns; 0: every answer is in time
	cutFrom   atomic.Int64 // the first cohort admitted after the last cut

	admitted, refused, good, slow, failed, throttled atomic.Int64
	retryAfter                                       atomic.Int64 // ns, the longest
	latency                                          [latencyBuckets]atomic.Int64

	// Requests in flight by cohort: the interval they were admitted in.
	// Each word holds the cohort's id in its high 32 bits and a count in
	// its low 32, so that a request of a cohort whose slot was reused
	// counts in neither.
	cohort  atomic.Int64 // the current one's id
	started [cohorts]atomic.Uint64
	ended   [cohorts]atomic.Uint64
	start   [cohorts]atomic.Int64 // Unix ns each began
}

// cohorts is how many intervals of requests in flight the gate follows:
// 32 of 500 ms, 16 s, past any upstream timeout worth having.
const cohorts = 32

// DefaultBurst is how far ahead of its pace the gate admits: a tenth of a
// second's worth, so that clients that come in bursts (a page that calls
// the API ten times, retries on the same Retry-After) are not turned away
// within a second that has room for them.
const DefaultBurst = 100 * time.Millisecond

// NewGate returns a gate admitting limit requests a second, from now.
func NewGate(limit float64, burst time.Duration, now time.Time) *Gate {
	if burst <= 0 {
		burst = DefaultBurst
	}
	g := &Gate{burst: int64(burst), epoch: now}
	g.emission.Store(1)
	g.setLimit(limit, 0)
	return g
}

// At is t on the gate's clock, which Admit and Done take.
func (g *Gate) At(t time.Time) int64 { return int64(t.Sub(g.epoch)) }

// maxEmission bounds the time between two admissions (a limit under one
// request a day admits one a day), so that the clock's sums cannot
// overflow.
const maxEmission = int64(24 * time.Hour)

// setLimit admits limit requests a second from now (At). A limit of 0 or
// less, or NaN, admits nothing until it is raised. What the requests
// admitted at the old pace owe is carried at the new one: raised from a
// request a day, the gate waits a new emission, not the rest of the day.
func (g *Gate) setLimit(limit float64, now int64) {
	e := maxEmission
	closed := !(limit > 0)
	switch {
	case closed:
	case math.IsInf(limit, 1):
		e = 1
	default:
		e = int64(min(float64(time.Second)/limit, float64(maxEmission)))
	}
	e = max(e, 1)
	old := g.emission.Swap(e)
	for {
		t := g.tat.Load()
		nt := t
		switch {
		case closed:
			nt = max(t, now+maxEmission)
		case t > now && old != e:
			nt = now + int64(float64(t-now)*float64(e)/float64(old))
		}
		if nt == t || g.tat.CompareAndSwap(t, nt) {
			return
		}
	}
}

// room says whether a request at now would be admitted, counting nothing.
func (g *Gate) room(now int64) bool { return max(g.tat.Load(), now)-now <= g.burst }

// Room says whether a request at now (At) would be admitted, without
// admitting it; a request it turns away counts as refused.
func (g *Gate) Room(now int64) bool {
	if max(g.tat.Load(), now)-now > g.burst {
		g.refused.Add(1)
		return false
	}
	return true
}

// A Ticket is an admitted request: when, and in which cohort.
type Ticket struct {
	at     int64
	cohort int64
}

// Admit admits a request at now (At), or reports false when that would
// go over the limit.
func (g *Gate) Admit(now int64) (Ticket, bool) { return g.admit(now, true) }

// admit is Admit; a request it turns away counts as refused only with
// count (Levels counts those it queues once they are turned away).
func (g *Gate) admit(now int64, count bool) (Ticket, bool) {
	e := g.emission.Load()
	for {
		old := g.tat.Load()
		tat := max(old, now)
		if tat-now > g.burst {
			if count {
				g.refused.Add(1)
			}
			return Ticket{}, false
		}
		if g.tat.CompareAndSwap(old, tat+e) {
			break
		}
	}
	g.admitted.Add(1)
	c := g.cohort.Load()
	add(&g.started[c%cohorts], c)
	return Ticket{at: now, cohort: c}, true
}

// add counts one in slot w, if w is cohort c's.
func add(w *atomic.Uint64, c int64) {
	for {
		v := w.Load()
		if int64(v>>32) != c&0xffffffff {
			return
		}
		if w.CompareAndSwap(v, v+1) {
			return
		}
	}
}

// Result is how an admitted request's exchange ended, for protection.
type Result uint8

const (
	Answered  Result = iota // the upstream answered (its latency says whether in time)
	Failed                  // no answer, a timeout, a 5xx
	Throttled               // the upstream's 429 or 503
	Dropped                 // says nothing of the upstream: the client went away first
	Ignored                 // says nothing, however long it took: the client's upload failed
)

// Done counts the end of t's exchange at now (At); retryAfter is a
// throttling answer's Retry-After (0: none).
func (g *Gate) Done(t Ticket, now int64, r Result, retryAfter time.Duration) {
	add(&g.ended[t.cohort%cohorts], t.cohort)
	took := now - t.at
	// Admitted before the last cut settled: the congestion it meets was
	// cut for already. An answer in time counts all the same: it is what
	// the upstream can take.
	stale := t.cohort < g.cutFrom.Load()
	switch r {
	case Answered:
		if !stale {
			g.latency[latencyBucket(took)].Add(1)
		}
		if s := g.slowAfter.Load(); s > 0 && took > s {
			if !stale {
				g.slow.Add(1)
			}
		} else {
			g.good.Add(1)
		}
	case Failed:
		if stale {
			return
		}
		g.failed.Add(1)
	case Dropped:
		// The client went away, or its own deadline ran out: nothing of
		// the upstream, unless it had waited past the threshold by then.
		if s := g.slowAfter.Load(); s > 0 && took > s && !stale {
			g.slow.Add(1)
		}
	case Throttled:
		if stale {
			return
		}
		g.throttled.Add(1)
		for ra := int64(retryAfter); ; {
			v := g.retryAfter.Load()
			if ra <= v || g.retryAfter.CompareAndSwap(v, ra) {
				break
			}
		}
	}
}

// End is Done for an exchange that took took from its admission.
func (g *Gate) End(t Ticket, took time.Duration, r Result, retryAfter time.Duration) {
	g.Done(t, t.at+int64(took), r, retryAfter)
}

// Tally ends the interval at now: it returns what the gate saw since the
// last Tally, and starts the next cohort.
func (g *Gate) Tally(now time.Time) Tally {
	n := g.At(now)
	c := g.cohort.Load()
	t := Tally{
		Elapsed:    time.Duration(n - g.start[c%cohorts].Load()),
		Admitted:   g.admitted.Swap(0),
		Refused:    g.refused.Swap(0),
		Good:       g.good.Swap(0),
		Slow:       g.slow.Swap(0),
		Failed:     g.failed.Swap(0),
		Throttled:  g.throttled.Swap(0),
		RetryAfter: time.Duration(g.retryAfter.Swap(0)),
	}
	var hist [latencyBuckets]int64
	var total int64
	for i := range hist {
		hist[i] = g.latency[i].Swap(0)
		total += hist[i]
	}
	if total >= MinSamples {
		t.Median = median(hist[:], total)
	}
	for k := max(c-cohorts+1, 0); k <= c; k++ {
		t.InFlight += inFlight(&g.started[k%cohorts], &g.ended[k%cohorts], k)
	}
	if s := g.slowAfter.Load(); s > 0 {
		// The cohorts admitted since the last cut that ended before
		// now - slowAfter: all of theirs still in flight are overdue.
		for k := max(c-cohorts+1, g.cutFrom.Load(), 0); k < c; k++ {
			if n-g.start[(k+1)%cohorts].Load() < s {
				break
			}
			t.Overdue += inFlight(&g.started[k%cohorts], &g.ended[k%cohorts], k)
		}
	}
	// The next cohort: its slot is cleared before anyone can be counted
	// in it.
	next := c + 1
	g.start[next%cohorts].Store(n)
	g.started[next%cohorts].Store(uint64(next&0xffffffff) << 32)
	g.ended[next%cohorts].Store(uint64(next&0xffffffff) << 32)
	g.cohort.Store(next)
	return t
}

// inFlight is cohort k's requests still in flight.
func inFlight(started, ended *atomic.Uint64, k int64) int64 {
	s, e := started.Load(), ended.Load()
	if int64(s>>32) != k&0xffffffff || int64(e>>32) != k&0xffffffff {
		return 0
	}
	return max(int64(s&0xffffffff)-int64(e&0xffffffff), 0)
}

// Set puts the controller's limit and slow threshold in force; cut says
// the limit was just cut: the requests admitted before it, and in the
// second after it (which still meets what the overshoot left queued, and
// an upstream that counts its capacity by the second has counted the
// overshoot in it), count no more as congestion.
func (g *Gate) Set(limit float64, slowAfter time.Duration, cut bool, now time.Time) {
	g.setLimit(limit, g.At(now))
	g.slowAfter.Store(int64(slowAfter))
	if cut {
		g.cutFrom.Store(g.cohort.Load() + settleCohorts)
	}
}

// settleCohorts is how many intervals after a cut are of the cut's
// overshoot still: a second's.
const settleCohorts = 2

// Latencies are counted in buckets of a quarter octave of microseconds:
// 1 µs to 2^40 µs (12 days), within 19 % of the true value.
const latencyBuckets = 41 * 4

func latencyBucket(ns int64) int {
	us := uint64(max(ns/1000, 1))
	o := bits.Len64(us) - 1 // us is in [2^o, 2^(o+1))
	sub := 0
	if o >= 2 {
		sub = int(us>>(o-2)) & 3
	}
	return min(o*4+sub, latencyBuckets-1)
}

// bucketValue is the latency a bucket stands for: its middle.
func bucketValue(i int) time.Duration {
	o, sub := i/4, i%4
	lo := float64(uint64(1)<<o) * (1 + float64(sub)/4)
	return time.Duration(lo*(1+0.125)) * time.Microsecond
}

func median(hist []int64, total int64) time.Duration {
	half := (total + 1) / 2
	for i, n := range hist {
		if half -= n; half <= 0 {
			return bucketValue(i)
		}
	}
	return 0
}
