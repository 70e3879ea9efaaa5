package limit

import (
	"math"
	"time"
)

// Entry is the state of one key, as the memory store holds it. The Redis
// store keeps the same state in a hash or a sorted set and runs the same
// arithmetic in Lua; the conformance suite in limittest holds the two to
// the same answers.
//
// Times are microseconds on the store's clock. An Entry whose Expires is
// not after now is treated as absent, exactly like a Redis key whose PTTL
// has run out.
type Entry struct {
	// Expires is when the entry stops mattering: the window's end, the
	// moment the bucket is full again, the last admission leaving the log,
	// the last lease running out.
	Expires int64

	start  int64   // fixed: window start; token bucket: time of tokens
	count  int64   // fixed: admitted in the window
	tokens float64 // token bucket: may be negative while requests queue
	log    []int64 // sliding: admission times from log[head], oldest first
	head   int
	leases map[string]int64 // concurrency: lease id -> expiry
}

// Live reports whether the entry still holds state at now.
func (e *Entry) Live(now int64) bool { return e.Expires > now }

// Check judges one request of hits against e at now without changing
// anything but expired state. Call Validate on r first.
func (r *Rule) Check(e *Entry, now int64, hits int64, z Zone) Decision {
	cost := r.CostOf(hits)
	d := Decision{Rule: r, Limit: r.p.n}
	switch r.Algorithm {
	case FixedWindow:
		_, end, cur := r.fixedWindow(e, now, z)
		d.ResetAfter = us(end - now)
		d.Allowed = cur+cost <= r.p.n
		if d.Allowed {
			d.Remaining = r.p.n - cur - cost
			d.idleRemaining, d.idleResetAfter = r.p.n-cur, d.ResetAfter
			if r.Align == AlignFirst && cur == 0 {
				d.idleResetAfter = 0 // no window is open until an admission
			}
		} else {
			d.Remaining = max(r.p.n-cur, 0)
			d.RetryAfter = d.ResetAfter
			if cost > r.p.n {
				d.RetryAfter = us(r.p.window)
			}
		}
	case SlidingWindow:
		e.prune(now - r.p.window)
		count := e.logLen(now)
		d.Allowed = count+cost <= r.p.n
		if d.Allowed {
			d.Remaining = r.p.n - count - cost
			oldest := now
			if count > 0 {
				oldest = e.log[e.head]
				d.idleResetAfter = us(oldest + r.p.window - now)
			}
			d.ResetAfter = us(oldest + r.p.window - now)
			d.idleRemaining = r.p.n - count
		} else {
			d.Remaining = max(r.p.n-count, 0)
			if count > 0 {
				d.ResetAfter = us(e.log[e.head] + r.p.window - now)
			}
			// The request fits once count+cost-n admissions have left.
			k := count + cost - r.p.n
			if k <= count {
				d.RetryAfter = us(e.log[e.head+int(k)-1] + r.p.window - now)
			} else {
				d.RetryAfter = us(r.p.window)
			}
		}
	case TokenBucket:
		tokens, _ := r.bucket(e, now)
		c := float64(cost)
		if tokens+tokenEpsilon >= c {
			d.Allowed = true
		} else {
			wait := int64(math.Ceil((c - tokens) / r.p.perUS))
			if cost <= r.p.n && wait <= r.p.queue {
				d.Allowed = true
				d.Delay = us(wait)
			} else {
				d.RetryAfter = us(wait)
				if cost > r.p.n {
					d.RetryAfter = us(int64(math.Ceil(c / r.p.perUS)))
				}
			}
		}
		left := tokens
		if d.Allowed {
			left -= c
			d.idleRemaining = int64(math.Floor(max(tokens, 0) + tokenEpsilon))
			d.idleResetAfter = us(r.fillTime(tokens))
		}
		d.Remaining = int64(math.Floor(max(left, 0) + tokenEpsilon))
		d.ResetAfter = us(r.fillTime(left))
	case Concurrency:
		n := e.liveLeases(now)
		d.Allowed = n+1 <= r.p.n
		if d.Allowed {
			d.Remaining = r.p.n - n - 1
			d.idleRemaining = r.p.n - n
		} else {
			d.RetryAfter = time.Second
		}
	}
	return d
}

// tokenEpsilon absorbs the rounding of float refills, so that a bucket
// refilled to 0.9999999999 tokens by exact arithmetic still yields its token.
const tokenEpsilon = 1e-9

// CostOf is what a request of hits takes from r, at most MaxCost (the
// rule's own cost is at most its count). Call Validate on r first.
func (r *Rule) CostOf(hits int64) int64 {
	c := r.p.cost
	if hits > 1 {
		if hits > MaxCost/c {
			return MaxCost
		}
		c *= hits
	}
	return c
}

// Commit applies an admission that Check allowed at the same now.
func (r *Rule) Commit(e *Entry, now int64, hits int64, z Zone, lease string) {
	cost := r.CostOf(hits)
	switch r.Algorithm {
	case FixedWindow:
		start, end, cur := r.fixedWindow(e, now, z)
		e.start, e.count = start, cur+cost
		e.Expires = end
	case SlidingWindow:
		if e.logLen(now) == 0 {
			e.log, e.head = e.log[:0], 0
		}
		t := now
		if n := len(e.log); n > e.head && e.log[n-1] > t {
			t = e.log[n-1] // a clock that stepped back must not unsort the log
		}
		for range cost {
			e.log = append(e.log, t)
		}
		e.Expires = t + r.p.window
	case TokenBucket:
		tokens, ts := r.bucket(e, now)
		e.tokens = tokens - float64(cost)
		e.start = ts
		e.Expires = ts + max(r.fillTime(e.tokens), 1)
	case Concurrency:
		if e.leases == nil || !e.Live(now) {
			e.leases = make(map[string]int64)
		}
		exp := now + r.p.lease
		e.leases[lease] = exp
		e.Expires = max(e.Expires, exp)
	}
}

// Peek reads the state of e at now without consuming anything.
func (r *Rule) Peek(e *Entry, now int64, z Zone) State {
	s := State{Algorithm: r.Algorithm, Limit: r.p.n, Window: r.Window()}
	switch r.Algorithm {
	case FixedWindow:
		_, end, cur := r.fixedWindow(e, now, z)
		s.Remaining = max(r.p.n-cur, 0)
		if r.Align == AlignEpoch || e.Live(now) {
			s.ResetAfter = us(end - now)
		}
	case SlidingWindow:
		e.prune(now - r.p.window)
		count := e.logLen(now)
		s.Remaining = max(r.p.n-count, 0)
		if count > 0 {
			s.ResetAfter = us(e.log[e.head] + r.p.window - now)
		}
	case TokenBucket:
		tokens, _ := r.bucket(e, now)
		s.Remaining = int64(math.Floor(max(tokens, 0) + tokenEpsilon))
		s.ResetAfter = us(r.fillTime(tokens))
	case Concurrency:
		s.InFlight = e.liveLeases(now)
		s.Remaining = max(r.p.n-s.InFlight, 0)
	}
	return s
}

// Release drops a lease; it is a no-op for a lease e does not hold.
func (e *Entry) Release(lease string) { delete(e.leases, lease) }

// Renew extends a lease e holds by the rule's LeaseTTL from now.
func (r *Rule) Renew(e *Entry, now int64, lease string) {
	if _, ok := e.leases[lease]; ok && e.Live(now) {
		exp := now + r.p.lease
		e.leases[lease] = exp
		e.Expires = max(e.Expires, exp)
	}
}

// Bounds are the start and end, in µs, of the fixed window aligned to the
// clock that holds now.
func (z Zone) Bounds(now int64) (start, end int64) {
	start = floorDiv(now+z.Off, z.Window)*z.Window - z.Off
	return start, start + z.Window
}

// fixedWindow is the current window's bounds and count.
func (r *Rule) fixedWindow(e *Entry, now int64, z Zone) (start, end, count int64) {
	if r.Align == AlignFirst {
		if e.Live(now) {
			return e.start, e.start + r.p.window, e.count
		}
		return now, now + r.p.window, 0
	}
	start, end = z.Bounds(now)
	if e.Live(now) && e.start == start {
		return start, end, e.count
	}
	return start, end, 0
}

// bucket is the bucket's tokens at now and the time they are counted at.
// A new or expired bucket is full. A clock that steps back refills nothing
// and does not move the bucket's time back, or the next refill would count
// the same time twice.
func (r *Rule) bucket(e *Entry, now int64) (tokens float64, ts int64) {
	if !e.Live(now) {
		return float64(r.p.n), now
	}
	ts = max(e.start, now)
	tokens = min(float64(r.p.n), e.tokens+float64(max(now-e.start, 0))*r.p.perUS)
	return tokens, ts
}

// fillTime is how long a bucket holding tokens takes to be full, in µs.
func (r *Rule) fillTime(tokens float64) int64 {
	missing := float64(r.p.n) - tokens
	if missing <= tokenEpsilon {
		return 0
	}
	return int64(math.Ceil(missing / r.p.perUS))
}

func (e *Entry) prune(horizon int64) {
	for e.head < len(e.log) && e.log[e.head] <= horizon {
		e.head++
	}
	// Compact once the dead prefix is at least half the log, so that a
	// log costs O(1) amortised per admission and its memory follows its
	// live length.
	if e.head >= 64 && e.head*2 >= len(e.log) {
		n := copy(e.log, e.log[e.head:])
		e.log, e.head = e.log[:n], 0
		if cap(e.log) > 1024 && n*4 < cap(e.log) {
			e.log = append(make([]int64, 0, n*2), e.log...)
		}
	}
}

func (e *Entry) logLen(now int64) int64 {
	if !e.Live(now) {
		return 0
	}
	return int64(len(e.log) - e.head)
}

func (e *Entry) liveLeases(now int64) int64 {
	if !e.Live(now) {
		return 0
	}
	for id, exp := range e.leases {
		if exp <= now {
			delete(e.leases, id)
		}
	}
	return int64(len(e.leases))
}

// floorDiv divides rounding towards minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a-q*b < 0 {
		q--
	}
	return q
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
