package protect

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// A fleet of gateways in front of one upstream holds one limit between
// them: each instance, every interval, sends the fleet its gate's tally
// (a Report, through Redis: package fleetbus) and reads the others' latest.
// Every instance runs the controller on the fleet's sum, so that each sees
// what the upstream sees; the fleet's limit is the lowest the instances
// hold (one that cut is followed by all within an interval; between
// cuts, each rises as its controller does on the same sums, and their
// limits differ by their last steps at most), and each instance admits its part
// of it, in proportion to its demand (Share): however unevenly a load
// balancer spreads the traffic, the sum is the fleet's limit and no
// instance is starved.
//
// An instance that joins takes the fleet's limit as it stands, and until
// its own demand is known, a share of what the others leave; one that
// dies stops reporting, and the others take its share once its report is
// older than the fleet bus keeps it. An instance that cannot reach the
// fleet protects on its own (Alone), with its share of the limit as its
// own limit, and takes the fleet's again when it can.

// MaxLevels is the most priority levels a route's protection has.
const MaxLevels = 8

// A Report is one instance's interval, as the fleet shares it.
type Report struct {
	Tally
	// Slot numbers the interval: when it ended, in intervals since the
	// Unix epoch. The instances end theirs together (Slot), so that the
	// fleet's sum is of one interval.
	Slot int64
	// Limit is the fleet's limit the instance's controller holds after
	// its last update: what it proposes. Cut says that update cut it: the
	// others follow it down.
	Limit float64
	Cut   bool
	// Demand is the instance's requests a second by priority level,
	// highest first: those admitted and those turned away.
	Demand [MaxLevels]float64
}

// A Peer is another instance's latest report, and how long ago it sent
// it, by the clock of the bus.
type Peer struct {
	Report
	Age time.Duration
}

// reportVersion starts an encoded report: an instance of another version
// whose reports differ writes another, and is left out.
const reportVersion = "p1"

// MaxReport bounds an encoded report: what a Redis that anyone may write to
// hands back is read no further.
const MaxReport = 512

// Encode writes r for the fleet bus: text, one line.
func (r Report) Encode() string {
	b := make([]byte, 0, 160)
	b = append(b, reportVersion...)
	for _, v := range []int64{
		r.Slot, r.Elapsed.Microseconds(), r.Admitted, r.Refused, r.Good, r.Slow, r.Failed, r.Throttled,
		r.RetryAfter.Milliseconds(), r.Overdue, r.Median.Microseconds(), cut01(r.Cut),
	} {
		b = append(b, ' ')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, ' ')
	b = strconv.AppendFloat(b, r.Limit, 'g', 6, 64)
	last := 0
	for i, d := range r.Demand {
		if d > 0 {
			last = i + 1
		}
	}
	for _, d := range r.Demand[:max(last, 1)] {
		b = append(b, ' ')
		b = strconv.AppendFloat(b, d, 'g', 6, 64)
	}
	return string(b)
}

func cut01(cut bool) int64 {
	if cut {
		return 1
	}
	return 0
}

var errReport = errors.New("not a protection report")

// DecodeReport reads a report Encode wrote, refusing what no instance
// writes: another version, a field out of its range, too long.
func DecodeReport(s string) (Report, error) {
	if len(s) > MaxReport {
		return Report{}, fmt.Errorf("%w: %d bytes", errReport, len(s))
	}
	f := strings.Fields(s)
	if len(f) < 15 || len(f) > 14+MaxLevels || f[0] != reportVersion {
		return Report{}, errReport
	}
	var n [12]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || v < 0 || v > 1<<50 {
			return Report{}, fmt.Errorf("%w: field %d %q", errReport, i+1, f[i+1])
		}
		n[i] = v
	}
	r := Report{Slot: n[0], Tally: Tally{
		Elapsed: time.Duration(n[1]) * time.Microsecond, Admitted: n[2], Refused: n[3],
		Good: n[4], Slow: n[5], Failed: n[6], Throttled: n[7],
		RetryAfter: time.Duration(n[8]) * time.Millisecond, Overdue: n[9], Median: time.Duration(n[10]) * time.Microsecond,
	}, Cut: n[11] == 1}
	if r.Elapsed <= 0 || r.Elapsed > time.Minute || n[11] > 1 {
		return Report{}, errReport
	}
	var err error
	if r.Limit, err = rate(f[13]); err != nil {
		return Report{}, err
	}
	if r.Limit < 1e-3 { // an instance's limit is at least its min, more than 0
		return Report{}, fmt.Errorf("%w: limit %v", errReport, r.Limit)
	}
	for i, v := range f[14:] {
		if r.Demand[i], err = rate(v); err != nil {
			return Report{}, err
		}
	}
	return r, nil
}

// rate reads a number of requests a second: finite, 0 to Unbounded.
func rate(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v >= 0 && v <= Unbounded) {
		return 0, fmt.Errorf("%w: rate %q", errReport, s)
	}
	return v, nil
}

// Sum is the fleet's tally: own and the others' reports of the same
// interval (Slot), each scaled to own's length; a report of the interval
// before stands for its instance's if that one is late (written after
// this instance read). An older one (its instance is dead, or far
// behind) is left out. The median is the median
// of the reports' medians weighted by their answers.
func Sum(own Report, others []Peer) Tally {
	t := own.Tally
	type m struct {
		d time.Duration
		w float64
	}
	var ms []m
	var weight float64
	if own.Median > 0 {
		w := float64(own.Good + own.Slow)
		ms, weight = append(ms, m{own.Median, w}), w
	}
	for _, r := range others {
		if !current(own, r.Report) {
			continue
		}
		f := float64(own.Elapsed) / float64(r.Elapsed)
		sc := func(v int64) int64 { return int64(math.Round(float64(v) * f)) }
		t.Admitted += sc(r.Admitted)
		t.Refused += sc(r.Refused)
		t.Good += sc(r.Good)
		t.Slow += sc(r.Slow)
		t.Failed += sc(r.Failed)
		t.Throttled += sc(r.Throttled)
		t.Overdue += r.Overdue // in flight now: not a rate
		t.RetryAfter = max(t.RetryAfter, r.RetryAfter)
		if r.Median > 0 {
			w := float64(r.Good+r.Slow) * f
			ms, weight = append(ms, m{r.Median, w}), weight+w
		}
	}
	if len(ms) > 0 {
		// The weighted median of the medians.
		for i := 1; i < len(ms); i++ {
			for j := i; j > 0 && ms[j].d < ms[j-1].d; j-- {
				ms[j], ms[j-1] = ms[j-1], ms[j]
			}
		}
		half := weight / 2
		for _, x := range ms {
			if half -= x.w; half <= 0 {
				t.Median = x.d
				break
			}
		}
	}
	return t
}

// Share is own's part of the fleet's limit: the levels' demand served in
// order, highest first, each instance's part of a level in proportion to
// its demand, and what no level asks for split evenly. An instance whose
// demand is not known yet (New) gets an even part of what is left, and
// at least a tenth of an even part of the limit.
func Share(limit float64, own Report, others []Peer) float64 {
	if limit >= Unbounded {
		return Unbounded
	}
	n := float64(1 + len(others))
	left := limit
	var mine float64
	for l := range MaxLevels {
		total := own.Demand[l]
		for _, r := range others {
			total += r.Demand[l]
		}
		if total <= 0 || left <= 0 {
			continue
		}
		served := math.Min(total, left)
		mine += served * own.Demand[l] / total
		left -= served
	}
	mine += left / n
	if own.demand() == 0 {
		mine = math.Max(mine, limit/(20*n))
	}
	return mine
}

func (r Report) demand() float64 {
	var d float64
	for _, v := range r.Demand {
		d += v
	}
	return d
}

// current says whether r is of own's interval, or of the one before.
func current(own, r Report) bool { return r.Slot == own.Slot || r.Slot == own.Slot-1 }

// SlotOf is the slot of an interval that ends at now: the instances' ticks
// at the interval's multiples (Next) land on one slot, within half an
// interval of clock skew.
func SlotOf(now time.Time, interval time.Duration) int64 {
	return (now.UnixNano() + int64(interval)/2) / int64(interval)
}

// Next is the next multiple of interval since the Unix epoch after now:
// when every instance of a fleet ends its interval.
func Next(now time.Time, interval time.Duration) time.Time {
	return now.Truncate(interval).Add(interval)
}
