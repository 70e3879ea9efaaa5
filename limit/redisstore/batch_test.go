package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

// TestBatchSameAnswersAsReference sends random batches of fixed-window
// requests as calls of mode b, many of them on the same keys, and replays
// every request on limit/algorithm.go, in batch order, at the time the
// script decided the batch: each must get exactly the answer it would have
// got alone.
func TestBatchSameAnswersAsReference(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { checkExpiry(t, srv) })
	s := open(t, srv)
	shanghai := shanghai(t)
	rules := []*limit.Rule{
		valid(t, &limit.Rule{Name: "fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 9, Period: time.Second}}),
		valid(t, &limit.Rule{Name: "fixed-zone", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 12, Period: time.Hour}, Location: shanghai}),
		// A day in Shanghai ends at 16:00 UTC, not at midnight: only the
		// zone offset tells them apart.
		valid(t, &limit.Rule{Name: "fixed-zone-day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 20, Period: 24 * time.Hour}, Location: shanghai}),
		valid(t, &limit.Rule{Name: "fixed-first", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 5, Period: 700 * time.Millisecond}}),
		valid(t, &limit.Rule{Name: "fixed-cost", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: 2 * time.Second}, Cost: 3}),
		valid(t, &limit.Rule{Name: "shadow", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Second}, Shadow: true}),
	}
	keys := []limit.Key{limit.StringKey("a"), limit.StringKey("b"), limit.StringKey("c")}
	c, err := s.get("decide")
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(3) {
		srv.Do(t, "FLUSHALL")
		rng := rand.New(rand.NewPCG(seed, 7))
		ref := reference{}
		at(t, s, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		decided, admitted := 0, 0
		for step := range 150 {
			s.SetOffset(s.Offset() + time.Duration(rng.IntN(300_000))*time.Microsecond)
			now, err := s.Now(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ws := make([]*waiter, 1+rng.IntN(12))
			for i := range ws {
				req := &limit.Request{Now: now, Hits: int64(rng.IntN(3))}
				for _, j := range rng.Perm(len(rules) * len(keys))[:1+rng.IntN(4)] {
					req.Limits = append(req.Limits, limit.Limit{Rule: rules[j%len(rules)], Key: keys[j/len(rules)]})
				}
				sc := calls.Get().(*scriptCall)
				s.decideCall(sc, req)
				if sc.args[0] != "d" {
					t.Fatalf("a request of distinct fixed windows has mode %q", sc.args[0])
				}
				ws[i] = &waiter{req: req, sc: sc, by: time.Now().Add(s.timeout), done: make(chan struct{}, 1)}
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

// TestBatchesStayExact hammers a global limit and per-user limits from 64
// goroutines, enough for decisions to queue and go out in batches: the
// global limit admits exactly its count in its window, and every user
// exactly theirs.
func TestBatchesStayExact(t *testing.T) {
	srv := testredis.Start(t)
	t.Cleanup(func() { checkExpiry(t, srv) })
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
	c, err := s.get("decide")
	if err != nil {
		t.Fatal(err)
	}
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
	if n := srv.Do(t, "EXISTS", limit.StoredKey(s.prefix, r, limit.StringKey("late"))); n != "0" {
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
