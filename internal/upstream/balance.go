package upstream

import (
	"errors"
	"time"
)

// ErrNoTarget fails an exchange that found every target of its route out
// of rotation: none is asked, and the route answers 502 at once.
var ErrNoTarget = errors.New("no target of the route is healthy")

// EjectFor is how long round robin passes over a target that refused a
// connection, so that the requests after it do not pay for the refusal.
// Unlike an ejection it never leaves a route without a target: when
// every target refused lately, they are tried all the same.
const EjectFor = 2 * time.Second

// pick returns the index of the target the next exchange goes to: the
// next in round robin (or, with least_request, the one with the fewest
// requests in flight, ties in round robin) among those in rotation,
// passing over the targets that refused a connection lately unless all
// of them did. When every target that passes its checks is ejected, they
// are asked all the same, as Envoy's panic threshold does: an ejection
// is a guess from traffic, and a route left with no target at all would
// not learn that one came back. It returns false when no target passes
// its active checks.
func (u *Upstream) pick() (int, bool) {
	n := len(u.targets)
	if n == 1 {
		t := u.state[0]
		if t.unhealthy.Load() {
			return 0, false
		}
		if t.ejected.Load() != 0 {
			t.available(u.now().UnixNano()) // to end an ejection that is over
		}
		return 0, true
	}
	first := int((u.next.Add(1) - 1) % uint64(n))
	now := u.now().UnixNano()
	if u.least {
		return u.pickLeast(first, now)
	}
	refused, ejected := -1, -1
	for k := range n {
		i := (first + k) % n
		t := u.state[i]
		if !t.available(now) {
			if ejected < 0 && !t.unhealthy.Load() {
				ejected = i
			}
			continue
		}
		if t.down.Load() <= now {
			return i, true
		}
		if refused < 0 {
			refused = i
		}
	}
	if refused >= 0 {
		return refused, true
	}
	return ejected, ejected >= 0
}

// pickLeast is pick for least_request.
func (u *Upstream) pickLeast(first int, now int64) (int, bool) {
	n := len(u.targets)
	best, bestRank := -1, 3
	var fewest int64
	for k := range n {
		i := (first + k) % n
		t := u.state[i]
		// 0: in rotation; 1: refused a connection lately; 2: ejected.
		rank := 0
		switch {
		case !t.available(now):
			if t.unhealthy.Load() {
				continue
			}
			rank = 2
		case t.down.Load() > now:
			rank = 1
		}
		f := t.inflight.Load()
		if rank < bestRank || rank == bestRank && f < fewest {
			best, bestRank, fewest = i, rank, f
		}
	}
	return best, best >= 0
}

// acquire and release count a request in flight to target i, for
// least_request.
func (u *Upstream) acquire(i int) {
	if u.least {
		u.state[i].inflight.Add(1)
	}
}

func (u *Upstream) release(i int) {
	if u.least {
		u.state[i].inflight.Add(-1)
	}
}

// eject passes over target i for EjectFor after it refused a connection,
// and counts the failure towards its ejection.
func (u *Upstream) eject(i int) {
	now := u.now()
	if len(u.targets) > 1 {
		u.state[i].down.Store(now.Add(EjectFor).UnixNano())
	}
	u.state[i].failed(&u.ejection, now)
}

// failed counts an exchange with target i that got no answer.
func (u *Upstream) failed(i int) { u.state[i].failed(&u.ejection, u.now()) }

// answered counts an exchange with target i that got an answer.
func (u *Upstream) answered(i int, status int) {
	t := u.state[i]
	if t.fails.Load() == 0 && u.ejection.Consecutive5xx == 0 {
		return // the common case, without a look at the clock
	}
	t.answered(&u.ejection, status, u.now())
}
