package limittest

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

func testFixedEpoch(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:fixed", Algorithm: limit.FixedWindow, Rate: rate(5, 10*time.Second)})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	for want := int64(4); want >= 0; want-- {
		d := expect(t, h, l, true, want)
		if d.Limit != 5 {
			t.Fatalf("Limit = %d, want 5", d.Limit)
		}
	}
	d := expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 10*time.Second-time.Millisecond)
	near(t, h, "ResetAfter", d.ResetAfter, 10*time.Second-time.Millisecond)

	h.Set(t0.Add(9 * time.Second))
	d = expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, time.Second-time.Millisecond)

	h.Set(t0.Add(10 * time.Second))
	d = expect(t, h, l, true, 4)
	near(t, h, "ResetAfter", d.ResetAfter, 10*time.Second-time.Millisecond)
	expect(t, h, limit.Limit{Rule: r, Key: limit.StringKey("u2")}, true, 4)
}

func testFixedZone(t *testing.T, h *Harness) {
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	local := rule(t, &limit.Rule{Name: "t:day-cn", Algorithm: limit.FixedWindow, Rate: rate(3, 24*time.Hour), Location: sh})
	utc := rule(t, &limit.Rule{Name: "t:day-utc", Algorithm: limit.FixedWindow, Rate: rate(3, 24*time.Hour)})
	k := limit.StringKey("u1")

	// 23:59:59.5 in Shanghai: half a second before its day ends.
	h.Set(time.Date(2030, 1, 1, 15, 59, 59, 5e8, time.UTC))
	for want := int64(2); want >= 0; want-- {
		expect(t, h, limit.Limit{Rule: local, Key: k}, true, want)
	}
	d := expect(t, h, limit.Limit{Rule: local, Key: k}, false, 0)
	near(t, h, "ResetAfter (Shanghai midnight)", d.ResetAfter, 500*time.Millisecond)
	d = expect(t, h, limit.Limit{Rule: utc, Key: k}, true, 2)
	near(t, h, "ResetAfter (UTC midnight)", d.ResetAfter, 8*time.Hour+500*time.Millisecond)

	h.Set(time.Date(2030, 1, 1, 16, 0, 0, 1e6, time.UTC))
	d = expect(t, h, limit.Limit{Rule: local, Key: k}, true, 2)
	near(t, h, "ResetAfter (next Shanghai day)", d.ResetAfter, 24*time.Hour-time.Millisecond)
	expect(t, h, limit.Limit{Rule: utc, Key: k}, true, 1)
}

// A day window in a zone with daylight saving time runs from local
// midnight to local midnight on the days the offset changes too: 25 hours
// when the clock goes back, 23 when it goes forward. It neither restarts
// when the offset changes nor ends an hour early or late.
func testFixedZoneDST(t *testing.T, h *Harness) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	day := rule(t, &limit.Rule{Name: "t:day-ny", Algorithm: limit.FixedWindow, Rate: rate(3, 24*time.Hour), Location: ny})
	at := func(month time.Month, d, hour, min int) time.Time {
		return time.Date(2030, month, d, hour, min, 0, int(time.Millisecond), ny)
	}
	for _, tc := range []struct {
		name       string
		before     time.Time // the day's first hour, before the change
		after      time.Time // later that day, after it
		late       time.Time // the day's last half hour
		next       time.Time // the next local midnight
		lateResets time.Duration
	}{
		// 2030-11-03: 02:00 EDT becomes 01:00 EST.
		{"back", at(11, 3, 0, 30), at(11, 3, 3, 0), at(11, 3, 23, 30), at(11, 4, 0, 0), 30 * time.Minute},
		// 2030-03-10: 02:00 EST becomes 03:00 EDT.
		{"forward", at(3, 10, 1, 30), at(3, 10, 4, 0), at(3, 10, 23, 30), at(3, 11, 0, 0), 30 * time.Minute},
	} {
		k := limit.Limit{Rule: day, Key: limit.StringKey("u-" + tc.name)}
		h.Set(tc.before)
		for want := int64(2); want >= 0; want-- {
			expect(t, h, k, true, want)
		}
		d := expect(t, h, k, false, 0)
		near(t, h, tc.name+": ResetAfter before the change", d.ResetAfter, tc.next.Sub(tc.before)-time.Millisecond)
		h.Set(tc.after)
		expect(t, h, k, false, 0)
		h.Set(tc.late)
		d = expect(t, h, k, false, 0)
		near(t, h, tc.name+": ResetAfter late in the day", d.ResetAfter, tc.lateResets-time.Millisecond)
		if st := peek(t, h, day, k.Key); st.Remaining != 0 {
			t.Fatalf("%s: Peek late in the day: %d remaining, want 0", tc.name, st.Remaining)
		} else {
			near(t, h, tc.name+": Peek's ResetAfter late in the day", st.ResetAfter, tc.lateResets-time.Millisecond)
		}
		h.Set(tc.next)
		d = expect(t, h, k, true, 2)
		near(t, h, tc.name+": ResetAfter of the next day", d.ResetAfter, tc.next.AddDate(0, 0, 1).Sub(tc.next)-time.Millisecond)
	}
}

func testFixedFirst(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:first", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: rate(2, 10*time.Second)})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0.Add(3 * time.Second))
	d := expect(t, h, l, true, 1)
	near(t, h, "ResetAfter", d.ResetAfter, 10*time.Second)
	expect(t, h, l, true, 0)
	d = expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 10*time.Second)

	// The window began at the first admission, not at a multiple of 10 s.
	h.Set(t0.Add(12*time.Second + 900*time.Millisecond))
	d = expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 100*time.Millisecond)

	h.Set(t0.Add(13*time.Second + h.Tolerance + time.Millisecond))
	d = expect(t, h, l, true, 1)
	near(t, h, "ResetAfter", d.ResetAfter, 10*time.Second)
}

func testSliding(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:sliding", Algorithm: limit.SlidingWindow, Rate: rate(3, 10*time.Second)})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	d := expect(t, h, l, true, 2)
	near(t, h, "ResetAfter", d.ResetAfter, 10*time.Second)
	h.Set(t0.Add(2 * time.Second))
	expect(t, h, l, true, 1)
	h.Set(t0.Add(4 * time.Second))
	d = expect(t, h, l, true, 0)
	near(t, h, "ResetAfter", d.ResetAfter, 6*time.Second)
	h.Set(t0.Add(5 * time.Second))
	d = expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 5*time.Second)
	near(t, h, "ResetAfter", d.ResetAfter, 5*time.Second)

	// The admission at t0 leaves the window; the one at t0+2s has not.
	h.Set(t0.Add(10*time.Second + h.Tolerance + time.Millisecond))
	expect(t, h, l, true, 0)
	h.Set(t0.Add(10*time.Second + 500*time.Millisecond))
	d = expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 1500*time.Millisecond)

	// A fixed window would have admitted 3 from t0+10s on; here no
	// interval of 10 s may hold more than 3, so t0+11.9s still waits for
	// the admission at t0+2s to leave.
	h.Set(t0.Add(11*time.Second + 900*time.Millisecond))
	d = expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 100*time.Millisecond)
}

func testTokenBucket(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:bucket", Algorithm: limit.TokenBucket, Rate: rate(1, time.Second), Burst: 3})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	for want := int64(2); want >= 0; want-- {
		d := expect(t, h, l, true, want)
		if d.Limit != 3 {
			t.Fatalf("Limit = %d, want the burst 3", d.Limit)
		}
	}
	d := expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, time.Second)
	near(t, h, "ResetAfter", d.ResetAfter, 3*time.Second)

	h.Set(t0.Add(500 * time.Millisecond))
	d = expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 500*time.Millisecond)

	h.Set(t0.Add(time.Second + h.Tolerance))
	expect(t, h, l, true, 0)

	h.Set(t0.Add(time.Minute))
	d = expect(t, h, l, true, 2)
	near(t, h, "ResetAfter", d.ResetAfter, time.Second)

	// burst defaults to the count as written: 100/s has a burst of 100.
	def := rule(t, &limit.Rule{Name: "t:bucket-default", Algorithm: limit.TokenBucket, Rate: rate(100, time.Second)})
	if d := expect(t, h, limit.Limit{Rule: def, Key: limit.StringKey("u1")}, true, 99); d.Limit != 100 {
		t.Fatalf("default burst = %d, want 100", d.Limit)
	}
}

func testTokenBucketCost(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:cost", Algorithm: limit.TokenBucket, Rate: rate(10, time.Second), Burst: 10, Cost: 4})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	expect(t, h, l, true, 6)
	expect(t, h, l, true, 2)
	d := expect(t, h, l, false, 2)
	near(t, h, "RetryAfter", d.RetryAfter, 200*time.Millisecond)

	bad := &limit.Rule{Name: "t:bad", Algorithm: limit.TokenBucket, Rate: rate(10, time.Second), Burst: 3, Cost: 4}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "burst 3 is smaller than the cost 4") {
		t.Fatalf("Validate = %v, want the burst and cost named", err)
	}
}

func testTokenBucketQueue(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:queue", Algorithm: limit.TokenBucket, Rate: rate(10, time.Second), Burst: 1, Queue: 250 * time.Millisecond})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	for i, want := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond} {
		res := decide(t, h, 0, "", l)
		if !res.Allowed {
			t.Fatalf("request %d rejected, want queued for %v", i, want)
		}
		near(t, h, "Delay", res.Decisions[0].Delay, want)
		if res.Delay != res.Decisions[0].Delay {
			t.Fatalf("Result.Delay %v != Decision.Delay %v", res.Delay, res.Decisions[0].Delay)
		}
	}
	d := expect(t, h, l, false, 0)
	near(t, h, "RetryAfter", d.RetryAfter, 300*time.Millisecond)
}

func testConcurrency(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 2}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	acquire := func(lease string, want bool) {
		t.Helper()
		if res := decide(t, h, 0, lease, l); res.Allowed != want {
			t.Fatalf("lease %s: allowed=%v, want %v", lease, res.Allowed, want)
		}
	}
	acquire("a", true)
	acquire("b", true)
	acquire("c", false)
	inFlight(t, h, l, 2)
	ctx := context.Background()
	if err := h.Store.Release(ctx, "a", l); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Release(ctx, "a", l); err != nil {
		t.Fatalf("a second release of the same lease: %v", err)
	}
	acquire("c", true)
	for _, id := range []string{"b", "c", "never-acquired"} {
		if err := h.Store.Release(ctx, id, l); err != nil {
			t.Fatal(err)
		}
	}
	inFlight(t, h, l, 0)

	if _, err := h.Store.Decide(ctx, &limit.Request{Limits: []limit.Limit{l}, Now: h.Now()}); err == nil {
		t.Fatal("a concurrency limit without a lease id was decided")
	}
}

func inFlight(t *testing.T, h *Harness, l limit.Limit, want int64) {
	t.Helper()
	h.hold()
	s, err := h.Store.Peek(context.Background(), h.Now(), l.Rule, l.Key)
	if err != nil {
		t.Fatal(err)
	}
	if s.InFlight != want || s.Remaining != core.Limit(l.Rule)-want {
		t.Fatalf("in flight %d remaining %d, want %d and %d", s.InFlight, s.Remaining, want, core.Limit(l.Rule)-want)
	}
}

func testLeaseExpiry(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:lease", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 1}, LeaseTTL: time.Second})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	if !decide(t, h, 0, "a", l).Allowed {
		t.Fatal("first lease rejected")
	}
	h.Set(t0.Add(500 * time.Millisecond))
	if decide(t, h, 0, "b", l).Allowed {
		t.Fatal("a second lease admitted over a limit of 1")
	}
	if err := h.Store.Renew(context.Background(), h.Now(), "a", l); err != nil {
		t.Fatal(err)
	}
	h.Set(t0.Add(1200 * time.Millisecond))
	if decide(t, h, 0, "b", l).Allowed {
		t.Fatal("lease a expired although it was renewed until t0+1.5s")
	}
	// Nobody released a: its holder died. It expires on its own.
	h.Set(t0.Add(1500*time.Millisecond + h.Tolerance + time.Millisecond))
	if !decide(t, h, 0, "b", l).Allowed {
		t.Fatal("lease a never expired")
	}
}

func testAtomicity(t *testing.T, h *Harness) {
	user := rule(t, &limit.Rule{Name: "t:user", Algorithm: limit.FixedWindow, Rate: rate(1, 10*time.Second)})
	api := rule(t, &limit.Rule{Name: "t:api", Algorithm: limit.FixedWindow, Rate: rate(5, time.Second)})
	apiKey := limit.StringKey("route")
	h.Set(t0)
	admitted := 0
	for range 100 {
		res := decide(t, h, 0, "", limit.Limit{Rule: user, Key: limit.StringKey("u1")}, limit.Limit{Rule: api, Key: apiKey})
		if res.Allowed {
			admitted++
			continue
		}
		// The api limit admitted this request but it was rejected, so
		// its decision reports nothing taken and no delay; or, on a
		// store that decides slot by slot, the user limit rejected it
		// before the api limit was asked (decide checks such answers).
		if d := res.Decisions[1]; d.Undecided {
			continue
		} else if !d.Allowed || d.Remaining != 4 || d.Delay != 0 {
			t.Fatalf("api decision of a rejected request: %+v, want allowed with 4 remaining", d)
		}
	}
	if admitted != 1 {
		t.Fatalf("admitted %d, want 1", admitted)
	}
	if s := peek(t, h, api, apiKey); s.Remaining != 4 {
		t.Fatalf("api remaining %d after 1 admission and 99 rejections, want 4: rejected requests consumed quota", s.Remaining)
	}

	// And the other way round: what the api limit rejects takes nothing
	// from the user limits.
	h.Set(t0.Add(20 * time.Second))
	for i := range 7 {
		k := limit.StringKey("user-" + string(rune('a'+i)))
		res := decide(t, h, 0, "", limit.Limit{Rule: user, Key: k}, limit.Limit{Rule: api, Key: apiKey})
		if res.Allowed != (i < 5) {
			t.Fatalf("user %d: allowed=%v", i, res.Allowed)
		}
		if i >= 5 {
			if !res.Decisions[0].Allowed || res.Decisions[1].Allowed {
				t.Fatalf("user %d: decisions %+v", i, res.Decisions)
			}
			if s := peek(t, h, user, k); s.Remaining != 1 {
				t.Fatalf("user %d remaining %d after a request the api limit rejected, want 1", i, s.Remaining)
			}
		}
	}
}

func testRejectionStartsNoWindow(t *testing.T, h *Harness) {
	first := rule(t, &limit.Rule{Name: "t:first-user", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: rate(1, 10*time.Second)})
	api := rule(t, &limit.Rule{Name: "t:api", Algorithm: limit.FixedWindow, Rate: rate(1, time.Hour)})
	h.Set(t0)
	decide(t, h, 0, "", limit.Limit{Rule: api, Key: limit.StringKey("r")})
	k := limit.StringKey("u1")
	if decide(t, h, 0, "", limit.Limit{Rule: first, Key: k}, limit.Limit{Rule: api, Key: limit.StringKey("r")}).Allowed {
		t.Fatal("admitted over the api limit")
	}
	if s := peek(t, h, first, k); s.Remaining != 1 || s.ResetAfter != 0 {
		t.Fatalf("a rejected request opened a window: %+v", s)
	}
}

func testShadow(t *testing.T, h *Harness) {
	shadow := rule(t, &limit.Rule{Name: "t:shadow", Algorithm: limit.FixedWindow, Rate: rate(1, 10*time.Second), Shadow: true})
	real := rule(t, &limit.Rule{Name: "t:real", Algorithm: limit.FixedWindow, Rate: rate(5, 10*time.Second)})
	k := limit.StringKey("u1")
	h.Set(t0)
	for i := range 3 {
		res := decide(t, h, 0, "", limit.Limit{Rule: shadow, Key: k}, limit.Limit{Rule: real, Key: k})
		if !res.Allowed {
			t.Fatalf("request %d rejected by a shadow limit", i)
		}
		if res.Decisions[0].Allowed != (i == 0) || !res.Decisions[1].Allowed {
			t.Fatalf("request %d: shadow allowed=%v real allowed=%v", i, res.Decisions[0].Allowed, res.Decisions[1].Allowed)
		}
	}
	if s := peek(t, h, shadow, k); s.Remaining != 0 {
		t.Fatalf("shadow remaining %d, want 0", s.Remaining)
	}
	if s := peek(t, h, real, k); s.Remaining != 2 {
		t.Fatalf("real remaining %d, want 2", s.Remaining)
	}
}

func testHits(t *testing.T, h *Harness) {
	r := rule(t, &limit.Rule{Name: "t:hits", Algorithm: limit.FixedWindow, Rate: rate(10, 10*time.Second)})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u1")}
	h.Set(t0)
	for i, want := range []int64{7, 4, 1} {
		res := decide(t, h, 3, "", l)
		if !res.Allowed || res.Decisions[0].Remaining != want {
			t.Fatalf("request %d: %+v, want admitted with %d remaining", i, res.Decisions[0], want)
		}
	}
	if res := decide(t, h, 3, "", l); res.Allowed || res.Decisions[0].Remaining != 1 {
		t.Fatalf("4th request of 3 hits: %+v, want rejected with 1 remaining", res.Decisions[0])
	}
	// Hits so many that hits × cost would not fit in an int64 (the
	// Envoy rate-limit service takes them from its client): rejected,
	// taking nothing, as any request above the limit.
	huge := rule(t, &limit.Rule{Name: "t:hits", Algorithm: limit.FixedWindow, Rate: rate(10, 10*time.Second), Cost: 3})
	for _, hits := range []int64{math.MaxInt64, math.MaxInt64/3 + 1, core.MaxCost} {
		if res := decide(t, h, hits, "", limit.Limit{Rule: huge, Key: l.Key}); res.Allowed || res.Decisions[0].Remaining != 1 {
			t.Fatalf("%d hits of cost 3: %+v, want rejected with 1 remaining", hits, res.Decisions[0])
		}
	}
	if res := decide(t, h, 1, "", l); !res.Allowed || res.Decisions[0].Remaining != 0 {
		t.Fatalf("1 hit: %+v, want the last slot", res.Decisions[0])
	}
}

func peek(t *testing.T, h *Harness, r *limit.Rule, k limit.Key) limit.State {
	t.Helper()
	h.hold()
	s, err := h.Store.Peek(context.Background(), h.Now(), r, k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testPeekReset(t *testing.T, h *Harness) {
	h.Set(t0)
	fixed := rule(t, &limit.Rule{Name: "t:peek-fixed", Algorithm: limit.FixedWindow, Rate: rate(5, 10*time.Second)})
	k := limit.StringKey("u1")
	for range 2 {
		decide(t, h, 0, "", limit.Limit{Rule: fixed, Key: k})
	}
	for range 3 { // peeking consumes nothing
		s := peek(t, h, fixed, k)
		if s.Algorithm != limit.FixedWindow || s.Limit != 5 || s.Window != 10*time.Second || s.Remaining != 3 {
			t.Fatalf("peek = %+v", s)
		}
		near(t, h, "ResetAfter", s.ResetAfter, 10*time.Second-time.Millisecond)
	}
	if err := h.Store.Reset(context.Background(), fixed, k); err != nil {
		t.Fatal(err)
	}
	if s := peek(t, h, fixed, k); s.Remaining != 5 {
		t.Fatalf("after reset: %+v", s)
	}

	// A token a second: the peek comes well before the next one, however
	// slow the machine.
	bucket := rule(t, &limit.Rule{Name: "t:peek-bucket", Algorithm: limit.TokenBucket, Rate: rate(1, time.Second), Burst: 3})
	decide(t, h, 0, "", limit.Limit{Rule: bucket, Key: k})
	s := peek(t, h, bucket, k)
	if s.Limit != 3 || s.Window != 3*time.Second || s.Remaining != 2 {
		t.Fatalf("bucket peek = %+v, want limit 3, window 3s, remaining 2", s)
	}
	near(t, h, "bucket ResetAfter", s.ResetAfter, time.Second)

	sliding := rule(t, &limit.Rule{Name: "t:peek-sliding", Algorithm: limit.SlidingWindow, Rate: rate(4, time.Minute)})
	decide(t, h, 0, "", limit.Limit{Rule: sliding, Key: k})
	h.Set(t0.Add(20 * time.Second))
	decide(t, h, 0, "", limit.Limit{Rule: sliding, Key: k})
	s = peek(t, h, sliding, k)
	if s.Remaining != 2 {
		t.Fatalf("sliding peek = %+v", s)
	}
	near(t, h, "sliding ResetAfter", s.ResetAfter, 40*time.Second)
	if err := h.Store.Reset(context.Background(), sliding, k); err != nil {
		t.Fatal(err)
	}
	if s := peek(t, h, sliding, k); s.Remaining != 4 {
		t.Fatalf("sliding after reset: %+v", s)
	}
}

func testRuleChange(t *testing.T, h *Harness) {
	h.Set(t0)
	k := limit.StringKey("u1")
	v1 := rule(t, &limit.Rule{Name: "t:chg", Algorithm: limit.FixedWindow, Rate: rate(5, 10*time.Second)})
	for range 5 {
		decide(t, h, 0, "", limit.Limit{Rule: v1, Key: k})
	}
	// A new count keeps the counter: 5 of 8 are used.
	v2 := rule(t, &limit.Rule{Name: "t:chg", Algorithm: limit.FixedWindow, Rate: rate(8, 10*time.Second)})
	expect(t, h, limit.Limit{Rule: v2, Key: k}, true, 2)
	// A new window length starts afresh.
	v3 := rule(t, &limit.Rule{Name: "t:chg", Algorithm: limit.FixedWindow, Rate: rate(8, 20*time.Second)})
	expect(t, h, limit.Limit{Rule: v3, Key: k}, true, 7)

	b1 := rule(t, &limit.Rule{Name: "t:chg-b", Algorithm: limit.TokenBucket, Rate: rate(1, time.Second), Burst: 5})
	for range 5 {
		decide(t, h, 0, "", limit.Limit{Rule: b1, Key: k})
	}
	b2 := rule(t, &limit.Rule{Name: "t:chg-b", Algorithm: limit.TokenBucket, Rate: rate(2, time.Second), Burst: 10})
	expect(t, h, limit.Limit{Rule: b2, Key: k}, false, 0)
}

func testKeys(t *testing.T, h *Harness) {
	h.Set(t0)
	r := rule(t, &limit.Rule{Name: "t:keys", Algorithm: limit.FixedWindow, Rate: rate(1, time.Minute)})
	huge := strings.Repeat("a", 1<<20)
	hostile := strings.Repeat("}{\n\r\x00:=%!#", 1000)
	distinct := []limit.Key{
		limit.NewKey(limit.Part{Kind: "ip", Value: "10.0.0.1"}),
		limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: "10.0.0.1"}),
		limit.NewKey(limit.Part{Kind: "ip", Value: "10.0.0.1", Fallback: true}),
		limit.NewKey(limit.Part{Kind: "a", Value: "x:b=y"}),
		limit.NewKey(limit.Part{Kind: "a", Value: "x"}, limit.Part{Kind: "b", Value: "y"}),
		limit.NewKey(limit.Part{Kind: "a", Value: huge}),
		limit.NewKey(limit.Part{Kind: "a", Value: huge + "b"}),
		limit.NewKey(limit.Part{Kind: "a", Value: hostile}),
		limit.NewKey(limit.Part{Kind: "a", Value: hostile[:len(hostile)-1]}),
		limit.NewKey(),
	}
	for i, k := range distinct {
		if len(k) > 1024 {
			t.Fatalf("key %d is %d bytes: keys must stay bounded", i, len(k))
		}
		if strings.ContainsAny(string(k), "{}\n\r\x00") {
			t.Fatalf("key %d holds a brace or a control byte: %q", i, k)
		}
		if !decide(t, h, 0, "", limit.Limit{Rule: r, Key: k}).Allowed {
			t.Fatalf("key %d shares a counter with an earlier one: %q", i, k)
		}
	}
	for i, k := range distinct {
		if decide(t, h, 0, "", limit.Limit{Rule: r, Key: k}).Allowed {
			t.Fatalf("key %d was admitted twice", i)
		}
	}
}
