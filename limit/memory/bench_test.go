package memory_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

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

func benchDecide(b *testing.B, rules ...*limit.Rule) {
	s := memory.New(memory.Options{})
	defer s.Close()
	ks := keys(100_000)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		limits := make([]limit.Limit, len(rules))
		req := &limit.Request{Limits: limits}
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
