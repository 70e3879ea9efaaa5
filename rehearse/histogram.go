package rehearse

import (
	"math"
	"math/bits"
	"time"
)

// The histogram is log-linear, after HdrHistogram: durations below
// 2·subCount nanoseconds each have their own bucket; above, every power of
// two is split into subCount equal buckets. A bucket is then at most
// 1/subCount of its lower bound wide, and a quantile reported as the
// midpoint of its bucket is within 1/(2·subCount) ≈ 0.4% of a recorded
// value — exact enough for a p99.9 at 1% relative error, in at most 4,352
// counters.
const (
	subBits  = 7
	subCount = 1 << subBits
	// maxBits bounds what is told apart: durations from 2^40 ns (about 18
	// minutes) up count in the last bucket.
	maxBits    = 40
	maxValue   = 1<<maxBits - 1
	numBuckets = (maxBits-subBits)*subCount + subCount
)

// A Histogram counts durations to report their quantiles. The zero value is
// empty and ready to use. A Histogram is not safe for concurrent use.
type Histogram struct {
	counts   []uint64 // grown up to the highest bucket recorded
	n        uint64
	min, max time.Duration
}

// bucketOf returns the index of the bucket that counts v nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	// v>>shift is in [subCount, 2·subCount): the top subBits+1 bits of v.
	shift := bits.Len64(v) - subBits - 1
	return shift*subCount + int(v>>shift)
}

// bucketRange returns the lowest value bucket i counts and its width.
func bucketRange(i int) (lo, width uint64) {
	if i < 2*subCount {
		return uint64(i), 1
	}
	shift := i/subCount - 1
	return uint64(i%subCount+subCount) << shift, 1 << shift
}

// Record counts d. A negative d counts as zero.
func (h *Histogram) Record(d time.Duration) {
	d = max(d, 0)
	v := min(uint64(d), maxValue)
	i := bucketOf(v)
	if i >= len(h.counts) {
		h.grow(i + 1)
	}
	h.counts[i]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.n++
}

func (h *Histogram) grow(n int) {
	n = min(max(n, 2*len(h.counts)), numBuckets)
	if n <= cap(h.counts) {
		h.counts = h.counts[:n]
		return
	}
	c := make([]uint64, n)
	copy(c, h.counts)
	h.counts = c
}

// Count returns how many durations were recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Min returns the smallest duration recorded, or 0.
func (h *Histogram) Min() time.Duration { return h.min }

// Max returns the largest duration recorded, or 0.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the q-quantile (q in [0, 1]) of the recorded durations:
// the smallest recorded value that at least q of them do not exceed, to
// within 0.4%. It returns 0 when nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	// The epsilon keeps 0.99 × 1000 at rank 990: floating point makes it
	// 990.0000000000001, whose ceiling is 991.
	rank := uint64(math.Ceil(q*float64(h.n) - 1e-9))
	// The extremes are known exactly.
	switch {
	case rank <= 1:
		return h.min
	case rank >= h.n:
		return h.max
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, width := bucketRange(i)
			v := time.Duration(lo + width/2)
			// A quantile cannot lie outside the extremes.
			return min(max(v, h.min), h.max)
		}
	}
	return h.max
}

// Merge adds the durations counted by o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		h.grow(len(o.counts))
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
}

// Reset empties h and keeps its memory for reuse.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.counts = h.counts[:0]
	h.n, h.min, h.max = 0, 0, 0
}
