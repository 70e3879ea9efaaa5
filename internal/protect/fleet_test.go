package protect

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestReportRoundTrip(t *testing.T) {
	r := Report{
		Tally: Tally{Elapsed: 512 * time.Millisecond, Admitted: 300, Refused: 12, Good: 280, Slow: 4, Failed: 2, Throttled: 1,
			RetryAfter: 3 * time.Second, Overdue: 7, Median: 201 * time.Millisecond},
		Limit: 612.5, Cut: true, Slot: 3_530_000_000,
	}
	r.Demand[0], r.Demand[2] = 400, 12.5
	got, err := DecodeReport(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got != r {
		t.Errorf("decoded %+v, want %+v", got, r)
	}
}

// What a Redis anyone may write to hands back is refused unless an
// instance could have written it.
func TestDecodeReportRefuses(t *testing.T) {
	good := Report{Tally: Tally{Elapsed: time.Second}, Limit: 10}.Encode()
	for _, s := range []string{
		"",
		"p2" + good[2:],
		good + " 1 2 3 4 5 6 7 8 9", // too many levels
		strings.Replace(good, " 1000000 ", " -1 ", 1), // a negative interval
		strings.Replace(good, " 1000000 ", " 0 ", 1),
		strings.Replace(good, " 10 ", " NaN ", 1),
		strings.Replace(good, " 10 ", " 1e300 ", 1),
		strings.Replace(good, " 10 ", " -5 ", 1),
		strings.Replace(good, " 10 ", " 0 ", 1), // no instance's limit is 0
		good + strings.Repeat(" ", MaxReport),
	} {
		if _, err := DecodeReport(s); err == nil {
			t.Errorf("DecodeReport(%.60q) took it", s)
		}
	}
}

func peer(demand ...float64) Peer {
	var p Peer
	p.Elapsed = time.Second
	copy(p.Demand[:], demand)
	return p
}

func TestShare(t *testing.T) {
	own := peer(700).Report
	others := []Peer{peer(150), peer(150)}
	if got := Share(500, own, others); math.Abs(got-350) > 1e-9 {
		t.Errorf("70%% of the demand: share %v of 500, want 350", got)
	}
	// Under the limit: its demand, and a third of what is left.
	if got := Share(2000, own, others); math.Abs(got-(700+1000/3.0)) > 1e-9 {
		t.Errorf("under the limit: share %v, want %v", got, 700+1000/3.0)
	}
	// Priority: the high level is served first, across the fleet.
	hi := peer(0, 300).Report // all its demand is the low level
	if got := Share(400, hi, []Peer{peer(400, 0)}); got != 0 {
		t.Errorf("low level only, high takes the whole limit elsewhere: share %v, want 0", got)
	}
	if got := Share(500, hi, []Peer{peer(400, 0)}); math.Abs(got-100) > 1e-9 {
		t.Errorf("low level gets what high leaves: share %v, want 100", got)
	}
	// No demand yet: a twentieth of an even part at least.
	if got := Share(600, Report{}, []Peer{peer(1000), peer(1000)}); math.Abs(got-10) > 1e-9 {
		t.Errorf("no demand: share %v, want 10", got)
	}
	if got := Share(Unbounded, own, others); got != Unbounded {
		t.Errorf("unbounded limit: share %v", got)
	}
}

func TestSum(t *testing.T) {
	own := Report{Tally: Tally{Elapsed: 500 * time.Millisecond, Admitted: 100, Good: 90, Median: 200 * time.Millisecond, Overdue: 1}}
	long := Peer{Report: Report{Tally: Tally{Elapsed: time.Second, Admitted: 100, Good: 100, Slow: 100, Median: 900 * time.Millisecond, Overdue: 2, RetryAfter: time.Second}}}
	stale := Peer{Report: Report{Tally: Tally{Elapsed: 500 * time.Millisecond, Admitted: 1000}, Slot: 5}, Age: time.Second}
	own.Slot, long.Slot = 7, 7
	s := Sum(own, []Peer{long, stale})
	if s.Admitted != 150 || s.Good != 140 || s.Slow != 50 || s.Overdue != 3 || s.RetryAfter != time.Second {
		t.Errorf("sum %+v: want the long interval halved, the stale one left out", s)
	}
	// Weights 90 (own, 200 ms) and 100 (900 ms): the median is the peer's.
	if s.Median != 900*time.Millisecond {
		t.Errorf("median %v, want 900ms", s.Median)
	}
}

// While pinned, what is admitted is the pin: the limit learned does not
// rise on the pin's refusals, and the pin is shared as the limit is.
func TestPinnedDoesNotRise(t *testing.T) {
	t.Parallel()
	p := New(Settings{Min: 1, Max: 1e6, WarmUp: NoWarmUp}, t0)
	p.ctrl.Adopt(300)
	p.Pin(100)
	now := t0
	for range 20 {
		now = now.Add(DefaultInterval)
		p.Gate.refused.Add(50)
		p.Gate.admitted.Add(50)
		p.Tick(now)
	}
	if p.ctrl.Limit() != 300 || p.Limit() != 100 || p.Admits() != 100 {
		t.Errorf("pinned at 100: learned %v, limit %v, admits %v; want 300, 100, 100", p.ctrl.Limit(), p.Limit(), p.Admits())
	}
	p.Pin(0)
	now = now.Add(DefaultInterval)
	p.Tick(now)
	if p.Limit() != p.ctrl.Limit() {
		t.Errorf("unpinned: limit %v, want the learned %v", p.Limit(), p.ctrl.Limit())
	}
}

// A report of the interval before stands for a late instance's; one of
// two intervals before is of an instance dead or far behind.
func TestSumLateReport(t *testing.T) {
	own := Report{Tally: Tally{Elapsed: 500 * time.Millisecond, Admitted: 100}, Slot: 10}
	late := Peer{Report: Report{Tally: Tally{Elapsed: 500 * time.Millisecond, Admitted: 50}, Slot: 9}}
	gone := Peer{Report: Report{Tally: Tally{Elapsed: 500 * time.Millisecond, Admitted: 70}, Slot: 8}}
	if s := Sum(own, []Peer{late, gone}); s.Admitted != 150 {
		t.Errorf("admitted %d, want 150: own and the late one's", s.Admitted)
	}
}
