package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

// hammer decides req from 4 goroutines for d and returns when each
// admission's tokens or slots were taken on the store's clock (Result.Time,
// plus the Delay of a queued one), sorted, and how many decisions were
// answered from the store's memory.
func hammer(t *testing.T, s *Store, req limit.Request, d time.Duration) (admitted []time.Time, decided, local int) {
	var mu sync.Mutex
	var nd, nl atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				// A short sleep, as a request's wait for the network
				// would, lets the client's reader and writer run when the
				// decisions from memory would leave them no core: demand
				// stays far above every limit.
				time.Sleep(50 * time.Microsecond)
				r := req
				r.Now = time.Now()
				res, err := s.Decide(context.Background(), &r)
				if err != nil {
					t.Error(err) // not Fatal: hammer runs on goroutines of its own
					return
				}
				nd.Add(1)
				if res.Allowed {
					mu.Lock()
					admitted = append(admitted, res.Time.Add(res.Delay))
					mu.Unlock()
				} else if res.Decisions[0].Local {
					nl.Add(1)
				}
			}
		})
	}
	wg.Wait()
	slices.SortFunc(admitted, time.Time.Compare)
	return admitted, int(nd.Load()), int(nl.Load())
}

// Local rejects never turn away what Redis would admit, whatever the
// instance's clock reads: under demand far above each limit, with most
// requests answered from memory, every window still admits its whole
// count from its first moments, and a bucket admits each token as it comes.
// The store's clock is set apart from the instance's (SetOffset: what the
// scripts read is Redis TIME plus the offset), which is what a skewed
// instance clock is to the store; the entries are kept on the instance's
// monotonic clock and in Redis's durations, so no skew moves them.
func TestLocalRejectsAreExact(t *testing.T) {
	srv := testredis.Start(t)
	const w = 400 * time.Millisecond
	slack := w / 4 // scheduling on a loaded machine; a late entry costs a window or a bucket's fill
	cases := []struct {
		name  string
		rule  *limit.Rule
		check func(t *testing.T, at []time.Time)
	}{
		{"fixed", &limit.Rule{Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: w}},
			func(t *testing.T, at []time.Time) { perWindow(t, at, w, 5, slack) }},
		{"fixed-cost", &limit.Rule{Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: w}, Cost: 3},
			func(t *testing.T, at []time.Time) { perWindow(t, at, w, 3, slack) }},
		{"fixed-first", &limit.Rule{Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 4, Period: w}},
			func(t *testing.T, at []time.Time) { windowStarts(t, at, 4, w, slack) }},
		{"sliding", &limit.Rule{Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 5, Period: w}},
			func(t *testing.T, at []time.Time) { everyNth(t, at, 5, w, slack) }},
		{"bucket", &limit.Rule{Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 3},
			func(t *testing.T, at []time.Time) { steady(t, at, 3, 100*time.Millisecond, slack) }},
		{"bucket-queue", &limit.Rule{Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 2, Queue: 150 * time.Millisecond},
			func(t *testing.T, at []time.Time) { steady(t, at, 2, 100*time.Millisecond, slack) }},
	}
	skews := []time.Duration{0, 370 * time.Millisecond, -2*time.Hour - 2500*time.Millisecond}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One store per skew, all at once: the three hammer while the
			// other cases' do.
			type run struct {
				at              []time.Time
				decided, locals int
			}
			runs := make([]run, len(skews))
			var wg sync.WaitGroup
			for i, skew := range skews {
				s := open(t, srv)
				s.SetOffset(skew)
				r := tc.rule.WithCost(tc.rule.Cost)
				r.Name = tc.name
				req := limit.Request{Limits: []limit.Limit{{Rule: valid(t, r), Key: limit.StringKey(skew.String())}}}
				wg.Go(func() {
					at, decided, local := hammer(t, s, req, 7*w)
					runs[i] = run{at, decided, local}
				})
			}
			wg.Wait()
			for i, skew := range skews {
				t.Run("skew="+skew.String(), func(t *testing.T) {
					if r := runs[i]; r.locals < r.decided/2 {
						t.Errorf("%d of %d decisions answered locally, want most", r.locals, r.decided)
					}
					tc.check(t, runs[i].at)
				})
			}
		})
	}
}

// perWindow checks that every whole epoch-aligned window of at admitted n,
// the first of them within slack of the window's start.
func perWindow(t *testing.T, at []time.Time, w time.Duration, n int, slack time.Duration) {
	t.Helper()
	if len(at) == 0 {
		t.Fatal("nothing admitted")
	}
	byWindow := map[int64][]time.Time{}
	first, last := at[0].UnixMicro()/w.Microseconds(), at[len(at)-1].UnixMicro()/w.Microseconds()
	for _, a := range at {
		i := a.UnixMicro() / w.Microseconds()
		byWindow[i] = append(byWindow[i], a)
	}
	for i := first + 1; i < last; i++ {
		got := byWindow[i]
		if len(got) != n {
			t.Errorf("window %d admitted %d, want %d", i-first, len(got), n)
			continue
		}
		start := time.UnixMicro(i * w.Microseconds())
		if late := got[0].Sub(start); late > slack {
			t.Errorf("window %d admitted its first request %v after it began", i-first, late)
		}
	}
	if last-first < 4 {
		t.Errorf("only %d windows seen", last-first+1)
	}
}

// everyNth checks that admission i+n came at least w after admission i
// (exact) and at most w+slack after it: the n slots freed as soon as the
// window moved on.
func everyNth(t *testing.T, at []time.Time, n int, w, slack time.Duration) {
	t.Helper()
	if len(at) < 4*n {
		t.Fatalf("%d admitted, want at least %d", len(at), 4*n)
	}
	for i := 0; i+n < len(at); i++ {
		gap := at[i+n].Sub(at[i])
		if gap < w-time.Millisecond || gap > w+slack {
			t.Errorf("admissions %d and %d are %v apart, want %v to %v", i, i+n, gap, w, w+slack)
		}
	}
}

// windowStarts checks windows that begin with their first admission: n
// admissions each, every window's first admission at least w after the
// previous window's (exact), and at most w+slack after it.
func windowStarts(t *testing.T, at []time.Time, n int, w, slack time.Duration) {
	t.Helper()
	if len(at) < 4*n {
		t.Fatalf("%d admitted, want at least %d", len(at), 4*n)
	}
	for i := n; i < len(at); i += n {
		gap := at[i].Sub(at[i-n])
		if gap < w || gap > w+slack {
			t.Errorf("windows beginning with admissions %d and %d are %v apart, want %v to %v", i-n, i, gap, w, w+slack)
		}
	}
}

// steady checks a saturated bucket of burst b, which admits b at once and
// then one each period: token i (i >= b) is never taken before it is due
// (exact: the first admission's time plus i-b+1 periods, the bucket full
// then) and never more than slack after the later of that and the previous
// token (a token that came late lets the next one come early).
func steady(t *testing.T, at []time.Time, b int, period, slack time.Duration) {
	t.Helper()
	if len(at) < b+10 {
		t.Fatalf("%d admitted, want at least %d", len(at), b+10)
	}
	for i := b; i < len(at); i++ {
		due := at[0].Add(time.Duration(i-b+1) * period)
		if at[i].Before(due.Add(-time.Millisecond)) {
			t.Errorf("token %d taken %v before it was due", i, due.Sub(at[i]))
		}
		if gap := at[i].Sub(at[i-1]); at[i].Sub(due) > slack && gap > period+slack {
			t.Errorf("token %d taken %v after it was due, %v after the one before", i, at[i].Sub(due), gap)
		}
	}
}

// A reset, a raised rate and a changed burst take effect on the next
// request, though the key's rejection is remembered.
func TestLocalRejectsFollowResetsAndChanges(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	one := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	k := limit.StringKey("u1")
	decide := func(r *limit.Rule) limit.Result {
		t.Helper()
		res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: r, Key: k}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	exhaust := func(r *limit.Rule) {
		t.Helper()
		for range 10 {
			if res := decide(r); !res.Allowed && res.Decisions[0].Local {
				return
			}
		}
		t.Fatal("never answered locally")
	}
	exhaust(one)
	d := decide(one).Decisions[0]
	if d.Allowed || !d.Local || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > d.ResetAfter || d.ResetAfter > time.Hour {
		t.Fatalf("local rejection: %+v", d)
	}

	if err := s.Reset(ctx, one, k); err != nil {
		t.Fatal(err)
	}
	if res := decide(one); !res.Allowed {
		t.Fatalf("after a reset: %+v", res.Decisions)
	}
	exhaust(one)
	two := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Hour}})
	if res := decide(two); !res.Allowed {
		t.Fatalf("rate raised to 2/h: %+v", res.Decisions)
	}
	exhaust(two)

	bucket := valid(t, &limit.Rule{Name: "b", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Hour}, Burst: 1})
	exhaust(bucket)
	bigger := valid(t, &limit.Rule{Name: "b", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Hour}, Burst: 2})
	// A bigger bucket holds no more tokens than it had, but it is Redis
	// that says so.
	if res := decide(bigger); res.Decisions[0].Local {
		t.Fatalf("burst raised to 2, answered from memory: %+v", res.Decisions)
	}
}

// A request with several limits is rejected locally by the first of them
// known to be exhausted; the others are not asked and consume nothing.
func TestLocalRejectOfSeveralLimits(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	global := valid(t, &limit.Rule{Name: "global", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1000, Period: time.Hour}})
	user := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	ip := valid(t, &limit.Rule{Name: "ip", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	shadow := valid(t, &limit.Rule{Name: "shadow", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}, Shadow: true})
	req := func() *limit.Request {
		return &limit.Request{Now: time.Now(), Limits: []limit.Limit{
			{Rule: global, Key: "g"}, {Rule: shadow, Key: "s"}, {Rule: ip, Key: "1.2.3.4"}, {Rule: user, Key: "u"},
		}}
	}
	var res limit.Result
	for range 3 {
		var err error
		if res, err = s.Decide(ctx, req()); err != nil {
			t.Fatal(err)
		}
	}
	if res.Allowed {
		t.Fatal("admitted")
	}
	for i, d := range res.Decisions {
		if want := i == 2; d.Local != want || d.Allowed == want || d.Undecided == want {
			t.Errorf("decision %d: %+v; want the ip limit (the first exhausted) local, the rest undecided", i, d)
		}
	}
	st, err := s.Peek(ctx, time.Now(), global, "g")
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 999 {
		t.Errorf("global remaining %d, want 999: a rejected request consumed from it", st.Remaining)
	}
}

// With local rejects off the store asks Redis every time.
func TestNoLocalRejects(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv, remoteOnly)
	r := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	for i := range 5 {
		res, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: r, Key: "u"}}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != (i == 0) || res.Decisions[0].Local {
			t.Fatalf("request %d: %+v", i, res.Decisions)
		}
	}
}

// subscribed waits until n stores listen on srv's channel of forgotten
// keys.
func subscribed(t *testing.T, srv *testredis.Server, n int) {
	t.Helper()
	within(t, 5*time.Second, func() error {
		v, err := srv.DoValue(t, "PUBSUB", "NUMSUB", forgetChannel(DefaultPrefix))
		if err != nil {
			return err
		}
		if got := v.([]any)[1].(int64); got < int64(n) {
			return fmt.Errorf("%d stores listen, want %d", got, n)
		}
		return nil
	})
}

// A reset on one instance reaches what every instance remembers: another
// instance that rejected the key from memory admits it again.
func TestResetReachesOtherInstances(t *testing.T) {
	srv := testredis.Start(t)
	a, b := open(t, srv), open(t, srv)
	subscribed(t, srv, 2)
	ctx := context.Background()
	r := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	decide := func(s *Store) limit.Result {
		t.Helper()
		res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: r, Key: "u"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if !decide(a).Allowed {
		t.Fatal("first request rejected")
	}
	for range 2 {
		decide(b)
	}
	if d := decide(b).Decisions[0]; d.Allowed || !d.Local {
		t.Fatalf("b does not answer from memory: %+v", d)
	}
	if err := a.Reset(ctx, r, "u"); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, func() error {
		if b.local.Len() != 0 {
			return fmt.Errorf("b still remembers %d keys", b.local.Len())
		}
		return nil
	})
	if res := decide(b); !res.Allowed {
		t.Fatalf("b after a's reset: %+v", res.Decisions)
	}
}

// A store that loses its subscription (Redis restarted: its counts may be
// gone) forgets everything it remembered.
func TestLostSubscriptionForgets(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	subscribed(t, srv, 1)
	r := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	for range 2 {
		if _, err := s.Decide(context.Background(), &limit.Request{Now: time.Now(), Limits: []limit.Limit{{Rule: r, Key: "u"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if s.local.Len() != 1 {
		t.Fatalf("%d keys remembered, want 1", s.local.Len())
	}
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	within(t, 2*time.Second, func() error {
		if n := s.local.Len(); n != 0 {
			return fmt.Errorf("%d keys remembered after the subscription broke", n)
		}
		return nil
	})
}
