package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// TestBatchSameAnswersAsReference sends random batches of fixed-window
// requests as calls of mode b, many of them on the same keys, and replays
// every request on limit/internal/core/algorithm.go, in batch order, at the time the
// script decided the batch: each must get exactly the answer it would have
// got alone.
func TestBatchSameAnswersAsReference(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	shanghai := shanghai(t)
	rules := []*limit.Rule{
		valid(t, &limit.Rule{Name: "fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 9, Period: time.Second}}),
		valid(t, &limit.Rule{Name: "fixed-zone", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 12, Period: time.Hour}, Location: shanghai}),
		// A day in Shanghai ends at 16:00 UTC, not at midnight: only the
		// zone offset tells them apart.
		valid(t, &limit.Rule{Name: "fixed-zone-day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 20, Period: 24 * time.Hour}, Location: shanghai}),
		// West of UTC the zone offset is negative.
		valid(t, &limit.Rule{Name: "fixed-zone-west", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 15, Period: 24 * time.Hour}, Location: time.FixedZone("UTC-5", -5*3600)}),
		// Seeds 1 and 2 cross New York's changes of offset, where its
		// days are 25 and 23 hours long.
		valid(t, &limit.Rule{Name: "fixed-zone-dst", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 20, Period: 24 * time.Hour}, Location: newYork(t)}),
		valid(t, &limit.Rule{Name: "fixed-first", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 5, Period: 700 * time.Millisecond}}),
		valid(t, &limit.Rule{Name: "fixed-cost", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: 2 * time.Second}, Cost: 3}),
		valid(t, &limit.Rule{Name: "shadow", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Second}, Shadow: true}),
	}
	keys := []limit.Key{limit.StringKey("a"), limit.StringKey("b"), limit.StringKey("c")}
	c := client(t, s)
	// Seed 0 moves on by up to 0.3 s a step; seeds 1 and 2 by up to 20
	// minutes, from New York's midnight before a change of offset to
	// past the next.
	starts := []struct {
		at   time.Time
		step time.Duration
	}{
		{time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), 300 * time.Millisecond},
		{time.Date(2030, 11, 3, 4, 0, 0, 0, time.UTC), 20 * time.Minute},
		{time.Date(2030, 3, 10, 5, 0, 0, 0, time.UTC), 20 * time.Minute},
	}
	for seed, start := range starts {
		srv.Do(t, "FLUSHALL")
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		ref := reference{}
		at(t, s, start.at)
		decided, admitted := 0, 0
		for step := range 150 {
			s.SetOffset(s.Offset() + time.Duration(rng.Int64N(int64(start.step))))
			now, err := s.Now(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			reqs := make([]*limit.Request, 1+rng.IntN(12))
			for i := range reqs {
				reqs[i] = &limit.Request{Now: now, Hits: int64(rng.IntN(3))}
				for _, j := range rng.Perm(len(rules) * len(keys))[:1+rng.IntN(4)] {
					reqs[i].Limits = append(reqs[i].Limits, limit.Limit{Rule: rules[j%len(rules)], Key: keys[j/len(rules)]})
				}
			}
			ws := batch(t, s, c, reqs)
			for i, w := range ws {
				decided++
				if w.res.Allowed {
					admitted++
				}
				ref.same(t, w.req, w.res, fmt.Sprintf("seed %d step %d request %d of %d", seed, step, i, len(ws)))
			}
		}
		if admitted < decided/5 || admitted > decided*4/5 {
			t.Fatalf("seed %d: %d of %d admitted: the sequence does not test both answers", seed, admitted, decided)
		}
	}
	if s.batch.flying != 0 {
		t.Fatalf("%d calls left in flight", s.batch.flying)
	}
}

// TestBatchPastOneByte: a batch's requests are 16-bit numbers and its
// argument sets 56-bit ones. One request of 256 limits (every key and
// argument index, and its count of limits, past 255), one after it that
// shares a key and a rule with it and adds its own, and two on the largest
// count, one of them with hits whose cost saturates at core.MaxCost, get
// the answers they would get alone.
func TestBatchPastOneByte(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	c := client(t, s)
	at(t, s, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	now, err := s.Now(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Each rule its own count, so that each is its own argument set.
	rules := make([]*limit.Rule, maxBatchLimits+1)
	for i := range rules {
		rules[i] = valid(t, &limit.Rule{Name: fmt.Sprint("r", i), Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: int64(2 + i), Period: time.Hour}})
	}
	big := &limit.Request{Now: now}
	for i := range maxBatchLimits {
		big.Limits = append(big.Limits, limit.Limit{Rule: rules[i], Key: limit.StringKey(fmt.Sprint("k", i))})
	}
	small := &limit.Request{Now: now, Limits: []limit.Limit{
		{Rule: rules[maxBatchLimits-1], Key: limit.StringKey(fmt.Sprint("k", maxBatchLimits-1))},
		{Rule: rules[0], Key: limit.StringKey("new")},
		{Rule: rules[maxBatchLimits], Key: limit.StringKey("last")},
	}}
	most := valid(t, &limit.Rule{Name: "most", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: limit.MaxCount, Period: 7 * 24 * time.Hour}})
	some := &limit.Request{Now: now, Hits: 3, Limits: []limit.Limit{{Rule: most, Key: limit.StringKey("m")}}}
	huge := &limit.Request{Now: now, Hits: 1 << 62, Limits: []limit.Limit{{Rule: most, Key: limit.StringKey("m")}}}
	ref := reference{}
	for i, w := range batch(t, s, c, []*limit.Request{big, small, some, huge}) {
		if w.res.Allowed != (w.req != huge) {
			t.Fatalf("request %d: allowed %v: %+v", i, w.res.Allowed, w.res)
		}
		ref.same(t, w.req, w.res, fmt.Sprint("request ", i))
	}
}

// batch decides reqs, each of them fixed windows on distinct keys, as one
// call of mode b on c, and returns their waiters, answered.
func batch(t testing.TB, s *Store, c rueidis.Client, reqs []*limit.Request) []*waiter {
	t.Helper()
	var alone, ws []*waiter
	for _, req := range reqs {
		sc := calls.Get().(*scriptCall)
		s.decideCall(sc, req)
		w := &waiter{req: req, sc: sc, by: time.Now().Add(s.timeout), done: make(chan struct{}, 1)}
		if sc.args[0] == "d" {
			ws = append(ws, w)
			continue
		}
		// What the store never batches (a zone's window next to a change
		// of offset) is decided alone, as the store does, before the
		// batch.
		if !slices.ContainsFunc(req.Limits, func(l limit.Limit) bool { return argsOf(l.Rule).zone }) {
			t.Fatalf("a request of distinct fixed windows has mode %q", sc.args[0])
		}
		var err error
		if w.res, err = s.decideOne(context.Background(), c, req, sc); err != nil {
			t.Fatal(err)
		}
		alone = append(alone, w)
	}
	if len(ws) == 0 {
		return alone
	}
	s.batch.mu.Lock()
	s.batch.flying++ // decideBatch hands its place in flight on
	s.batch.mu.Unlock()
	s.decideBatch(c, ws)
	for i, w := range ws {
		<-w.done
		if w.err != nil {
			t.Fatal(w.err)
		}
		if i > 0 && !w.res.Time.Equal(ws[0].res.Time) {
			t.Fatalf("one batch, two times: %v and %v", ws[0].res.Time, w.res.Time)
		}
	}
	return append(alone, ws...)
}

// TestBatchExpiries: the windows one batch opens get the expiry a single
// decision would give them, per rule (they share it when they share the
// rule), and a window already open keeps its own.
func TestBatchExpiries(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	c := client(t, s)
	shanghai := shanghai(t)
	aligned := valid(t, &limit.Rule{Name: "aligned", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 9, Period: 10 * time.Second}})
	first := valid(t, &limit.Rule{Name: "first", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 9, Period: 7 * time.Second}})
	zoned := valid(t, &limit.Rule{Name: "zoned", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 9, Period: time.Hour}, Location: shanghai})
	k := limit.StringKey
	// The aligned window of 10 s began at t0-1ms; "old" opens it at
	// t0+1s, and the batch comes 3 s later, within it.
	at(t, s, t0.Add(time.Second))
	if res, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: aligned, Key: k("old")}}}); err != nil || !res.Allowed {
		t.Fatalf("%+v, %v", res, err)
	}
	// PEXPIRETIME: a key's expiry as a Unix time in ms, by Redis's clock.
	expiry := func(r *limit.Rule, key string) int64 {
		ms, err := strconv.ParseInt(srv.Do(t, "PEXPIRETIME", core.StoredKey(DefaultPrefix, r, k(key))), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return ms
	}
	oldExpiry := expiry(aligned, "old")
	at(t, s, t0.Add(4*time.Second))
	ws := batch(t, s, c, []*limit.Request{
		{Now: time.Now(), Limits: []limit.Limit{{Rule: aligned, Key: k("old")}, {Rule: first, Key: k("a")}}},
		{Now: time.Now(), Limits: []limit.Limit{{Rule: aligned, Key: k("n1")}, {Rule: first, Key: k("b")}, {Rule: zoned, Key: k("x")}}},
		{Now: time.Now(), Limits: []limit.Limit{{Rule: zoned, Key: k("y")}, {Rule: aligned, Key: k("n2")}}},
	})
	now := ws[0].res.Time
	// pxat and life in decide.lua: a window lives until the first whole
	// millisecond of Redis's clock (the store's less its offset) at or
	// after its end, a first-aligned one; a clock-aligned one that much
	// plus now mod min(window, 60 s).
	clock := now.UnixMicro() - s.Offset().Microseconds()
	pxat := func(us int64) int64 { return (clock + us + 999) / 1000 }
	aligns := func(w time.Duration, end time.Time) int64 {
		return pxat(end.Sub(now).Microseconds() + now.UnixMicro()%min(w, time.Minute).Microseconds())
	}
	_, zoneOff := now.In(shanghai).Zone()
	hourEnd := now.Add(time.Duration(zoneOff) * time.Second).Truncate(time.Hour).Add(time.Hour).Add(-time.Duration(zoneOff) * time.Second)
	for _, tc := range []struct {
		rule *limit.Rule
		key  string
		want int64
	}{
		{aligned, "old", oldExpiry},
		{aligned, "n1", aligns(10*time.Second, t0.Add(10*time.Second-time.Millisecond))},
		{aligned, "n2", aligns(10*time.Second, t0.Add(10*time.Second-time.Millisecond))},
		{first, "a", pxat((7 * time.Second).Microseconds())},
		{first, "b", pxat((7 * time.Second).Microseconds())},
		{zoned, "x", aligns(time.Hour, hourEnd)},
		{zoned, "y", aligns(time.Hour, hourEnd)},
	} {
		if got := expiry(tc.rule, tc.key); got != tc.want {
			t.Errorf("%s %s: expires at %d ms, want %d (%+d ms)", tc.rule.Name, tc.key, got, tc.want, got-tc.want)
		}
	}
}

// TestBatchesStayExact hammers a global limit and per-user limits from 64
// goroutines, enough for decisions to queue and go out in batches: the
// global limit admits exactly its count in its window, and every user
// exactly theirs.
func TestBatchesStayExact(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { srv.CheckExpiry(t) })
	s := open(t, srv)
	at(t, s, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	global := valid(t, &limit.Rule{Name: "global", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3000, Period: time.Hour}})
	user := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 40, Period: time.Hour}})
	const goroutines, each, users = 64, 100, 100
	var admitted atomic.Int64
	perUser := make([]atomic.Int64, users)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				u := (g*each + i) % users
				res, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{
					{Rule: global, Key: limit.StringKey("all")},
					{Rule: user, Key: limit.StringKey(fmt.Sprint("u", u))},
				}})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted.Add(1)
					perUser[u].Add(1)
				}
			}
		})
	}
	wg.Wait()
	// 6,400 requests, 64 per user: every user fills its 40 (4,000 in
	// all), so the global limit, 3,000, is the one that runs out.
	if got := admitted.Load(); got != 3000 {
		t.Errorf("admitted %d, want exactly the global limit 3000", got)
	}
	for u := range perUser {
		if n := perUser[u].Load(); n > 40 {
			t.Errorf("user %d admitted %d times, limit 40", u, n)
		}
	}
	if s.batch.batched.Load() == 0 {
		t.Fatal("no decision went out in a batch: the test did not test batches")
	}
	t.Logf("%d of %d decisions in batches", s.batch.batched.Load(), goroutines*each)
}

// TestBatchesWhenRedisFails keeps 64 goroutines deciding while Redis is
// paused, then stopped, then started again: every decision, queued or
// sent, ends within the store's timeout, failures wrap
// limit.ErrStoreUnavailable, decisions succeed again once Redis is back,
// and no call stays counted in flight.
func TestBatchesWhenRedisFails(t *testing.T) {
	srv := testredis.Start(t)
	const timeout = 100 * time.Millisecond
	s := open(t, srv, func(o *Options) { o.Timeout = timeout })
	r := valid(t, &limit.Rule{Name: "f:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1_000_000_000, Period: time.Hour}})
	g := valid(t, &limit.Rule{Name: "f:global", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1_000_000_000, Period: time.Hour}})

	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			k := limit.StringKey(fmt.Sprint("u", i))
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{
					{Rule: g, Key: limit.StringKey("all")}, {Rule: r, Key: k},
				}})
				if took := time.Since(start); took > timeout+slack {
					t.Errorf("a decision took %v, timeout %v (error %v)", took, timeout, err)
				}
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, limit.ErrStoreUnavailable):
					failed.Add(1)
					// As a client would, before it asks again: 64
					// goroutines that spin on failures answered at once
					// (the guard's) would measure how late the scheduler
					// runs a goroutine, not the store.
					time.Sleep(time.Millisecond)
				default:
					t.Errorf("a decision failed with %v, want an error wrapping limit.ErrStoreUnavailable", err)
				}
			}
		})
	}
	// phase waits until the counters move: decisions go on during it.
	phase := func(name string, moved func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !moved() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no progress (%d decided, %d failed)", name, ok.Load(), failed.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	okAt := func() func() bool { n := ok.Load() + 100; return func() bool { return ok.Load() >= n } }
	failedAt := func() func() bool { n := failed.Load() + 64; return func() bool { return failed.Load() >= n } }

	phase("up", okAt())
	srv.Do(t, "CLIENT", "PAUSE", "400", "ALL")
	phase("paused", failedAt())
	phase("after the pause", okAt())
	srv.Stop()
	phase("stopped", failedAt())
	srv.Restart()
	phase("restarted", okAt())
	close(stop)
	wg.Wait()

	if s.batch.batched.Load() == 0 {
		t.Fatal("no decision went out in a batch: the test did not test batches")
	}
	if s.whole.refused.Load() == 0 {
		t.Fatal("no decision was refused while Redis failed: the guard never tripped")
	}
	time.Sleep(timeout + slack) // calls that timed out are still answered
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if s.batch.flying != 0 || len(s.batch.queue) != 0 {
		t.Fatalf("after the load: %d calls in flight, %d decisions queued", s.batch.flying, len(s.batch.queue))
	}
}

// TestQueuedPastTimeout: a decision whose time ran out while it waited in
// the queue is answered unavailable when the next call returns, and is not
// sent: its limit counts nothing. The one behind it, still in time, is
// decided.
func TestQueuedPastTimeout(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	c := client(t, s)
	r := valid(t, &limit.Rule{Name: "fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: time.Hour}})
	queue := func(key string, by time.Time) *waiter {
		req := &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: r, Key: limit.StringKey(key)}}}
		sc := calls.Get().(*scriptCall)
		s.decideCall(sc, req)
		return &waiter{req: req, sc: sc, by: by, done: make(chan struct{}, 1)}
	}
	late, inTime := queue("late", time.Now().Add(-time.Millisecond)), queue("in-time", time.Now().Add(time.Minute))
	s.batch.mu.Lock()
	s.batch.flying++ // the call whose return sends the queue
	s.batch.queue = append(s.batch.queue, late, inTime)
	s.batch.mu.Unlock()
	s.next(c)
	for _, w := range []*waiter{late, inTime} {
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
			t.Fatal("a queued decision was not answered")
		}
	}
	if !errors.Is(late.err, limit.ErrStoreUnavailable) || !errors.Is(late.err, context.DeadlineExceeded) {
		t.Fatalf("the late decision: %v, want unavailable and the deadline", late.err)
	}
	if inTime.err != nil || !inTime.res.Allowed || inTime.res.Decisions[0].Remaining != 9 {
		t.Fatalf("the decision in time: %+v, %v; want admitted with 9 left", inTime.res, inTime.err)
	}
	if n := srv.Do(t, "EXISTS", core.StoredKey(s.prefix, r, limit.StringKey("late"))); n != "0" {
		t.Fatalf("the late decision's key exists (%v): it was sent", n)
	}
	eventually(t, func() error {
		s.batch.mu.Lock()
		defer s.batch.mu.Unlock()
		if s.batch.flying != 0 || len(s.batch.queue) != 0 {
			return fmt.Errorf("%d calls in flight, %d decisions queued", s.batch.flying, len(s.batch.queue))
		}
		return nil
	})
}
