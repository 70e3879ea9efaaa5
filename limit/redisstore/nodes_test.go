package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// A guard trips after three consecutive failures, refuses while it rests,
// then lets one probe through: its success closes the guard, its failure
// rests it again. An answer, or an error that is not ErrStoreUnavailable,
// resets the count.
func TestNodeGuard(t *testing.T) {
	var now atomic.Int64
	s := &Store{mode: Cluster, remap: make(chan struct{}, 1), guardClock: now.Load}
	g := &nodeGuard{addr: "n"}
	down := unavailable("decide", errors.New("refused"))
	call := func(err error) bool {
		t.Helper()
		ok, probe := s.enter(g)
		if ok {
			s.leave(g, probe, err)
		}
		return ok
	}
	for range 2 {
		call(down)
	}
	call(nil) // an answer: the count starts again
	for range 2 {
		call(down)
	}
	call(errors.New("bad request")) // no news of the node being down
	for i := range 2 {
		if !call(down) {
			t.Fatalf("call %d refused before three consecutive failures", i)
		}
	}
	if !call(down) {
		t.Fatal("third failure refused")
	}
	if len(s.remap) != 1 {
		t.Error("a guard that trips does not ask where the slots are")
	}
	if n := s.failing.Load(); n != 1 {
		t.Errorf("%d guards failing, want 1", n)
	}
	for i := range 5 {
		if call(nil) {
			t.Fatalf("call %d let through while resting", i)
		}
	}
	now.Add(int64(tripRest))
	ok, probe := s.enter(g)
	if !ok || !probe {
		t.Fatalf("after the rest: ok %v, probe %v; want one probe", ok, probe)
	}
	if ok, _ := s.enter(g); ok {
		t.Fatal("a second call let through while the probe runs")
	}
	s.leave(g, true, down)
	if call(nil) {
		t.Fatal("a failed probe did not rest the guard again")
	}
	now.Add(int64(tripRest))
	ok, probe = s.enter(g)
	if !ok || !probe {
		t.Fatalf("after the second rest: ok %v, probe %v", ok, probe)
	}
	g.noNews(probe) // a probe never made leaves the guard resting, probe-able
	ok, probe = s.enter(g)
	if !ok || !probe {
		t.Fatalf("after a probe with no news: ok %v, probe %v", ok, probe)
	}
	s.leave(g, probe, nil)
	for i := range 5 {
		if !call(nil) {
			t.Fatalf("call %d refused after a probe succeeded", i)
		}
	}
	if f, r := g.failed.Load(), g.refused.Load(); f != 8 || r != 7 {
		t.Errorf("failed %d, refused %d; want 8 and 7", f, r)
	}
	if n := s.failing.Load(); n != 0 {
		t.Errorf("%d guards failing once all answer, want 0", n)
	}
}

// While no guard counts a failure, a call on a cluster looks up no guard;
// once one does, calls find their own node's guard, and a failure is
// counted against the node of its key however it entered. A guard that
// leaves the slot map stops counting.
func TestNodeGuardLookups(t *testing.T) {
	s := &Store{mode: Cluster, remap: make(chan struct{}, 1), epoch: time.Now()}
	m := &slotMap{guards: []*nodeGuard{&s.whole, {addr: "a"}, {addr: "b"}}}
	for sl := range m.guard {
		m.guard[sl] = uint16(1 + sl*2/clusterSlots)
	}
	s.slots.Store(m)
	ka, kb := "{a}", "{b}" // slots 15495 and 3300
	if s.guardOf(ka) != m.guards[2] || s.guardOf(kb) != m.guards[1] {
		t.Fatalf("guards of %s and %s: %s and %s", ka, kb, s.guardOf(ka).addr, s.guardOf(kb).addr)
	}
	g, ok, probe := s.enterKey(ka)
	if g != nil || !ok || probe {
		t.Fatalf("enterKey with no failures: %v %v %v, want no guard", g, ok, probe)
	}
	down := unavailable("decide", errors.New("refused"))
	for range tripFailures {
		g, ok, probe := s.enterKey(ka)
		if !ok {
			t.Fatal("refused before the trip")
		}
		s.leaveKey(g, ka, probe, down)
	}
	if f := m.guards[2].failures.Load(); f != tripFailures {
		t.Fatalf("the failing key's node counts %d failures, want %d", f, tripFailures)
	}
	if g, ok, _ := s.enterKey(ka); ok || g != m.guards[2] {
		t.Fatalf("a call on the tripped node: ok %v, guard %v", ok, g)
	}
	if g, ok, _ := s.enterKey(kb); !ok || g != m.guards[1] {
		t.Fatalf("a call on the healthy node: ok %v, guard %v", ok, g)
	}
	// The slots of a go to a new node: its guard is dropped, and counts
	// nothing, even for calls still in flight on it.
	m2 := &slotMap{guards: []*nodeGuard{&s.whole, m.guards[1], {addr: "a2"}}, guard: m.guard}
	s.slots.Store(m2)
	s.drop(m, m2)
	if n := s.failing.Load(); n != 0 {
		t.Fatalf("%d guards failing after the failing one was dropped", n)
	}
	s.leave(m.guards[2], false, down)
	if n := s.failing.Load(); n != 0 || m.guards[2].failures.Load() != 0 {
		t.Fatal("a dropped guard counted a failure")
	}
	if g, ok, _ := s.enterKey(ka); !ok || g != nil {
		t.Fatalf("a call on the new node: ok %v, guard %v", ok, g)
	}
}

// slot hashes keys as Redis does, hash tags and hostile keys included.
func TestSlot(t *testing.T) {
	t.Parallel()
	cl := testredis.StartCluster(t, 1)
	keys := []string{"", "foo", "{", "}", "{}", "{}x", "x{}", "{a}", "a{b}c", "{{x}}", "{x}}", "a{b{c}d}", "fg:{user:ü}:3", "\x00\xff{\x80}"}
	for i := range 200 {
		keys = append(keys, core.StoredKey(DefaultPrefix, &limit.Rule{Name: "r" + strconv.Itoa(i%7)}, limit.StringKey(strconv.Itoa(i))))
	}
	for _, k := range keys {
		if got, want := int(slot(k)), cl.KeySlot(t, k); got != want {
			t.Errorf("slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}

// failoverCluster is a 3-master cluster with a replica each, which fails
// a master over two seconds after it stops answering, and a store on it
// whose guards rest until the test moves their clock.
func failoverCluster(t *testing.T) (*testredis.Cluster, *Store, *atomic.Int64) {
	t.Helper()
	cl := testredis.StartCluster(t, 3, testredis.Replicas(1), testredis.WithArgs("--cluster-node-timeout", "2000"))
	s := openCluster(t, cl, remoteOnly, func(o *Options) { o.Timeout = 200 * time.Millisecond; o.Addrs = cl.Addrs() })
	var now atomic.Int64
	s.guardClock = now.Load
	within(t, 10*time.Second, func() error {
		if m := s.slots.Load(); m == nil || len(m.guards) != 4 {
			return errors.New("the store does not know the three masters")
		}
		return nil
	})
	return cl, s, &now
}

// keyOn returns a key for r whose slot node serves.
func keyOn(t *testing.T, cl *testredis.Cluster, s *Store, r *limit.Rule, node *testredis.Server) limit.Key {
	t.Helper()
	for i := range 1000 {
		k := limit.StringKey("k" + strconv.Itoa(i))
		if cl.Serving(t, int(slot(core.StoredKey(s.prefix, r, k)))) == node {
			return k
		}
	}
	t.Fatalf("no key of %s on %s", r.Name, node.Addr())
	return ""
}

// When one master of a cluster dies or stalls, only the decisions that
// need it fail, after three calls at once: those on the other masters stay
// exact. Once its replica took over, its keys are decided again.
func TestClusterMasterFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(*testredis.Server)
	}{
		{"killed", (*testredis.Server).Kill},  // refused connections
		{"paused", (*testredis.Server).Pause}, // timeouts
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // most of it is waiting for Redis
			clusterMasterFails(t, tc.fail)
		})
	}
}

func clusterMasterFails(t *testing.T, fail func(*testredis.Server)) {
	cl, s, now := failoverCluster(t)
	ctx := context.Background()
	const n = 20
	r := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: n, Period: time.Hour}})
	masters := cl.Nodes()[:3]
	var ks [3]limit.Key
	for i, m := range masters {
		ks[i] = keyOn(t, cl, s, r, m)
	}
	decide := func(ls ...limit.Limit) (limit.Result, error) {
		return s.Decide(ctx, &limit.Request{Limits: ls, Now: time.Now()})
	}
	lim := func(i int) limit.Limit { return limit.Limit{Rule: r, Key: ks[i]} }
	for i := range 3 {
		if res, err := decide(lim(i)); err != nil || !res.Allowed {
			t.Fatalf("key on master %d before the failure: %v %+v", i, err, res)
		}
	}
	victim := masters[2]
	g := s.guardOf(s.storedKey(lim(2)))
	if g.addr != victim.Addr() {
		t.Fatalf("the victim's key counts against %s, want %s", g.addr, victim.Addr())
	}

	fail(victim)
	const calls = 30
	for i := range calls {
		if _, err := decide(lim(2)); !errors.Is(err, limit.ErrStoreUnavailable) {
			t.Fatalf("decision %d on the failed master: %v, want ErrStoreUnavailable", i, err)
		}
	}
	// The guard's clock stands still: three calls reached the node and
	// failed (refused, or after the whole timeout), and it answered the
	// others without a call.
	if f, r := g.failed.Load(), g.refused.Load(); f != tripFailures || r != calls-tripFailures {
		t.Fatalf("calls that failed at the node %d, refused at once %d; want %d and %d", f, r, tripFailures, calls-tripFailures)
	}
	// A decision that needs the failed master and a healthy one fails at
	// once, and takes nothing from the healthy one.
	if _, err := decide(lim(0), lim(2)); !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("decision on a healthy and the failed master: %v", err)
	}
	if f := g.failed.Load(); f != tripFailures {
		t.Fatalf("a decision across nodes reached the resting node (%d failures)", f)
	}
	// The keys of the healthy masters: exactly n admitted, from Redis.
	for i := range 2 {
		admitted := 1 // before the failure
		for j := range n + 5 {
			res, err := decide(lim(i))
			if err != nil {
				t.Fatalf("key on healthy master %d, decision %d: %v", i, j, err)
			}
			if res.Allowed {
				admitted++
			}
		}
		if admitted != n {
			t.Errorf("key on healthy master %d: %d admitted, want exactly %d", i, admitted, n)
		}
	}

	cl.WaitHealthy(t)
	if got := cl.Serving(t, int(slot(s.storedKey(lim(2))))); got == victim {
		t.Fatal("the failed master still serves its slots")
	}
	within(t, 30*time.Second, func() error {
		now.Add(int64(tripRest)) // a probe may go
		res, err := decide(lim(2))
		if err == nil && !res.Allowed {
			err = fmt.Errorf("rejected: %+v", res.Decisions)
		}
		return err
	})
	if res, err := decide(lim(0), lim(2)); err != nil || res.Allowed {
		t.Fatalf("after the failover, the decision across nodes: %v %+v; want a rejection by the exhausted key", err, res)
	}
	if victim.Pid() != 0 {
		victim.Resume()
	}
}

// TestCancelledCallsRestNoNode: calls whose callers cancel them or whose
// callers' own deadlines pass (an Envoy that gives up on a rate-limit
// call, a client that goes away), however
// many, leave the node serving the next caller, on a real Redis, with
// calls coalesced while others are in flight.
func TestCancelledCallsRestNoNode(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	rule := valid(t, &limit.Rule{Name: "r", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1000000, Period: time.Minute}})
	req := func(i int) *limit.Request {
		return &limit.Request{Limits: []limit.Limit{{Rule: rule, Key: limit.StringKey("k" + strconv.Itoa(i))}}}
	}
	for i := range 10 * tripFailures {
		ctx, cancel := context.WithCancel(context.Background())
		switch i % 3 {
		case 0:
			cancel() // gone before the call
		case 1:
			time.AfterFunc(50*time.Microsecond, cancel) // gone during it
		case 2:
			// A deadline of the caller's own, shorter than the store's
			// timeout (Envoy's 20 ms), past before the call.
			ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
		}
		_, _ = s.Decide(ctx, req(i))
		cancel()
	}
	if _, err := s.Decide(context.Background(), req(-1)); err != nil {
		t.Fatalf("a call after cancelled ones: %v", err)
	}
	if n := s.whole.failed.Load(); n != 0 {
		t.Errorf("%d cancelled calls counted as the node failing, want 0", n)
	}
}
