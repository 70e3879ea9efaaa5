// Package limittest is the conformance suite every limit.Store must pass:
// the same sequences, the same exactness under concurrency and the same
// atomicity, whether the store is the embedded memory store or Redis.
package limittest

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"

	_ "time/tzdata" // the zone tests must not depend on the machine's tz database
)

// Harness is one store under test and its clock.
type Harness struct {
	Store limit.Store

	// Now reads the store's clock.
	Now func() time.Time

	// Set puts the store's clock at t. The suite only calls it on
	// harnesses made with realTime false.
	Set func(t time.Time)

	// Tolerance is how far the store's clock may have moved on between a
	// Set and the decisions that follow: zero for a fake clock, a few tens
	// of milliseconds for a store whose clock runs on (Redis).
	Tolerance time.Duration

	// CheckExpiry fails tb if any state the store holds would never expire.
	CheckExpiry func(tb testing.TB)

	// SlotGroups says the store decides a request's limits group by group
	// and may leave the limits after a rejecting group undecided
	// (limit.Decision.Undecided): Redis Cluster. Other stores must decide
	// every limit.
	SlotGroups bool

	at     time.Time // the time the suite last set
	frozen bool
}

// hold puts the store's clock back at the time the suite last set, before
// each call: a store whose clock runs on (Redis) then drifts by one round
// trip at most, however slow the machine, and a sequence of calls sees the
// time stand still as it does with a fake clock.
func (h *Harness) hold() {
	if h.frozen {
		h.Set(h.at)
	}
}

// NewHarness makes a fresh, empty store for one test. With realTime the
// store runs on the real clock; otherwise the suite drives it with Set.
type NewHarness func(t *testing.T, realTime bool) *Harness

// Run runs the whole suite.
func Run(t *testing.T, nh NewHarness) {
	for _, tc := range []struct {
		name string
		real bool
		f    func(*testing.T, *Harness)
	}{
		{"FixedWindowEpoch", false, testFixedEpoch},
		{"FixedWindowZone", false, testFixedZone},
		{"FixedWindowZoneDST", false, testFixedZoneDST},
		{"FixedWindowFirst", false, testFixedFirst},
		{"SlidingWindow", false, testSliding},
		{"TokenBucket", false, testTokenBucket},
		{"TokenBucketCost", false, testTokenBucketCost},
		{"TokenBucketQueue", false, testTokenBucketQueue},
		{"Concurrency", false, testConcurrency},
		{"ConcurrencyLeaseExpiry", false, testLeaseExpiry},
		{"Atomicity", false, testAtomicity},
		{"RejectionStartsNoWindow", false, testRejectionStartsNoWindow},
		{"Shadow", false, testShadow},
		{"Hits", false, testHits},
		{"PeekReset", false, testPeekReset},
		{"RuleChange", false, testRuleChange},
		{"KeysDoNotCollide", false, testKeys},
		{"ExactFixedWindow", true, testExactFixed},
		{"ExactSlidingWindow", true, testExactSliding},
		{"ExactTokenBucket", true, testExactTokenBucket},
		{"ExactConcurrency", true, testExactConcurrency},
		{"ZeroNow", true, testZeroNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nh(t, tc.real)
			if !tc.real {
				set := h.Set
				h.Set = func(at time.Time) { h.at, h.frozen = at, true; set(at) }
			}
			t.Cleanup(func() { h.CheckExpiry(t) })
			tc.f(t, h)
		})
	}
}

// t0 is aligned to every window the sequences use (1 s, 10 s, 1 min, 1 h,
// 1 day), plus a millisecond so a slightly early clock stays in the window.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, int(time.Millisecond), time.UTC)

func decide(t *testing.T, h *Harness, hits int64, lease string, limits ...limit.Limit) limit.Result {
	t.Helper()
	h.hold()
	res, err := h.Store.Decide(context.Background(), &limit.Request{Limits: limits, Now: h.Now(), Hits: hits, Lease: lease})
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if len(res.Decisions) != len(limits) {
		t.Fatalf("Decide returned %d decisions for %d limits", len(res.Decisions), len(limits))
	}
	for i, d := range res.Decisions {
		switch {
		case !d.Undecided:
		case !h.SlotGroups:
			t.Fatalf("limit %d left undecided by a store that decides every limit", i)
		case res.Allowed || !d.Allowed || d.Remaining != 0 || d.ResetAfter != 0 || d.Delay != 0:
			t.Fatalf("undecided limit %d of a request allowed=%v: %+v; want it admitting with nothing known, in a rejected request", i, res.Allowed, d)
		}
	}
	return res
}

// expect checks the first decision of one request of one limit.
func expect(t *testing.T, h *Harness, l limit.Limit, allowed bool, remaining int64) limit.Decision {
	t.Helper()
	res := decide(t, h, 0, "", l)
	d := res.Decisions[0]
	if d.Allowed != allowed || res.Allowed != allowed || d.Remaining != remaining {
		t.Fatalf("%s at %v: allowed=%v remaining=%d, want allowed=%v remaining=%d",
			l.Rule.Name, res.Time.Format(time.RFC3339Nano), d.Allowed, d.Remaining, allowed, remaining)
	}
	return d
}

// near checks a duration that the store computed at a time up to
// h.Tolerance away from the one the test set.
func near(t *testing.T, h *Harness, what string, got, want time.Duration) {
	t.Helper()
	if got > want+h.Tolerance || got < want-h.Tolerance {
		t.Fatalf("%s = %v, want %v (tolerance -%v)", what, got, want, h.Tolerance)
	}
}

func rule(t *testing.T, r *limit.Rule) *limit.Rule {
	t.Helper()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func rate(n int64, per time.Duration) limit.Rate { return limit.Rate{Count: n, Period: per} }
