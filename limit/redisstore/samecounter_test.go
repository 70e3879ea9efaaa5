package redisstore

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/limittest"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// TestSameCounterTwice holds every store, the memory store, a standalone
// Redis and a Redis Cluster, to one answer for a request that names one
// counter twice (core.DecideMerged): the request needs the sum of the
// limits' costs from the counter, is admitted only if the sum fits, and
// takes the sum; a concurrency limit holds one lease; limits on one
// counter whose rules differ in more than their cost are refused. And a
// counter never reads less than nothing.
func TestSameCounterTwice(t *testing.T) {
	srv := testredis.Start(t)
	cl := testredis.StartCluster(t, 3)
	for _, st := range []struct {
		name string
		new  func(t *testing.T, realTime bool) *limittest.Harness
	}{
		{"memory", memoryHarness},
		{"standalone", func(t *testing.T, realTime bool) *limittest.Harness {
			srv.Do(t, "FLUSHALL")
			return harness(t, open(t, srv), realTime, []*testredis.Server{srv})
		}},
		{"cluster", func(t *testing.T, realTime bool) *limittest.Harness {
			flushCluster(t, cl)
			return harness(t, openCluster(t, cl), realTime, cl.Nodes())
		}},
	} {
		t.Run(st.name, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				f    func(*testing.T, *limittest.Harness)
			}{
				{"FixedWindow", sameCounterCosts(&limit.Rule{Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 4, Period: 10 * time.Second}})},
				{"SlidingWindow", sameCounterCosts(&limit.Rule{Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 4, Period: 10 * time.Second}})},
				{"TokenBucket", sameCounterCosts(&limit.Rule{Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Hour}, Burst: 4})},
				{"Concurrency", sameCounterConcurrency},
				{"OtherSettings", sameCounterOtherSettings},
				{"PeekNeverNegative", peekNeverNegative},
				{"Concurrent", sameCounterConcurrent},
			} {
				t.Run(tc.name, func(t *testing.T) {
					h := st.new(t, tc.name == "Concurrent")
					t.Cleanup(func() { h.CheckExpiry(t) })
					tc.f(t, h)
				})
			}
		})
	}
}

// memoryHarness is a memory store on a clock the test sets, or on the
// real one.
func memoryHarness(t *testing.T, realTime bool) *limittest.Harness {
	var (
		mu  sync.Mutex
		now = time.Unix(0, 0)
	)
	h := &limittest.Harness{
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Set: func(at time.Time) { mu.Lock(); now = at; mu.Unlock() },
	}
	if realTime {
		h.Now = time.Now
	}
	s := memory.New(memory.Options{SweepEvery: -1, Now: h.Now})
	t.Cleanup(func() { s.Close() })
	h.Store = s
	h.CheckExpiry = func(tb testing.TB) {
		if n := s.Unexpiring(); n > 0 {
			tb.Errorf("%d entries have no expiry", n)
		}
	}
	return h
}

// sameT0 is aligned to the windows of these tests, plus a millisecond so
// that a slightly early clock stays in the window.
var sameT0 = time.Date(2030, 1, 1, 0, 0, 0, int(time.Millisecond), time.UTC)

// decideAt decides limits at sameT0, with the clock put back there first,
// as a Redis clock runs on.
func decideAt(t *testing.T, h *limittest.Harness, hits int64, lease string, limits ...limit.Limit) limit.Result {
	t.Helper()
	h.Set(sameT0)
	res, err := h.Store.Decide(context.Background(), &limit.Request{Limits: limits, Now: h.Now(), Hits: hits, Lease: lease})
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if len(res.Decisions) != len(limits) {
		t.Fatalf("%d decisions for %d limits", len(res.Decisions), len(limits))
	}
	for i, d := range res.Decisions {
		if d.Rule != limits[i].Rule || d.Key != limits[i].Key {
			t.Fatalf("decision %d is of %s %q, want the limit's own rule %s and key %q", i, d.Rule.Name, d.Key, limits[i].Rule.Name, limits[i].Key)
		}
	}
	return res
}

func peekAt(t *testing.T, h *limittest.Harness, l limit.Limit) limit.State {
	t.Helper()
	h.Set(sameT0)
	s, err := h.Store.Peek(context.Background(), h.Now(), l.Rule, l.Key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sameCounterCosts runs one sequence on a rule of the given algorithm and
// settings that admits 4 per window (or a bucket of 4 that refills 1 an
// hour): a window that counts both limits of a request, or neither.
func sameCounterCosts(proto *limit.Rule) func(*testing.T, *limittest.Harness) {
	return func(t *testing.T, h *limittest.Harness) {
		r := proto.WithCost(0)
		r.Name = "t:same-" + proto.Algorithm.String()
		r = valid(t, r)
		twice := r.WithCost(2) // the same counter at another cost, as the Envoy service makes for a hits_addend
		twice = valid(t, twice)
		other := valid(t, &limit.Rule{Name: "t:same-other", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 10 * time.Second}})
		k := func(s string) limit.Key { return limit.StringKey(s) }

		// A counter the store has not seen: both limits count.
		l := limit.Limit{Rule: r, Key: k("a")}
		res := decideAt(t, h, 0, "", l, l)
		for i, d := range res.Decisions {
			if !res.Allowed || !d.Allowed || d.Remaining != 2 {
				t.Fatalf("first request of the limit twice, decision %d: allowed %v %+v; want admitted with 2 of 4 remaining", i, res.Allowed, d)
			}
		}
		if s := peekAt(t, h, l); s.Remaining != 2 {
			t.Fatalf("the limit twice on a new counter left %d of 4, want 2", s.Remaining)
		}
		// One more leaves 1, which the limit twice does not fit: the
		// request is rejected, and takes nothing.
		if res := decideAt(t, h, 0, "", l); !res.Allowed || res.Decisions[0].Remaining != 1 {
			t.Fatalf("the limit once with 2 left: %+v", res.Decisions[0])
		}
		res = decideAt(t, h, 0, "", l, l)
		for i, d := range res.Decisions {
			if res.Allowed || d.Allowed || d.Remaining != 1 || d.RetryAfter <= 0 {
				t.Fatalf("the limit twice with 1 left, decision %d: allowed %v %+v; want rejected with 1 remaining and a retry", i, res.Allowed, d)
			}
		}
		if s := peekAt(t, h, l); s.Remaining != 1 {
			t.Fatalf("a rejected request of the limit twice left %d, want 1", s.Remaining)
		}
		if res := decideAt(t, h, 0, "", l); !res.Allowed || res.Decisions[0].Remaining != 0 {
			t.Fatalf("the limit once with 1 left: %+v", res.Decisions[0])
		}

		// Costs add up, hits multiply the sum, and every limit keeps its
		// own place, rule and key among the others.
		b := limit.Limit{Rule: r, Key: k("b")}
		bb := limit.Limit{Rule: twice, Key: k("b")}
		o := limit.Limit{Rule: other, Key: k("b")}
		res = decideAt(t, h, 0, "", b, o, bb)
		if !res.Allowed || res.Decisions[0].Remaining != 1 || res.Decisions[2].Remaining != 1 || res.Decisions[1].Remaining != 0 {
			t.Fatalf("costs 1 and 2 on one counter of 4: %+v", res.Decisions)
		}
		c := limit.Limit{Rule: r, Key: k("c")}
		if res := decideAt(t, h, 2, "", c, c); !res.Allowed || res.Decisions[1].Remaining != 0 {
			t.Fatalf("2 hits of the limit twice on a counter of 4: %+v", res.Decisions)
		}
		d := limit.Limit{Rule: r, Key: k("d")}
		if res := decideAt(t, h, 3, "", d, d); res.Allowed || res.Decisions[0].Allowed || res.Decisions[1].Remaining != 4 {
			t.Fatalf("3 hits of the limit twice on a counter of 4: %+v", res.Decisions)
		}

		// A request that another limit rejects takes nothing from the
		// counter named twice; on a cluster, whose slot groups may leave
		// it undecided or give back what it took, too.
		e := limit.Limit{Rule: r, Key: k("e")}
		res = decideAt(t, h, 0, "", e, o, e)
		if res.Allowed || res.Decisions[1].Allowed {
			t.Fatalf("a request the other limit rejects: %+v", res.Decisions)
		}
		for _, i := range []int{0, 2} {
			if d := res.Decisions[i]; !d.Allowed || !d.Undecided && d.Remaining != 4 {
				t.Fatalf("decision %d of the counter named twice in a rejected request: %+v; want admitting with 4 remaining", i, d)
			}
		}
		if s := peekAt(t, h, e); s.Remaining != 4 {
			t.Fatalf("a rejected request took %d of the counter named twice", 4-s.Remaining)
		}
	}
}

// sameCounterConcurrency: a request that names a concurrency limit twice
// is one request in flight, with one lease.
func sameCounterConcurrency(t *testing.T, h *limittest.Harness) {
	r := valid(t, &limit.Rule{Name: "t:same-conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 2}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("a")}
	inFlight := func(want int64) {
		t.Helper()
		if s := peekAt(t, h, l); s.InFlight != want || s.Remaining != 2-want {
			t.Fatalf("%d in flight, %d remaining; want %d and %d", s.InFlight, s.Remaining, want, 2-want)
		}
	}
	res := decideAt(t, h, 0, "a", l, l)
	for i, d := range res.Decisions {
		if !res.Allowed || !d.Allowed || d.Remaining != 1 {
			t.Fatalf("lease a, decision %d: %+v; want admitted with 1 remaining", i, d)
		}
	}
	inFlight(1)
	if !decideAt(t, h, 0, "b", l, l).Allowed {
		t.Fatal("lease b rejected with one place free")
	}
	inFlight(2)
	if decideAt(t, h, 0, "c", l, l).Allowed {
		t.Fatal("lease c admitted over a limit of 2")
	}
	// One release frees the request's one lease.
	if err := h.Store.Release(context.Background(), "a", l); err != nil {
		t.Fatal(err)
	}
	inFlight(1)
	if err := h.Store.Release(context.Background(), "b", l, l); err != nil {
		t.Fatal(err)
	}
	inFlight(0)
}

// sameCounterOtherSettings: rules on one counter may differ in their cost
// only; rules of one name on different counters (another window) are
// decided apart.
func sameCounterOtherSettings(t *testing.T, h *limittest.Harness) {
	fixed := func(n int64, w time.Duration, shadow bool) *limit.Rule {
		return valid(t, &limit.Rule{Name: "t:same-settings", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: n, Period: w}, Shadow: shadow})
	}
	k := limit.StringKey("a")
	base := limit.Limit{Rule: fixed(3, 10*time.Second, false), Key: k}
	for _, other := range []*limit.Rule{fixed(5, 10*time.Second, false), fixed(3, 10*time.Second, true)} {
		h.Set(sameT0)
		if _, err := h.Store.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{base, {Rule: other, Key: k}}, Now: h.Now()}); err == nil {
			t.Fatalf("limits on one counter with counts %d and %d, shadow %v and %v, were decided",
				base.Rule.Rate.Count, other.Rate.Count, base.Rule.Shadow, other.Shadow)
		}
	}
	if s := peekAt(t, h, base); s.Remaining != 3 {
		t.Fatalf("refused requests took %d", 3-s.Remaining)
	}
	long := limit.Limit{Rule: fixed(3, 20*time.Second, false), Key: k}
	res := decideAt(t, h, 0, "", base, long)
	if !res.Allowed || res.Decisions[0].Remaining != 2 || res.Decisions[1].Remaining != 2 {
		t.Fatalf("one name on two windows: %+v; want each counter with 2 remaining", res.Decisions)
	}
}

// peekNeverNegative: a counter that holds more than its rule's count,
// because the count was lowered, reads 0 remaining, never less.
func peekNeverNegative(t *testing.T, h *limittest.Harness) {
	rule := func(n int64) *limit.Rule {
		return valid(t, &limit.Rule{Name: "t:same-lowered", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: n, Period: 10 * time.Second}})
	}
	k := limit.StringKey("a")
	for range 5 {
		decideAt(t, h, 0, "", limit.Limit{Rule: rule(5), Key: k})
	}
	lowered := limit.Limit{Rule: rule(3), Key: k}
	if s := peekAt(t, h, lowered); s.Remaining != 0 {
		t.Fatalf("5 taken of a count lowered to 3: peek reads %d remaining, want 0", s.Remaining)
	}
	if res := decideAt(t, h, 0, "", lowered); res.Allowed || res.Decisions[0].Remaining != 0 {
		t.Fatalf("5 taken of a count lowered to 3: %+v", res.Decisions[0])
	}
}

// sameCounterConcurrent: callers at once, whose requests name one fixed
// window once or twice, never take more than its count in a window.
func sameCounterConcurrent(t *testing.T, h *limittest.Harness) {
	const n, w, callers = 25, 200 * time.Millisecond, 16
	r := valid(t, &limit.Rule{Name: "t:same-concurrent", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: n, Period: w}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("hot")}
	var (
		mu       sync.Mutex
		taken    = map[int64]int64{} // window -> admitted cost
		rejected atomic.Int64
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(4 * w)
	for range callers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				// At random, so that the count reaches n-1 before
				// a request of two as often as not.
				req := &limit.Request{Limits: []limit.Limit{l, l}, Now: time.Now()}
				if rand.IntN(3) == 0 {
					req.Limits = req.Limits[:1]
				}
				res, err := h.Store.Decide(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Allowed {
					rejected.Add(1)
					continue
				}
				mu.Lock()
				taken[res.Time.UnixMicro()/w.Microseconds()] += int64(len(req.Limits))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for win, got := range taken {
		if got > n {
			t.Errorf("window %d admitted %d, limit %d", win, got, n)
		}
	}
	if rejected.Load() == 0 {
		t.Fatal("no rejection: the demand did not saturate the window")
	}
	t.Logf("%d windows, %d rejections", len(taken), rejected.Load())
}
