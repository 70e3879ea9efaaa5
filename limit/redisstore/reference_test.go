package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// reference decides like the memory store, with core.Check and Commit on
// in-memory entries, at an exact time.
type reference map[string]*core.Entry

// decide is the reference's answer to req at now, whose limits on one
// counter are merged as every store merges them.
func (ref reference) decide(t testing.TB, req *limit.Request, now int64) limit.Result {
	t.Helper()
	res, err := core.DecideMerged(req, func(req *limit.Request) (limit.Result, error) {
		return ref.decideMerged(req, now), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (ref reference) decideMerged(req *limit.Request, now int64) limit.Result {
	res := limit.Result{Allowed: true, Decisions: make([]limit.Decision, len(req.Limits)), Time: time.UnixMicro(now)}
	ents := make([]*core.Entry, len(req.Limits))
	idles := make([]core.Idle, len(req.Limits))
	for i, l := range req.Limits {
		k := core.StoredKey("", l.Rule, l.Key)
		if ref[k] == nil {
			ref[k] = new(core.Entry)
		}
		ents[i] = ref[k]
		d, idle := core.Check(l.Rule, ents[i], now, req.Hits, core.ZoneAt(l.Rule, res.Time))
		idles[i] = idle
		d.Key = l.Key
		res.Decisions[i] = d
		if !d.Allowed && !l.Rule.Shadow {
			res.Allowed = false
		}
	}
	if !res.Allowed {
		for i := range res.Decisions {
			res.Decisions[i] = idles[i].Unconsumed(res.Decisions[i])
		}
		return res
	}
	for i, l := range req.Limits {
		if d := res.Decisions[i]; d.Allowed {
			core.Commit(l.Rule, ents[i], now, req.Hits, core.ZoneAt(l.Rule, res.Time), req.Lease)
			res.Delay = max(res.Delay, d.Delay)
		}
	}
	return res
}

// TestSameAnswersAsReference drives random requests through the store and
// replays each one on limit/internal/core/algorithm.go at the exact time the script
// decided it (Result.Time): every field of every decision must match to the
// microsecond. The clock only moves forward here, by jumps of the offset
// that cross window, refill and lease boundaries; see TestClockStepsBack.
func TestSameAnswersAsReference(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv, remoteOnly) // the script's own answers
	shanghai := shanghai(t)
	rules := []*limit.Rule{
		{Name: "fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Second}},
		{Name: "fixed-zone", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 7, Period: time.Hour}, Location: shanghai},
		{Name: "fixed-first", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 3, Period: 700 * time.Millisecond}},
		{Name: "fixed-cost", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 8, Period: 2 * time.Second}, Cost: 3},
		{Name: "shadow", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Second}, Shadow: true},
		{Name: "sliding", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 4, Period: time.Second}},
		{Name: "sliding-cost", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 6, Period: 1500 * time.Millisecond}, Cost: 2},
		{Name: "bucket", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 5},
		{Name: "bucket-odd", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 3, Period: 7 * time.Second}, Burst: 4},
		{Name: "bucket-queue", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 5, Period: time.Second}, Burst: 2, Queue: 300 * time.Millisecond},
		{Name: "bucket-cost", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 7, Period: time.Second}, Burst: 7, Cost: 3},
		{Name: "conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 2}, LeaseTTL: 800 * time.Millisecond},
	}
	for _, r := range rules {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	keys := []limit.Key{limit.StringKey("a"), limit.StringKey("b")}
	leases := []string{"l1", "l2", "l3", "l4"}

	ctx := context.Background()
	for seed := range uint64(3) {
		srv.Do(t, "FLUSHALL")
		rng := rand.New(rand.NewPCG(seed, 2))
		ref := reference{}
		at(t, s, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		decided, admitted := 0, 0
		for step := range 600 {
			s.SetOffset(s.Offset() + time.Duration(rng.IntN(250_000))*time.Microsecond)
			lease := leases[rng.IntN(len(leases))]
			if rng.IntN(8) == 0 {
				var ls []limit.Limit
				for _, k := range keys {
					ls = append(ls, limit.Limit{Rule: rules[len(rules)-1], Key: k})
				}
				if err := s.Release(ctx, lease, ls...); err != nil {
					t.Fatal(err)
				}
				for _, l := range ls {
					if e := ref[core.StoredKey("", l.Rule, l.Key)]; e != nil {
						e.Release(lease)
					}
				}
				continue
			}
			req := &limit.Request{Hits: int64(rng.IntN(4)), Lease: lease}
			for range 1 + rng.IntN(3) {
				// Two limits of one request may be the same key.
				req.Limits = append(req.Limits, limit.Limit{Rule: rules[rng.IntN(len(rules))], Key: keys[rng.IntN(len(keys))]})
			}
			decided++
			if ref.check(t, s, req, fmt.Sprintf("seed %d step %d", seed, step)).Allowed {
				admitted++
			}
		}
		// The sequence must have exercised both answers.
		if admitted < decided/5 || admitted > decided*4/5 {
			t.Fatalf("seed %d: %d of %d admitted: the sequence does not test both answers", seed, admitted, decided)
		}
	}
}

// check decides req on s and fails t unless the reference gives the same
// answer at the time the store decided.
func (ref reference) check(t *testing.T, s *Store, req *limit.Request, where string) limit.Result {
	t.Helper()
	now, err := s.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	req.Now = now
	got, err := s.Decide(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	ref.same(t, req, got, where)
	return got
}

// same fails t unless got is the reference's answer to req at the time the
// store decided it, and records req in the reference.
func (ref reference) same(t *testing.T, req *limit.Request, got limit.Result, where string) {
	t.Helper()
	want := ref.decide(t, req, got.Time.UnixMicro())
	if got.Allowed != want.Allowed || got.Delay != want.Delay {
		t.Fatalf("%s: allowed %v delay %v, reference %v %v", where, got.Allowed, got.Delay, want.Allowed, want.Delay)
	}
	for i := range got.Decisions {
		if g, w := got.Decisions[i], exported(want.Decisions[i]); g != w {
			t.Fatalf("%s, limit %d (%s, hits %d):\n got %+v\nwant %+v", where, i, req.Limits[i].Rule.Name, req.Hits, g, w)
		}
	}
}

// exported is d without the fields only package limit reads.
func exported(d limit.Decision) limit.Decision {
	return limit.Decision{
		Rule: d.Rule, Key: d.Key, Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining,
		ResetAfter: d.ResetAfter, RetryAfter: d.RetryAfter, Delay: d.Delay,
	}
}

// TestClockStepsBack moves the store's clock back, as a Redis whose host
// clock is stepped would: a sliding log must stay sorted and a bucket must
// not refill the same time twice. The reference (limit/internal/core/algorithm.go) gives
// the answers.
func TestClockStepsBack(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv, remoteOnly) // the script's own answers
	sliding := valid(t, &limit.Rule{Name: "sliding", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 3, Period: 10 * time.Second}})
	bucket := valid(t, &limit.Rule{Name: "bucket", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Second}, Burst: 2})
	fixed := valid(t, &limit.Rule{Name: "fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: 10 * time.Second}})
	k := limit.StringKey("a")
	ref := reference{}
	t0 := time.Date(2030, 1, 1, 0, 0, 5, 0, time.UTC)
	for i, st := range []struct {
		at    time.Duration
		rules []*limit.Rule
		want  []bool
	}{
		{0, []*limit.Rule{sliding, bucket, bucket, fixed}, []bool{true, true, true, true}},
		{-2 * time.Second, []*limit.Rule{sliding, bucket, fixed}, []bool{true, false, true}},
		{400 * time.Millisecond, []*limit.Rule{bucket, sliding}, []bool{false, true}},
		{1600 * time.Millisecond, []*limit.Rule{bucket, bucket, sliding}, []bool{true, false, false}},
		{-3 * time.Second, []*limit.Rule{fixed, fixed, sliding}, []bool{true, false, false}},
		{10*time.Second + 200*time.Millisecond, []*limit.Rule{sliding, sliding, sliding, fixed}, []bool{true, true, false, true}},
	} {
		at(t, s, t0.Add(st.at))
		for j, r := range st.rules {
			got := ref.check(t, s, &limit.Request{Limits: []limit.Limit{{Rule: r, Key: k}}}, fmt.Sprintf("step %d.%d", i, j))
			if got.Allowed != st.want[j] {
				t.Fatalf("step %d.%d (%s at t0%+v): allowed %v", i, j, r.Name, st.at, got.Allowed)
			}
		}
		if i == 1 {
			// The admission at t0-2s was logged at t0, the newest time.
			v, err := srv.DoValue(t, "ZRANGE", core.StoredKey(DefaultPrefix, sliding, k), "0", "-1", "WITHSCORES")
			if err != nil {
				t.Fatal(err)
			}
			scores := v.([]any)
			if len(scores) != 4 || scores[1] != scores[3] {
				t.Fatalf("sliding log after a step back: %v, want two entries at the same time", scores)
			}
		}
	}
}

// TestSlidingCostCopies admits requests whose cost is logged as more
// members than one ZADD call takes.
func TestSlidingCostCopies(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv, remoteOnly) // the script's own answers
	r := valid(t, &limit.Rule{Name: "sliding-big", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 2500, Period: time.Minute}, Cost: 1200})
	k := limit.StringKey("a")
	ref := reference{}
	at(t, s, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	for i, want := range []bool{true, true, false} {
		if got := ref.check(t, s, &limit.Request{Limits: []limit.Limit{{Rule: r, Key: k}}}, fmt.Sprint("request ", i)); got.Allowed != want {
			t.Fatalf("request %d: allowed %v", i, got.Allowed)
		}
	}
	if n := srv.Do(t, "ZCARD", core.StoredKey(DefaultPrefix, r, k)); n != "2400" {
		t.Fatalf("log holds %s entries, want 2400", n)
	}
}

func valid(t testing.TB, r *limit.Rule) *limit.Rule {
	t.Helper()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}
