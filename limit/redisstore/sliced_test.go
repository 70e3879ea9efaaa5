package redisstore

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

// scriptCalls is how many script calls srv has run since its stats were
// reset.
func scriptCalls(t *testing.T, srv *testredis.Server) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(srv.Do(t, "INFO", "commandstats"), "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
			v := line[strings.Index(line, "calls=")+6:]
			c, _ := strconv.Atoi(v[:strings.IndexByte(v, ',')])
			n += c
		}
	}
	return n
}

// Three instances admit a global limit from slices of its windows under
// demand far above it: no window admits more than the limit, every whole
// window admits all but what the slices held at its end (under 2% of the
// limit), and Redis is asked for a small part of the requests. Once on a
// standalone Redis, once on a 3-master cluster, where every decision would
// otherwise go to the one node of the global key.
func TestSlicedWindows(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := "standalone"
		if cluster {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var stores []*Store
			var servers []*testredis.Server
			if cluster {
				cl := testredis.StartCluster(t, 3)
				servers = cl.Nodes()
				for range 3 {
					stores = append(stores, openCluster(t, cl))
				}
			} else {
				srv := testredis.Start(t)
				servers = []*testredis.Server{srv}
				for range 3 {
					stores = append(stores, open(t, srv))
				}
			}
			const n, w = 300, 500 * time.Millisecond
			global := valid(t, &limit.Rule{Name: "global", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: n, Period: w}, Sliced: true})
			for _, srv := range servers {
				srv.Do(t, "CONFIG", "RESETSTAT")
			}
			var mu sync.Mutex
			perWindow := map[int64]int{}
			decided := 0
			stop := time.Now().Add(8 * w)
			var wg sync.WaitGroup
			for i := range 12 {
				s := stores[i%3]
				wg.Go(func() {
					for time.Now().Before(stop) {
						time.Sleep(100 * time.Microsecond)
						res, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: global, Key: "g"}}})
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						decided++
						if res.Allowed {
							perWindow[res.Time.UnixMicro()/w.Microseconds()]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			first, last := int64(math.MaxInt64), int64(0)
			admitted := 0
			for i, c := range perWindow {
				first, last = min(first, i), max(last, i)
				admitted += c
				if c > n {
					t.Errorf("window %d admitted %d, limit %d", i, c, n)
				}
			}
			// What the three slices held unused when a window ended is
			// 2% of the limit, each slice rounded up.
			floor := n - int(math.Ceil(sliceShare*n)) - 3
			for i := first + 1; i < last; i++ {
				if perWindow[i] < floor {
					t.Errorf("window %d admitted %d, want at least %d of %d", i-first, perWindow[i], floor, n)
				}
			}
			calls := 0
			for _, srv := range servers {
				calls += scriptCalls(t, srv)
			}
			if decided < 4*n || float64(calls) > 0.1*float64(decided) {
				t.Errorf("%d script calls for %d decisions (%d admitted)", calls, decided, admitted)
			}
			t.Logf("%d decisions, %d admitted, %d script calls; per window %v", decided, admitted, calls, perWindow)
		})
	}
}

// A sliced limit and a limit decided in Redis, in one request: a request
// the other limit rejects takes nothing from the slice, and one the window
// cannot admit asks Redis nothing.
func TestSlicedBesideOtherLimits(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	global := valid(t, &limit.Rule{Name: "global", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 300, Period: time.Hour}, Sliced: true})
	user := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	decide := func(u string) limit.Result {
		t.Helper()
		res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: global, Key: "g"}, {Rule: user, Key: limit.StringKey(u)}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range 5 {
		res := decide("u1")
		if res.Allowed != (i == 0) {
			t.Fatalf("request %d of one user: %+v", i, res.Decisions)
		}
	}
	sl := s.sliceOf(limit.Limit{Rule: global, Key: "g"})
	held := func() (used, left int64) {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		return sl.used, sl.left
	}
	// The first slice is 1/150 of the limit: 2 admissions, one used.
	if used, left := held(); used != 1 || left != 1 {
		t.Fatalf("slice used %d, left %d; want 1 and 1", used, left)
	}
	st, err := s.Peek(ctx, time.Now(), global, "g")
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 298 {
		t.Fatalf("global remaining %d in Redis, want 298 (one slice of 2)", st.Remaining)
	}

	// A reset starts the key afresh: what the slice held is gone too.
	if err := s.Reset(ctx, global, "g"); err != nil {
		t.Fatal(err)
	}
	if _, left := held(); left != 0 {
		t.Fatalf("slice holds %d after a reset", left)
	}
	if res := decide("u2"); !res.Allowed {
		t.Fatalf("after a reset: %+v", res.Decisions)
	}
	// A slice of 1 now: 2% of the 1 this instance used before.
	if st, err := s.Peek(ctx, time.Now(), global, "g"); err != nil || st.Remaining != 299 {
		t.Fatalf("global remaining %d after a reset and one request, want 299 (%v)", st.Remaining, err)
	}

	// A window used up rejects from the slice, without a call.
	tiny := valid(t, &limit.Rule{Name: "tiny", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}, Sliced: true})
	for i, want := range []bool{true, false} {
		res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: tiny, Key: "g"}}})
		if err != nil || res.Allowed != want {
			t.Fatalf("tiny request %d: %v %+v", i, err, res.Decisions)
		}
	}
	// A reload that raises its count: the next request leases again.
	raised := valid(t, &limit.Rule{Name: "tiny", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Hour}, Sliced: true})
	if res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: raised, Key: "g"}}}); err != nil || !res.Allowed {
		t.Fatalf("after raising the count to 2: %v %+v", err, res.Decisions)
	}

	small := valid(t, &limit.Rule{Name: "small", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Hour}, Sliced: true})
	for i := range 3 {
		res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: small, Key: "g"}}})
		if err != nil || !res.Allowed {
			t.Fatalf("request %d: %v %+v", i, err, res.Decisions)
		}
	}
	srv.Do(t, "CONFIG", "RESETSTAT")
	for range 10 {
		res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: small, Key: "g"}, {Rule: user, Key: "u9"}}})
		if err != nil {
			t.Fatal(err)
		}
		if d := res.Decisions[0]; res.Allowed || d.Allowed || !d.Local || d.RetryAfter <= 0 || !res.Decisions[1].Undecided {
			t.Fatalf("over the small limit: %+v", res.Decisions)
		}
	}
	if c := scriptCalls(t, srv); c != 0 {
		// The lease that took the last admission said so.
		t.Fatalf("%d script calls over a used-up sliced window, want none", c)
	}
}

// A Redis that dies while an instance holds a slice: the slice is used up
// as it stands, then decisions fail as any decision without Redis does.
func TestSlicedRedisDies(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv, func(o *Options) { o.Timeout = 200 * time.Millisecond })
	ctx := context.Background()
	global := valid(t, &limit.Rule{Name: "global", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1500, Period: time.Hour}, Sliced: true})
	req := func() *limit.Request {
		return &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: global, Key: "g"}}}
	}
	if res, err := s.Decide(ctx, req()); err != nil || !res.Allowed {
		t.Fatalf("first request: %v %+v", err, res)
	}
	srv.Stop()
	admitted := 1
	for {
		res, err := s.Decide(ctx, req())
		if err != nil {
			if !errors.Is(err, limit.ErrStoreUnavailable) {
				t.Fatalf("with Redis down: %v, want ErrStoreUnavailable", err)
			}
			break
		}
		if !res.Allowed {
			t.Fatalf("rejected with a slice held: %+v", res.Decisions)
		}
		admitted++
	}
	if admitted != 10 { // the first slice: 1500/150
		t.Fatalf("%d admitted from the slice held when Redis died, want 10", admitted)
	}
}

// Slices whose window has ended are dropped once a store holds
// maxSlices: a caller that slices a rule of many keys does not grow the
// store without bound.
func TestSlicesBounded(t *testing.T) {
	s := &Store{epoch: time.Now()}
	r := valid(t, &limit.Rule{Name: "many", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: time.Second}, Sliced: true})
	live := s.sliceOf(limit.Limit{Rule: r, Key: "live"})
	live.gapEnd = s.mono() + int64(time.Hour)
	for i := range 3 * maxSlices {
		s.sliceOf(limit.Limit{Rule: r, Key: limit.StringKey(strconv.Itoa(i))}) // gapEnd 0: ended
	}
	if n := len(s.slices.m); n > maxSlices+1 {
		t.Fatalf("%d slices held, want at most %d", n, maxSlices+1)
	}
	if s.sliceOf(limit.Limit{Rule: r, Key: "live"}) != live {
		t.Fatal("a live slice was dropped")
	}
}
