package protect

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"
)

// The gate admits at its limit, evenly, with a burst of a few ms.
func TestGateAdmitsAtTheLimit(t *testing.T) {
	t.Parallel()
	g := NewGate(100, 20*time.Millisecond, t0)
	n := g.At(t0)
	admitted := 0
	// 1,000 requests a second for 2 s against 100 a second.
	for i := range 2000 {
		if _, ok := g.Admit(n + int64(i)*int64(time.Millisecond)); ok {
			admitted++
		}
	}
	if admitted < 200 || admitted > 203 {
		t.Errorf("%d admitted in 2 s at 100/s, want 200 and a burst of 20 ms (2)", admitted)
	}
	tl := g.Tally(t0.Add(2 * time.Second))
	if tl.Admitted != int64(admitted) || tl.Refused != int64(2000-admitted) || tl.Elapsed != 2*time.Second {
		t.Errorf("tally %+v", tl)
	}
	// A new limit holds from the next request.
	g.Set(1000, 0, false, t0)
	admitted = 0
	for i := range 1000 {
		if _, ok := g.Admit(n + int64(2*time.Second) + int64(i)*int64(time.Millisecond)); ok {
			admitted++
		}
	}
	if admitted < 990 {
		t.Errorf("%d of 1,000 admitted at a limit of 1,000/s", admitted)
	}
}

// How the admitted requests ended is tallied: in time, slow (past the
// threshold), failed, throttled with the longest Retry-After; the
// median comes from the latencies; a dropped request counts for nothing.
func TestGateTally(t *testing.T) {
	t.Parallel()
	g := NewGate(1e6, 0, t0)
	g.Set(1e6, 300*time.Millisecond, false, t0)
	n := g.At(t0)
	end := func(took time.Duration, r Result, ra time.Duration) {
		tk, ok := g.Admit(n)
		if !ok {
			t.Fatal("refused")
		}
		g.Done(tk, n+int64(took), r, ra)
	}
	for range 7 {
		end(100*time.Millisecond, Answered, 0)
	}
	end(400*time.Millisecond, Answered, 0)
	end(time.Second, Failed, 0)
	end(time.Millisecond, Throttled, 2*time.Second)
	end(time.Millisecond, Throttled, time.Second)
	end(time.Millisecond, Dropped, 0)
	tl := g.Tally(t0.Add(DefaultInterval))
	if tl.Good != 7 || tl.Slow != 1 || tl.Failed != 1 || tl.Throttled != 2 || tl.RetryAfter != 2*time.Second || tl.Admitted != 12 {
		t.Errorf("tally %+v", tl)
	}
	if tl.Median < 90*time.Millisecond || tl.Median > 120*time.Millisecond {
		t.Errorf("median %v, want about 100ms", tl.Median)
	}
	if tl := g.Tally(t0.Add(2 * DefaultInterval)); tl.Good+tl.Slow+tl.Failed+tl.Admitted != 0 || tl.Median != 0 {
		t.Errorf("a second tally counts again: %+v", tl)
	}
}

// Requests in flight past the threshold are overdue, counted by the
// interval they were admitted in; after a cut, those admitted before it
// and in the interval after it count as neither overdue nor slow, but
// their answers in time still count.
func TestGateOverdueAndCut(t *testing.T) {
	t.Parallel()
	g := NewGate(1e6, 0, t0)
	g.Set(1e6, 300*time.Millisecond, false, t0)
	at := func(d time.Duration) int64 { return g.At(t0.Add(d)) }
	var stuck []Ticket
	for range 5 {
		tk, _ := g.Admit(at(100 * time.Millisecond))
		stuck = append(stuck, tk)
	}
	quick, _ := g.Admit(at(200 * time.Millisecond))
	g.Done(quick, at(250*time.Millisecond), Answered, 0)
	if tl := g.Tally(t0.Add(500 * time.Millisecond)); tl.Overdue != 0 {
		t.Errorf("overdue %d in the interval they were admitted in", tl.Overdue)
	}
	if tl := g.Tally(t0.Add(time.Second)); tl.Overdue != 5 {
		t.Errorf("overdue %d, want the 5 admitted 0.9 s ago", tl.Overdue)
	}
	g.Done(stuck[0], at(1100*time.Millisecond), Answered, 0)
	if tl := g.Tally(t0.Add(1500 * time.Millisecond)); tl.Overdue != 4 || tl.Slow != 1 {
		t.Errorf("overdue %d slow %d, want 4 and 1", tl.Overdue, tl.Slow)
	}
	// A cut: what was admitted before it, and in the second after it, is
	// stale; an answer in time counts all the same.
	g.Set(100, 300*time.Millisecond, true, t0.Add(1500*time.Millisecond))
	late, _ := g.Admit(at(1600 * time.Millisecond))
	g.Tally(t0.Add(2 * time.Second))
	after, _ := g.Admit(at(2100 * time.Millisecond))
	g.Done(stuck[1], at(2200*time.Millisecond), Answered, 0)  // slow, stale
	g.Done(stuck[2], at(2200*time.Millisecond), Failed, 0)    // stale
	g.Done(late, at(2200*time.Millisecond), Throttled, 0)     // the interval after the cut: stale
	g.Done(after, at(2150*time.Millisecond), Answered, 0)     // in time: counts, stale or not
	g.Done(stuck[3], at(2200*time.Millisecond), Throttled, 0) // stale
	tl := g.Tally(t0.Add(2500 * time.Millisecond))
	if tl.Slow != 0 || tl.Failed != 0 || tl.Throttled != 0 || tl.Good != 1 || tl.Overdue != 0 {
		t.Errorf("after the cut: %+v; want only the answer in time", tl)
	}
}

// Admissions and ends from many goroutines, with tallies beside them:
// every admission is tallied once, and what is in flight drains to zero.
func TestGateConcurrent(t *testing.T) {
	t.Parallel()
	g := NewGate(1e9, time.Second, t0)
	g.Set(1e9, time.Hour, false, t0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted, ended int64
	stop := make(chan struct{})
	var ticks sync.WaitGroup
	ticks.Go(func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tl := g.Tally(t0.Add(time.Duration(i) * time.Millisecond))
			mu.Lock()
			admitted += tl.Admitted
			ended += tl.Good
			mu.Unlock()
		}
	})
	for range 8 {
		wg.Go(func() {
			for range 5000 {
				tk, ok := g.Admit(g.At(t0))
				if ok {
					g.Done(tk, g.At(t0)+1, Answered, 0)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	ticks.Wait()
	tl := g.Tally(t0.Add(time.Hour))
	admitted += tl.Admitted
	ended += tl.Good
	if admitted != 40000 || ended != 40000 {
		t.Errorf("%d admitted and %d ended tallied, want 40,000 each", admitted, ended)
	}
}

func TestLatencyBuckets(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{time.Microsecond, 37 * time.Microsecond, 5 * time.Millisecond, 200 * time.Millisecond, 3 * time.Second, time.Hour} {
		v := bucketValue(latencyBucket(int64(d)))
		if r := float64(v) / float64(d); r < 0.85 || r > 1.2 {
			t.Errorf("%v is counted as %v", d, v)
		}
	}
}

// BenchmarkAdmitDone is the request path's cost of protection: one
// admission and one end.
func BenchmarkAdmitDone(b *testing.B) {
	g := NewGate(1e12, time.Second, t0)
	g.Set(1e12, time.Second, false, t0)
	n := g.At(t0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, ok := g.Admit(n)
			if ok {
				g.Done(tk, n+int64(time.Millisecond), Answered, 0)
			}
		}
	})
}

// A protector with priority levels, room for every request: the levels'
// fast path, no lock, no allocation.
func BenchmarkAdmitDoneLevels(b *testing.B) {
	p := New(Settings{Min: 1, Max: 1e9, Levels: 3, WarmUp: NoWarmUp}, t0)
	p.Gate.Set(1e12, time.Second, false, t0)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := time.Now()
		for pb.Next() {
			tk, ok := p.Admit(ctx, 1, now)
			if ok {
				p.Gate.End(tk, time.Millisecond, Answered, 0)
			}
		}
	})
}

// A limit of nothing admits nothing; one of a request a day admits one
// and then owes a day; raised, either admits again at the new pace, not
// after what the old one owed.
func TestGateRaisedFromNothing(t *testing.T) {
	t.Parallel()
	g := NewGate(0, 0, t0)
	n := g.At(t0)
	if _, ok := g.Admit(n); ok {
		t.Error("a limit of 0 admitted a request")
	}
	g.Set(100, 0, false, t0.Add(time.Second))
	if _, ok := g.Admit(n + int64(time.Second) + int64(10*time.Millisecond)); !ok {
		t.Error("raised to 100/s, nothing admitted 10 ms later")
	}
	g.Set(1.0/86400, 0, false, t0.Add(2*time.Second))
	if _, ok := g.Admit(n + int64(2*time.Second)); !ok {
		t.Fatal("a request a day: the first not admitted")
	}
	if _, ok := g.Admit(n + int64(3*time.Second)); ok {
		t.Error("a request a day: a second admitted a second later")
	}
	g.Set(1000, 0, false, t0.Add(4*time.Second))
	if _, ok := g.Admit(n + int64(4*time.Second) + int64(2*time.Millisecond)); !ok {
		t.Error("raised to 1,000/s, still owing the day")
	}
	for _, bad := range []float64{math.NaN(), -1} {
		g.Set(bad, 0, false, t0.Add(5*time.Second))
		if _, ok := g.Admit(n + int64(6*time.Second)); ok {
			t.Errorf("a limit of %v admitted a request", bad)
		}
	}
}
