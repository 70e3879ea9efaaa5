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
// it.
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
		r.Elapsed.Microseconds(), r.Admitted, r.Refused, r.Good, r.Slow, r.Failed, r.Throttled,
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
	if len(f) < 14 || len(f) > 13+MaxLevels || f[0] != reportVersion {
		return Report{}, errReport
	}
	var n [11]int64
	for i := range n {
		v, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil || v < 0 || v > 1<<40 {
			return Report{}, fmt.Errorf("%w: field %d %q", errReport, i+1, f[i+1])
		}
		n[i] = v
	}
	r := Report{Tally: Tally{
		Elapsed: time.Duration(n[0]) * time.Microsecond, Admitted: n[1], Refused: n[2],
		Good: n[3], Slow: n[4], Failed: n[5], Throttled: n[6],
		RetryAfter: time.Duration(n[7]) * time.Millisecond, Overdue: n[8], Median: time.Duration(n[9]) * time.Microsecond,
	}, Cut: n[10] == 1}
	if r.Elapsed <= 0 || r.Elapsed > time.Minute || n[10] > 1 {
		return Report{}, errReport
	}
	var err error
	if r.Limit, err = rate(f[12]); err != nil {
		return Report{}, err
	}
	for i, v := range f[13:] {
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

// Sum is the fleet's tally: own and the others' latest reports, each
// scaled to own's interval (an instance's report may be of an interval a
// little longer or shorter: what counts is the fleet's rates). A report
// older than fresh, which own's last Sum had already counted (its
// instance is late, or dead), is left out. The median is the median of
// the reports' medians weighted by their answers.
func Sum(own Report, others []Peer, fresh time.Duration) Tally {
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
		if r.Age > fresh {
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
