package core

import (
	"math"
	"time"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/limit"
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

// Idle is what a decision's Remaining and ResetAfter read if the request
// is admitted by its limit but rejected by another, and so consumes
// nothing there.
type Idle struct {
	Remaining  int64
	ResetAfter time.Duration
}

// Unconsumed is d as it reads when its limit admitted the request but
// another rejected it: nothing was consumed, no delay applies. Stores
// call it on every admitting decision of a rejected request, with the
// Idle that Check returned with d.
func (i Idle) Unconsumed(d limit.Decision) limit.Decision {
	if d.Allowed {
		d.Remaining, d.ResetAfter, d.Delay = i.Remaining, i.ResetAfter, 0
	}
	return d
}

// Check judges one request of hits on r against e at now without changing
// anything but expired state, and says what the decision reads if another
// limit rejects the request. Call Validate on r first.
func Check(r *limit.Rule, e *Entry, now int64, hits int64, z Zone) (limit.Decision, Idle) {
	p := params(r)
	cost := CostOf(r, hits)
	d := limit.Decision{Rule: r, Limit: p.N}
	var idle Idle
	switch r.Algorithm {
	case limit.FixedWindow:
		_, end, cur := fixedWindow(r, p, e, now, z)
		d.ResetAfter = us(end - now)
		d.Allowed = cur+cost <= p.N
		if d.Allowed {
			d.Remaining = p.N - cur - cost
			idle.Remaining, idle.ResetAfter = p.N-cur, d.ResetAfter
			if r.Align == limit.AlignFirst && cur == 0 {
				idle.ResetAfter = 0 // no window is open until an admission
			}
		} else {
			d.Remaining = max(p.N-cur, 0)
			d.RetryAfter = d.ResetAfter
			if cost > p.N {
				d.RetryAfter = us(p.Window)
			}
		}
	case limit.SlidingWindow:
		e.prune(now - p.Window)
		count := e.logLen(now)
		d.Allowed = count+cost <= p.N
		if d.Allowed {
			d.Remaining = p.N - count - cost
			oldest := now
			if count > 0 {
				oldest = e.log[e.head]
				idle.ResetAfter = us(oldest + p.Window - now)
			}
			d.ResetAfter = us(oldest + p.Window - now)
			idle.Remaining = p.N - count
		} else {
			d.Remaining = max(p.N-count, 0)
			if count > 0 {
				d.ResetAfter = us(e.log[e.head] + p.Window - now)
			}
			// The request fits once count+cost-n admissions have left.
			k := count + cost - p.N
			if k <= count {
				d.RetryAfter = us(e.log[e.head+int(k)-1] + p.Window - now)
			} else {
				d.RetryAfter = us(p.Window)
			}
		}
	case limit.TokenBucket:
		tokens, _ := bucket(p, e, now)
		c := float64(cost)
		if tokens+tokenEpsilon >= c {
			d.Allowed = true
		} else {
			wait := int64(math.Ceil((c - tokens) / p.PerUS))
			if cost <= p.N && wait <= p.Queue {
				d.Allowed = true
				d.Delay = us(wait)
			} else {
				d.RetryAfter = us(wait)
				if cost > p.N {
					d.RetryAfter = us(int64(math.Ceil(c / p.PerUS)))
				}
			}
		}
		left := tokens
		if d.Allowed {
			left -= c
			idle.Remaining = int64(math.Floor(max(tokens, 0) + tokenEpsilon))
			idle.ResetAfter = us(fillTime(p, tokens))
		}
		d.Remaining = int64(math.Floor(max(left, 0) + tokenEpsilon))
		d.ResetAfter = us(fillTime(p, left))
	case limit.Concurrency:
		n := e.liveLeases(now)
		d.Allowed = n+1 <= p.N
		if d.Allowed {
			d.Remaining = p.N - n - 1
			idle.Remaining = p.N - n
		} else {
			d.RetryAfter = time.Second
		}
	}
	return d, idle
}

// tokenEpsilon absorbs the rounding of float refills, so that a bucket
// refilled to 0.9999999999 tokens by exact arithmetic still yields its token.
const tokenEpsilon = 1e-9

// CostOf is what a request of hits takes from r, at most MaxCost (the
// rule's own cost is at most its count). Call Validate on r first.
func CostOf(r *limit.Rule, hits int64) int64 {
	c := params(r).Cost
	if hits > 1 {
		if hits > MaxCost/c {
			return MaxCost
		}
		c *= hits
	}
	return c
}

// Commit applies an admission of a request of hits on r that Check
// allowed at the same now.
func Commit(r *limit.Rule, e *Entry, now int64, hits int64, z Zone, lease string) {
	p := params(r)
	cost := CostOf(r, hits)
	switch r.Algorithm {
	case limit.FixedWindow:
		start, end, cur := fixedWindow(r, p, e, now, z)
		e.start, e.count = start, cur+cost
		e.Expires = end
	case limit.SlidingWindow:
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
		e.Expires = t + p.Window
	case limit.TokenBucket:
		tokens, ts := bucket(p, e, now)
		e.tokens = tokens - float64(cost)
		e.start = ts
		e.Expires = ts + max(fillTime(p, e.tokens), 1)
	case limit.Concurrency:
		if e.leases == nil || !e.Live(now) {
			e.leases = make(map[string]int64)
		}
		exp := now + p.Lease
		e.leases[lease] = exp
		e.Expires = max(e.Expires, exp)
	}
}

// Peek reads the state of r's entry e at now without consuming anything.
func Peek(r *limit.Rule, e *Entry, now int64, z Zone) limit.State {
	p := params(r)
	s := limit.State{Algorithm: r.Algorithm, Limit: p.N, Window: r.Window()}
	switch r.Algorithm {
	case limit.FixedWindow:
		_, end, cur := fixedWindow(r, p, e, now, z)
		s.Remaining = max(p.N-cur, 0)
		if r.Align == limit.AlignEpoch || e.Live(now) {
			s.ResetAfter = us(end - now)
		}
	case limit.SlidingWindow:
		e.prune(now - p.Window)
		count := e.logLen(now)
		s.Remaining = max(p.N-count, 0)
		if count > 0 {
			s.ResetAfter = us(e.log[e.head] + p.Window - now)
		}
	case limit.TokenBucket:
		tokens, _ := bucket(p, e, now)
		s.Remaining = int64(math.Floor(max(tokens, 0) + tokenEpsilon))
		s.ResetAfter = us(fillTime(p, tokens))
	case limit.Concurrency:
		s.InFlight = e.liveLeases(now)
		s.Remaining = max(p.N-s.InFlight, 0)
	}
	return s
}

// Release drops a lease; it is a no-op for a lease e does not hold.
func (e *Entry) Release(lease string) { delete(e.leases, lease) }

// Renew extends a lease e holds by r's LeaseTTL from now.
func Renew(r *limit.Rule, e *Entry, now int64, lease string) {
	if _, ok := e.leases[lease]; ok && e.Live(now) {
		exp := now + params(r).Lease
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
func fixedWindow(r *limit.Rule, p *ruledata.Params, e *Entry, now int64, z Zone) (start, end, count int64) {
	if r.Align == limit.AlignFirst {
		if e.Live(now) {
			return e.start, e.start + p.Window, e.count
		}
		return now, now + p.Window, 0
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
func bucket(p *ruledata.Params, e *Entry, now int64) (tokens float64, ts int64) {
	if !e.Live(now) {
		return float64(p.N), now
	}
	ts = max(e.start, now)
	tokens = min(float64(p.N), e.tokens+float64(max(now-e.start, 0))*p.PerUS)
	return tokens, ts
}

// fillTime is how long a bucket holding tokens takes to be full, in µs.
func fillTime(p *ruledata.Params, tokens float64) int64 {
	missing := float64(p.N) - tokens
	if missing <= tokenEpsilon {
		return 0
	}
	return int64(math.Ceil(missing / p.PerUS))
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
