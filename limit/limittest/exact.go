package limittest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// Goroutines is how many callers the exactness tests run at once.
const Goroutines = 64

type sample struct {
	at      int64 // store time, µs
	allowed bool
}

// hammer runs Goroutines callers deciding l until the store's clock has
// moved d past the first decision, and returns every decision sorted by
// store time. It follows the store's clock, not a wall-clock deadline, so
// that a machine too busy to run the callers for a while still yields the
// span of decisions the checks need.
func hammer(t *testing.T, h *Harness, l limit.Limit, d time.Duration) []sample {
	t.Helper()
	var (
		mu    sync.Mutex
		all   []sample
		wg    sync.WaitGroup
		fails atomic.Int64
		first atomic.Int64
	)
	span := d.Microseconds()
	for range Goroutines {
		wg.Go(func() {
			var mine []sample
			for {
				res, err := h.Store.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{l}, Now: time.Now()})
				if err != nil {
					fails.Add(1)
					return
				}
				at := res.Time.UnixMicro()
				mine = append(mine, sample{at: at, allowed: res.Allowed})
				first.CompareAndSwap(0, at)
				if at-first.Load() >= span {
					break
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if n := fails.Load(); n > 0 {
		t.Fatalf("%d callers saw a store error", n)
	}
	slices.SortStableFunc(all, func(a, b sample) int { return int(a.at - b.at) })
	return all
}

func testExactFixed(t *testing.T, h *Harness) {
	const n, w = 50, 500 * time.Millisecond
	r := rule(t, &limit.Rule{Name: "t:exact-fixed", Algorithm: limit.FixedWindow, Rate: rate(n, w)})
	all := hammer(t, h, limit.Limit{Rule: r, Key: limit.StringKey("hot")}, 4*w+w/2)
	wus := w.Microseconds()
	perWindow := map[int64]int{}
	for _, s := range all {
		if s.allowed {
			perWindow[s.at/wus]++
		}
	}
	first, last := all[0].at, all[len(all)-1].at
	full := 0
	for idx, got := range perWindow {
		if got > n {
			t.Errorf("window %d admitted %d, limit %d", idx, got, n)
		}
		if idx*wus >= first && (idx+1)*wus <= last {
			full++
			if got != n {
				t.Errorf("window %d, fully under saturating demand, admitted %d, want exactly %d", idx, got, n)
			}
		}
	}
	if full < 3 {
		t.Fatalf("only %d windows were fully covered by %d decisions from %d to %d µs; want 3", full, len(all), first, last)
	}
}

func testExactSliding(t *testing.T, h *Harness) {
	const n, w = 30, 300 * time.Millisecond
	r := rule(t, &limit.Rule{Name: "t:exact-sliding", Algorithm: limit.SlidingWindow, Rate: rate(n, w)})
	all := hammer(t, h, limit.Limit{Rule: r, Key: limit.StringKey("hot")}, 4*w)
	var at []int64
	for _, s := range all {
		if s.allowed {
			at = append(at, s.at)
		}
	}
	if len(at) < 3*n {
		t.Fatalf("admitted %d over 4 windows under saturating demand, want at least %d", len(at), 3*n)
	}
	// Every interval [at[i], at[i]+w) must hold at most n admissions.
	wus := w.Microseconds()
	j := 0
	for i := range at {
		for j < len(at) && at[j] < at[i]+wus {
			j++
		}
		if j-i > n {
			t.Fatalf("%d admissions in the %v from %d, limit %d", j-i, w, at[i], n)
		}
	}
}

func testExactTokenBucket(t *testing.T, h *Harness) {
	const perSec, burst = 200, 20
	r := rule(t, &limit.Rule{Name: "t:exact-bucket", Algorithm: limit.TokenBucket, Rate: rate(perSec, time.Second), Burst: burst})
	all := hammer(t, h, limit.Limit{Rule: r, Key: limit.StringKey("hot")}, time.Second)
	t0 := all[0].at

	// A token bucket's bound: at most burst + rate·T taken in any interval
	// T from the bucket's first use.
	admitted := 0
	for i, s := range all {
		upTo := admitted
		for k := i; k < len(all) && all[k].at == s.at; k++ {
			if all[k].allowed {
				upTo++
			}
		}
		if budget := burst + perSec*float64(s.at-t0)/1e6; float64(upTo) > budget+1e-6 {
			t.Fatalf("%d tokens taken by %dµs, at most %.3f may be", upTo, s.at-t0, budget)
		}
		if s.allowed {
			admitted++
		}
	}

	// And exactly what the bucket holds: replaying the decisions in the
	// store's time order through the arithmetic of a token bucket gives the
	// same admissions, time by time. (The "≥ burst + rate·T − 1" of a
	// saturating demand is the special case of this with no pause; a
	// caller that stalls lets the bucket fill and tokens cap at the burst.)
	tokens, last := float64(burst), t0
	rejections := 0
	for i := 0; i < len(all); {
		at, size, got := all[i].at, 0, 0
		for ; i < len(all) && all[i].at == at; i++ {
			size++
			if all[i].allowed {
				got++
			}
		}
		rejections += size - got
		tokens = min(float64(burst), tokens+perSec*float64(at-last)/1e6)
		last = at
		want := min(size, int(math.Floor(tokens+1e-9)))
		boundary := math.Abs(tokens-math.Round(tokens)) < 1e-6
		if got != want && !(boundary && abs(got-want) == 1) {
			t.Fatalf("at %dµs the bucket held %.6f tokens: %d of %d requests admitted, want %d", at-t0, tokens, got, size, want)
		}
		tokens -= float64(got)
	}
	if rejections == 0 {
		t.Fatal("no rejection: the demand did not saturate the bucket")
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func testExactConcurrency(t *testing.T, h *Harness) {
	const n = 5
	r := rule(t, &limit.Rule{Name: "t:exact-conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: n}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("hot")}
	var (
		inFlight, peak, admitted atomic.Int64
		seq                      atomic.Int64
		wg                       sync.WaitGroup
	)
	ctx := context.Background()
	deadline := time.Now().Add(500 * time.Millisecond)
	for range Goroutines {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				lease := fmt.Sprintf("lease-%d", seq.Add(1))
				res, err := h.Store.Decide(ctx, &limit.Request{Limits: []limit.Limit{l}, Now: time.Now(), Lease: lease})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
					// The store holds the lease from before this increment
					// until after the decrement, so this count can only
					// be smaller than the store's.
					cur := inFlight.Add(1)
					for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
					}
					time.Sleep(100 * time.Microsecond)
					inFlight.Add(-1)
				}
				if err := h.Store.Release(ctx, lease, l); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > n {
		t.Fatalf("%d requests in flight at once, limit %d", p, n)
	}
	if admitted.Load() < n {
		t.Fatalf("only %d admissions in 500ms", admitted.Load())
	}
	s, err := h.Store.Peek(ctx, time.Now(), r, l.Key)
	if err != nil {
		t.Fatal(err)
	}
	if s.InFlight != 0 {
		t.Fatalf("%d leases left after every one was released", s.InFlight)
	}
}

// testZeroNow: a request or a peek that leaves out the time is decided at
// the time of the call, not at the zero time (whose zone offsets are the
// zones' local mean times): its window is the one every other call of the
// moment counts in.
func testZeroNow(t *testing.T, h *Harness) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	r := rule(t, &limit.Rule{Name: "t:zero-now", Algorithm: limit.FixedWindow, Rate: rate(2, 24*time.Hour), Location: shanghai})
	l := limit.Limit{Rule: r, Key: limit.StringKey("k")}
	ctx := context.Background()
	for i := range 2 {
		res, err := h.Store.Decide(ctx, &limit.Request{Limits: []limit.Limit{l}})
		if err != nil || !res.Allowed {
			t.Fatalf("request %d without a time: allowed %v, %v", i, res.Allowed, err)
		}
	}
	res, err := h.Store.Decide(ctx, &limit.Request{Limits: []limit.Limit{l}, Now: h.Now()})
	if err != nil || res.Allowed {
		t.Fatalf("a request at the time of the call after two without one: allowed %v, %v; want rejected, the same window", res.Allowed, err)
	}
	st, err := h.Store.Peek(ctx, time.Time{}, r, l.Key)
	if err != nil || st.Remaining != 0 {
		t.Fatalf("a peek without a time: %+v, %v; want remaining 0", st, err)
	}
}
