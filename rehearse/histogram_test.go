package rehearse

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// quantileOf is the reference: the value at rank ⌈q·n⌉ of the sorted slice.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	rank := max(int(math.Ceil(q*float64(len(sorted))-1e-9)), 1)
	return sorted[rank-1]
}

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		draw func() time.Duration
	}{
		// Latencies spread over six orders of magnitude, as a surge's are.
		{"log-uniform 10µs..10s", func() time.Duration {
			return time.Duration(math.Pow(10, 4+6*rng.Float64()))
		}},
		{"bimodal 200ms and 3s", func() time.Duration {
			if rng.IntN(10) < 8 {
				return 200*time.Millisecond + time.Duration(rng.NormFloat64()*float64(20*time.Millisecond))
			}
			return 3*time.Second + time.Duration(rng.NormFloat64()*float64(100*time.Millisecond))
		}},
		{"small integers", func() time.Duration { return time.Duration(rng.IntN(300)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			values := make([]time.Duration, 100_000)
			for i := range values {
				values[i] = max(tt.draw(), 0)
				h.Record(values[i])
			}
			slices.Sort(values)
			if h.Count() != uint64(len(values)) {
				t.Fatalf("Count = %d, want %d", h.Count(), len(values))
			}
			for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
				got, want := h.Quantile(q), quantileOf(values, q)
				if rel := math.Abs(float64(got-want)) / math.Max(float64(want), 1); rel > 0.01 && (got-want > 1 || want-got > 1) {
					t.Errorf("Quantile(%v) = %v, want %v within 1%% (off by %.2f%%)", q, got, want, 100*rel)
				}
			}
			if h.Min() != values[0] || h.Max() != values[len(values)-1] {
				t.Errorf("Min, Max = %v, %v; want %v, %v", h.Min(), h.Max(), values[0], values[len(values)-1])
			}
		})
	}
}

func TestHistogramEdges(t *testing.T) {
	t.Parallel()
	var h Histogram
	if q := h.Quantile(0.5); q != 0 || h.Max() != 0 || h.Count() != 0 {
		t.Errorf("empty histogram: Quantile %v, Max %v, Count %d; want zeros", q, h.Max(), h.Count())
	}
	h.Record(-5)
	if q := h.Quantile(1); q != 0 {
		t.Errorf("a negative duration counts as 0; Quantile(1) = %v", q)
	}
	h.Record(time.Hour) // past the last bucket: clamped there, Max still exact
	if h.Max() != time.Hour || h.Quantile(1) != time.Hour {
		t.Errorf("Max %v, Quantile(1) %v; want 1h for both", h.Max(), h.Quantile(1))
	}
	var one Histogram
	one.Record(1234567 * time.Nanosecond)
	for _, q := range []float64{0, 0.5, 0.999, 1} {
		if got := one.Quantile(q); got != 1234567 {
			t.Errorf("one value: Quantile(%v) = %v, want it exactly", q, got)
		}
	}
}

func TestHistogramMergeReset(t *testing.T) {
	t.Parallel()
	var a, b, all Histogram
	for i := range 1000 {
		d := time.Duration(i) * time.Millisecond
		all.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var m Histogram
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&Histogram{})
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if m.Quantile(q) != all.Quantile(q) {
			t.Errorf("merged Quantile(%v) = %v, want %v", q, m.Quantile(q), all.Quantile(q))
		}
	}
	if m.Count() != 1000 || m.Min() != 0 || m.Max() != 999*time.Millisecond {
		t.Errorf("merged Count %d Min %v Max %v", m.Count(), m.Min(), m.Max())
	}
	m.Reset()
	if m.Count() != 0 || m.Quantile(0.5) != 0 {
		t.Errorf("after Reset: Count %d, Quantile %v", m.Count(), m.Quantile(0.5))
	}
	m.Record(time.Second)
	if m.Quantile(0) != time.Second || m.Min() != time.Second {
		t.Errorf("after Reset and Record(1s): Quantile(0) %v Min %v", m.Quantile(0), m.Min())
	}
}

func TestBuckets(t *testing.T) {
	t.Parallel()
	// Every bucket's range maps back to it, the buckets tile the values
	// without gaps, and none is wider than 1/128 of its lower bound.
	next := uint64(0)
	for i := range numBuckets {
		lo, width := bucketRange(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, next)
		}
		if bucketOf(lo) != i || bucketOf(lo+width-1) != i {
			t.Fatalf("bucket %d: [%d, %d) does not map back to it", i, lo, lo+width)
		}
		if lo >= subCount && float64(width)/float64(lo) > 1.0/subCount {
			t.Fatalf("bucket %d: width %d is more than 1/%d of %d", i, width, subCount, lo)
		}
		next = lo + width
	}
	if next != maxValue+1 {
		t.Errorf("the buckets end at %d, want %d", next, uint64(maxValue+1))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	b.ReportAllocs()
	var h Histogram
	h.Record(10 * time.Second)
	d := time.Duration(0)
	for b.Loop() {
		d = (d + 7919*time.Microsecond) % (5 * time.Second)
		h.Record(d)
	}
}
