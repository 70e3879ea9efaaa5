package fleetbus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

var testBreakerRule = BreakerRule{
	Window: 10 * time.Second, MinCalls: 10, FailureRate: 0.5, SlowCallRate: 1,
	OpenFor: 30 * time.Second, HalfOpenCalls: 3, TrialTimeout: 3 * time.Second,
}

// Three stores (three instances) add to one window: none of their counts
// reaches the thresholds alone, together they open the fleet's breaker.
// Its trials are HalfOpenCalls for the three, and decide for all.
func TestBreakerWindowShared(t *testing.T) {
	srv := testredis.Start(t)
	checkBreakerWindow(t, []*Bus{open(t, srv), open(t, srv), open(t, srv)})
	srv.CheckExpiry(t)
	for _, k := range srv.Keys(t) {
		if !strings.HasPrefix(k, redisstore.DefaultPrefix+"{breaker/api}:") {
			t.Errorf("key %q is not under the prefix with the breaker's hash tag", k)
		}
	}
}

func TestClusterBreakerWindowShared(t *testing.T) {
	cl := testredis.StartCluster(t, 3)
	checkBreakerWindow(t, []*Bus{openCluster(t, cl), openCluster(t, cl), openCluster(t, cl)})
}

func checkBreakerWindow(t *testing.T, ss []*Bus) {
	ctx := context.Background()
	r := testBreakerRule
	// Half a second into a second: the calls that follow, and the time
	// a loaded machine takes over them, stay in that second.
	for _, s := range ss {
		at(t, s, time.Date(2031, 1, 1, 0, 0, 0, 500*int(time.Millisecond), time.UTC))
	}
	for i, s := range ss[:2] {
		st, err := s.BreakerTick(ctx, "api", r, 0, 4, 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.State != 0 || st.Calls != int64(4*(i+1)) || st.Failures != int64(2*(i+1)) {
			t.Fatalf("after instance %d: %+v", i, st)
		}
	}
	// A count of an episode that is over is dropped.
	if st, err := ss[2].BreakerTick(ctx, "api", r, 7, 4, 4, 0); err != nil || st.Calls != 8 {
		t.Fatalf("counts of another episode: %+v, %v", st, err)
	}
	st, err := ss[2].BreakerTick(ctx, "api", r, 0, 4, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != 1 || st.Episode != 1 || !st.OpenedAt.Equal(st.Now) {
		t.Fatalf("12 calls, 6 failed, over three instances: %+v; want OPEN in episode 1", st)
	}
	opened := st.OpenedAt
	for _, s := range ss {
		if st, _ := s.BreakerTick(ctx, "api", r, 1, 0, 0, 0); st.State != 1 || !st.OpenedAt.Equal(opened) {
			t.Fatalf("another instance reads %+v", st)
		}
		if ok, _, _ := s.BreakerTrial(ctx, "api", r); ok {
			t.Fatal("a trial admitted before open_for passed")
		}
	}
	for _, s := range ss {
		s.SetOffset(s.Offset() + r.OpenFor)
	}
	// Three trials for the fleet, one per instance, and no fourth.
	for i, s := range ss {
		ok, st, err := s.BreakerTrial(ctx, "api", r)
		if err != nil || !ok || st.State != 2 {
			t.Fatalf("trial %d: %v %+v %v", i, ok, st, err)
		}
	}
	if ok, _, _ := ss[0].BreakerTrial(ctx, "api", r); ok {
		t.Fatal("a fourth trial admitted")
	}
	// A cancelled trial frees its place.
	if _, err := ss[1].BreakerTrialDone(ctx, "api", r, 1, false, false, true); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := ss[0].BreakerTrial(ctx, "api", r); !ok {
		t.Fatal("the place of a cancelled trial was not given again")
	}
	for i, s := range ss {
		st, err := s.BreakerTrialDone(ctx, "api", r, 1, false, false, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := uint8(2); i == 2 {
			if st.State != 0 || st.Episode != 2 {
				t.Fatalf("the three trials passed: %+v; want CLOSED in episode 2", st)
			}
		} else if st.State != want {
			t.Fatalf("after trial %d: %+v", i, st)
		}
	}
	if st, _ := ss[0].BreakerTick(ctx, "api", r, 2, 0, 0, 0); st.State != 0 || st.Calls != 0 {
		t.Fatalf("closed again: %+v; want an empty window", st)
	}

	// Open again; a trial that fails reopens, and a trial never reported
	// fails after the trial timeout.
	if st, _ := ss[0].BreakerTick(ctx, "api", r, 2, 10, 10, 0); st.State != 1 || st.Episode != 3 {
		t.Fatalf("10 failures: %+v", st)
	}
	for _, s := range ss {
		s.SetOffset(s.Offset() + r.OpenFor)
	}
	for range 3 {
		if ok, _, _ := ss[0].BreakerTrial(ctx, "api", r); !ok {
			t.Fatal("trial refused")
		}
	}
	for _, s := range ss {
		s.SetOffset(s.Offset() + r.TrialTimeout + time.Second)
	}
	st, err = ss[1].BreakerTick(ctx, "api", r, 3, 0, 0, 0)
	if err != nil || st.State != 1 || st.Episode != 4 {
		t.Fatalf("three trials unreported past their timeout: %+v %v; want OPEN again in episode 4", st, err)
	}
	if st, _ := ss[2].BreakerReset(ctx, "api", r); st.State != 0 || st.Episode != 5 {
		t.Fatalf("reset: %+v", st)
	}
}

// The fleet's window slides by the second, by the Redis clock.
func TestBreakerWindowSlides(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	r := testBreakerRule
	// Half a second into a second, as above.
	at(t, s, time.Date(2031, 1, 1, 0, 0, 0, 500*int(time.Millisecond), time.UTC))
	for i := range 12 {
		st, err := s.BreakerTick(ctx, "api", r, 0, 1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Second i adds one call; the window holds the last 10 seconds.
		if want := int64(min(i+1, 10)); st.Calls != want {
			t.Fatalf("second %d: %d calls in the window; want %d", i, st.Calls, want)
		}
		s.SetOffset(s.Offset() + time.Second)
	}
	s.SetOffset(s.Offset() + r.Window)
	if st, _ := s.BreakerTick(ctx, "api", r, 0, 0, 0, 0); st.Calls != 0 {
		t.Fatalf("a window later: %d calls", st.Calls)
	}
	srv.CheckExpiry(t)
}
