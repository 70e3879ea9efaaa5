package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// Slices of a fixed window (limit.Rule.Sliced).
//
// A key that every request shares, a global limit's, is one Redis key that
// every request of every instance would otherwise write: on a cluster, one
// node takes the whole fleet's traffic. A sliced rule's instance instead
// leases a slice of the key's current window in one call (decide.lua mode
// l), which adds the slice to the window's count as admissions, and then
// admits from the slice itself until it runs out or the window ends. The
// window never admits more than its count, fleet-wide, as Redis never
// grants more than it has left, and a slice is used only in the window it
// was granted in: it ends when the window does, on the instance's
// monotonic clock and a little early, as local rejects do. Between that
// and the time the window surely ended, the rule is decided by Redis with
// the request's other limits, so that no lease takes from a window that is
// ending.
//
// With demand above the limit, what instances hold unused when the window
// ends is not admitted. Each instance asks for a slice of sliceShare of
// what it used in the window before (its share of the demand), so the
// slices held at once add up to sliceShare of the limit at most, however
// many instances share it; a first slice is firstSlice of the limit.
const (
	sliceShare = 0.02
	firstSlice = 1.0 / 150
)

// slice is one instance's part of a sliced rule's key.
type slice struct {
	mu     sync.Mutex
	left   int64 // admissions left in the slice
	until  int64 // Now at which the slice ends (the window, early)
	gapEnd int64 // Now at which the window has surely ended
	end    int64 // the window's end on Redis's clock, µs
	at     int64 // Redis's clock when the slice was granted, µs
	recv   int64 // Now when the grant came
	used   int64 // admissions made from slices of this window
	prev   int64 // and of the window before
	empty  bool  // Redis had nothing left in this window
	rem    int64 // what the window had left after the last lease
	n      int64 // the rule's count when the slice was leased
	flying chan struct{}
	err    error // of the lease call that flying closed for
}

// sliceID names a slice: a rule's counter for a key, as StoredKey does.
type sliceID struct {
	name, state string
	key         limit.Key
}

type slicer struct {
	mu sync.RWMutex
	m  map[sliceID]*slice
}

// maxSlices is how many slices a store keeps before it drops those whose
// window has ended: sliced rules are for keys that every request shares,
// a few per route, but a library's caller may slice a rule of many keys.
const maxSlices = 4096

func (s *Store) sliceOf(l limit.Limit) *slice {
	id := sliceID{l.Rule.Name, core.StateID(l.Rule), l.Key}
	s.slices.mu.RLock()
	sl := s.slices.m[id]
	s.slices.mu.RUnlock()
	if sl != nil {
		return sl
	}
	s.slices.mu.Lock()
	defer s.slices.mu.Unlock()
	if sl = s.slices.m[id]; sl != nil {
		return sl
	}
	if s.slices.m == nil {
		s.slices.m = map[sliceID]*slice{}
	}
	if len(s.slices.m) >= maxSlices {
		now := s.mono()
		for k, o := range s.slices.m {
			// A slice past its window holds nothing; one whose lease is
			// out is left to it.
			if o.mu.TryLock() {
				if o.flying == nil && now >= o.gapEnd {
					delete(s.slices.m, k)
				}
				o.mu.Unlock()
			}
		}
	}
	sl = &slice{}
	s.slices.m[id] = sl
	return sl
}

// how is what taking from a slice came to.
type how uint8

const (
	taken  how = iota // admitted from the slice
	empty             // the window has nothing left: rejected
	remote            // the window is ending: decide in Redis
)

// took is the outcome of take.
type took struct {
	how   how
	d     limit.Decision
	until int64 // the slice's end, which giveBack checks
	at    int64 // Redis's clock now, no later than it is, µs: a time in the slice's window
}

// take admits a request of cost from l's slice, leasing a new slice when
// it needs one, and says how it went, with the slice's decision.
func (s *Store) take(ctx context.Context, l limit.Limit, cost int64) (took, error) {
	sl := s.sliceOf(l)
	n := core.Limit(l.Rule)
	for {
		now := s.mono()
		sl.mu.Lock()
		if sl.n != n {
			// A reload changed the count: what the window has left is
			// Redis's to say again, and what the slice holds was leased
			// under the old count.
			sl.n, sl.left, sl.empty = n, 0, false
		}
		switch {
		case now < sl.until && sl.left >= cost:
			sl.left -= cost
			sl.used += cost
			t := took{how: taken, d: sl.decision(l, n, now, true), until: sl.until, at: sl.at + (now-sl.recv)/1000}
			sl.mu.Unlock()
			return t, nil
		case now < sl.until && sl.empty:
			t := took{how: empty, d: sl.decision(l, n, now, false), until: sl.until, at: sl.at + (now-sl.recv)/1000}
			sl.mu.Unlock()
			return t, nil
		case now >= sl.until && now < sl.gapEnd:
			sl.mu.Unlock()
			return took{how: remote}, nil
		}
		if sl.flying != nil {
			wait := sl.flying
			sl.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return took{}, unavailable("lease", ctx.Err())
			}
			sl.mu.Lock()
			err := sl.err
			sl.mu.Unlock()
			if err != nil {
				return took{}, err
			}
			continue
		}
		// One lease call at a time per slice: the others wait for it.
		wait := make(chan struct{})
		sl.flying = wait
		want := sl.size(n, cost)
		sl.mu.Unlock()
		err := s.lease(ctx, sl, l, want)
		sl.mu.Lock()
		sl.flying, sl.err = nil, err
		sl.mu.Unlock()
		close(wait)
		if err != nil {
			return took{}, err
		}
	}
}

// size is how much to lease: sliceShare of what this instance used in
// the current window or the one before, whichever is more, or firstSlice
// of the limit before it has used any; at least cost, at most the limit.
func (sl *slice) size(n, cost int64) int64 {
	used := max(sl.used, sl.prev)
	want := int64(math.Ceil(sliceShare * float64(used)))
	if used == 0 {
		want = int64(math.Ceil(firstSlice * float64(n)))
	}
	return min(max(want, cost, 1), n)
}

// decision is the answer of a slice at now: an admission, or a rejection
// until the window ends. Remaining is what the window had left at the last
// lease and what the slice holds.
func (sl *slice) decision(l limit.Limit, n, now int64, admit bool) limit.Decision {
	reset := time.Duration(sl.gapEnd - now)
	d := limit.Decision{Rule: l.Rule, Key: l.Key, Allowed: admit, Limit: n, Remaining: sl.rem + sl.left, ResetAfter: reset}
	if !admit {
		d.Local, d.Remaining, d.RetryAfter = true, 0, time.Duration(sl.until-now)
	}
	return d
}

// unTake returns what take took for a request that another limit
// rejected, if its slice is still the one it was taken from.
func (s *Store) unTake(l limit.Limit, cost int64, until int64) {
	sl := s.sliceOf(l)
	sl.mu.Lock()
	if sl.until == until && s.mono() < until {
		sl.left += cost
		sl.used -= cost
	}
	sl.mu.Unlock()
}

// dropSlice forgets what the instance holds of l's window, for a reset:
// the next request leases from the fresh count.
func (s *Store) dropSlice(l limit.Limit) { s.sliceOf(l).drop() }

// drop forgets what the slice holds and knows of its window.
func (sl *slice) drop() {
	sl.mu.Lock()
	sl.left, sl.until, sl.gapEnd, sl.empty, sl.end = 0, 0, 0, false, 0
	sl.mu.Unlock()
}

// lease asks Redis for want admissions of l's current window.
func (s *Store) lease(ctx context.Context, sl *slice, l limit.Limit, want int64) error {
	c, err := s.get("lease")
	if err != nil {
		return err
	}
	a := argsOf(l.Rule)
	args, _ := a.appendTo(append(make([]string, 0, base+11), "l", s.offsetArg(), "", ""), l.Rule, 1, time.Now())
	args[base+4] = strconv.FormatInt(want, 10) // the cost: what to take
	key := s.storedKey(l)
	g, ok, probe := s.enterKey(key)
	if !ok {
		return resting("lease", g)
	}
	sent := s.mono()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	v, err := decideScript.Exec(ctx, c, []string{key}, args).AsIntSlice()
	recv := s.mono()
	switch {
	case err != nil:
		err = unavailable("lease", err)
	case len(v) != 4:
		err = unavailable("lease", fmt.Errorf("script returned %d values", len(v)))
	}
	s.leaveKey(g, key, probe, err)
	if err != nil {
		return err
	}
	at, got, reset, rem := v[0], v[1], us(v[2]), v[3]
	end := at + v[2]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if end != sl.end {
		// A new window: what was left of the old one is lost with it.
		sl.prev, sl.used, sl.left = sl.used, 0, 0
		sl.end = end
	}
	sl.at, sl.recv, sl.rem = at, recv, rem
	sl.left += got
	sl.empty = rem == 0
	// The window ends reset after Redis decided, which was after sent and
	// before recv.
	sl.until = sent + int64(reset-margin(reset))
	sl.gapEnd = recv + int64(reset)
	return nil
}

// margin is how early a slice or a remembered rejection of a wait ends:
// 1 ms, and 1/1000 of the wait for a store clock that runs fast.
func margin(wait time.Duration) time.Duration { return time.Millisecond + wait/1000 }
