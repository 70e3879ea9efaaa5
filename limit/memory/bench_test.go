package memory_test

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

func keys(n int) []limit.Key {
	ks := make([]limit.Key, n)
	for i := range ks {
		ks[i] = limit.StringKey(strconv.Itoa(i))
	}
	return ks
}

// benchKeys is how many keys the decision benchmarks spread over.
const benchKeys = 100_000

// parallel runs body as b.RunParallel does, timed from here, and reports
// besides ns/op the CPU time the process spent per operation (cpu-ns/op),
// the garbage collector's and the background sweep's included. On a
// machine shared with other work it moves less than ns/op, which also
// counts the time the benchmark waited for a core; compare the two
// benchmarks of one run by both.
func parallel(b *testing.B, body func(*testing.PB)) {
	b.ReportAllocs()
	b.ResetTimer()
	start, ok := cpuTime()
	b.RunParallel(body)
	if end, _ := cpuTime(); ok && b.N > 0 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}

// benchDecide decides rules, each on a key drawn at random, as a caller
// that decides request after request does: one request value and one
// decision array (Request.Into) per goroutine, reused.
func benchDecide(b *testing.B, rules ...*limit.Rule) {
	s := memory.New(memory.Options{})
	defer s.Close()
	ks := keys(benchKeys)
	ctx := context.Background()
	parallel(b, func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		limits := make([]limit.Limit, len(rules))
		req := &limit.Request{Limits: limits, Into: make([]limit.Decision, len(rules))}
		for pb.Next() {
			for i, r := range rules {
				limits[i] = limit.Limit{Rule: r, Key: ks[rng.IntN(len(ks))]}
			}
			req.Now = time.Now()
			if _, err := s.Decide(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecide(b *testing.B) {
	big := limit.Rate{Count: 1_000_000, Period: time.Second}
	fixed := &limit.Rule{Name: "b:fixed", Algorithm: limit.FixedWindow, Rate: big}
	// A bucket that is never full: a full bucket is no state at all and is
	// swept, so one sized like the others would measure map churn.
	bucket := &limit.Rule{Name: "b:bucket", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Second}, Burst: limit.MaxCount}
	sliding := &limit.Rule{Name: "b:sliding", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 100_000, Period: time.Second}}
	b.Run("fixed_window", func(b *testing.B) { benchDecide(b, fixed) })
	b.Run("token_bucket", func(b *testing.B) { benchDecide(b, bucket) })
	b.Run("sliding_window", func(b *testing.B) { benchDecide(b, sliding) })
	four := []*limit.Rule{
		{Name: "b:global", Algorithm: limit.FixedWindow, Rate: big},
		{Name: "b:api", Algorithm: limit.FixedWindow, Rate: big},
		{Name: "b:user", Algorithm: limit.FixedWindow, Rate: big},
		{Name: "b:ip", Algorithm: limit.FixedWindow, Rate: big},
	}
	b.Run("four_fixed_windows", func(b *testing.B) { benchDecide(b, four...) })
}

// refStore is what a Go programmer would write instead of the memory
// store for one limit: a golang.org/x/time/rate limiter per key, in maps
// split into locked shards, padded so that no two locks share a cache
// line, as the memory store's are.
type refStore struct {
	seed   maphash.Seed
	limit  rate.Limit
	burst  int
	shards [256]refShard
}

type refShard struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
	_  [48]byte
}

func newRefStore(r rate.Limit, burst int) *refStore {
	s := &refStore{seed: maphash.MakeSeed(), limit: r, burst: burst}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*rate.Limiter)
	}
	return s
}

func (s *refStore) allow(key string, now time.Time) bool {
	sh := &s.shards[maphash.String(s.seed, key)%uint64(len(s.shards))]
	sh.mu.Lock()
	lim := sh.m[key]
	if lim == nil {
		lim = rate.NewLimiter(s.limit, s.burst)
		sh.m[key] = lim
	}
	sh.mu.Unlock()
	return lim.AllowN(now, 1)
}

// BenchmarkReference is the yardstick of BenchmarkDecide's single-limit
// cases: the same keys (the same strings), drawn the same way, with a
// clock read per decision, on as many goroutines, against the rate of its
// fixed window, 1,000,000 a second, as a token bucket of that rate and
// burst (a window admits its count per window, a bucket refills all the
// time; at 25 or so decisions per key and second neither rejects anything
// here). What differs, all in the reference's favour: a limiter answers a
// bool where the memory store answers a limit.Result (remaining count,
// reset and retry times); it never forgets a key, so it has no sweep and
// no bound on the keys it holds, and never recreates a key whose window
// ended; it does not merge limits on one counter or keep each shard's time
// monotonic; and it reads its rate from the store, not a rule.
func BenchmarkReference(b *testing.B) {
	b.Run("x_time_rate", func(b *testing.B) {
		s := newRefStore(1_000_000, 1_000_000)
		ks := keys(benchKeys)
		parallel(b, func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
			for pb.Next() {
				k := ks[rng.IntN(len(ks))]
				if !s.allow(string(k), time.Now()) {
					b.Fatal("rejected under its rate")
				}
			}
		})
	})
}

// BenchmarkTenMillionKeys decides ten million distinct keys, lets their
// windows pass, sweeps, and reports the live heap before, at the peak and
// after: state whose window is over must leave no trace.
func BenchmarkTenMillionKeys(b *testing.B) {
	const n = 10_000_000
	r := &limit.Rule{Name: "b:flood", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Second}}
	ctx := context.Background()
	heap := func() float64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapAlloc) / (1 << 20)
	}
	b.ReportAllocs()
	for b.Loop() {
		before := heap()
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		s := memory.New(memory.Options{MaxKeys: n, SweepEvery: -1})
		req := &limit.Request{Limits: make([]limit.Limit, 1), Now: now}
		for i := range n {
			req.Limits[0] = limit.Limit{Rule: r, Key: limit.StringKey(strconv.Itoa(i))}
			if _, err := s.Decide(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		peak := heap()
		s.Sweep(now.Add(time.Second))
		after := heap()
		if s.Len() != 0 {
			b.Fatalf("%d keys left after their windows ended", s.Len())
		}
		if after-before > 16 {
			b.Fatalf("heap %.1f MiB before, %.1f MiB at the peak, %.1f MiB after the sweep: expired keys left a trace", before, peak, after)
		}
		b.ReportMetric(peak-before, "peak-MiB")
		b.ReportMetric(after-before, "after-MiB")
		s.Close()
	}
}
