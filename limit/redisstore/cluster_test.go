package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
	"github.com/floodgate-gw/floodgate/limit/limittest"
)

// openCluster returns a store on cl that the test closes when it ends.
func openCluster(t testing.TB, cl *testredis.Cluster, opts ...func(*Options)) *Store {
	t.Helper()
	o := Options{Mode: Cluster, Addrs: cl.Addrs()[:1], Timeout: time.Second}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Now(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func flushCluster(t testing.TB, cl *testredis.Cluster) {
	t.Helper()
	for _, n := range cl.Nodes() {
		n.Do(t, "FLUSHALL")
	}
}

func TestClusterConformance(t *testing.T) {
	cl := testredis.StartCluster(t, 3)
	limittest.Run(t, func(t *testing.T, realTime bool) *limittest.Harness {
		flushCluster(t, cl)
		return harness(t, openCluster(t, cl), realTime, cl.Nodes())
	})
}

// A request that a later slot group rejects gives back what the earlier
// one took, whatever that one's algorithm: its state reads as before, and
// so does its decision.
func TestClusterGivesBack(t *testing.T) {
	t.Parallel() // most of a cluster's start is waiting
	cl := testredis.StartCluster(t, 3)
	s := openCluster(t, cl, remoteOnly) // what Redis is asked
	ctx := context.Background()
	// The route limit admits 2 in 3 s, less selective than any of the
	// first limits below (0.6 a second or fewer), so it is asked second.
	route := valid(t, &limit.Rule{Name: "route", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: 3 * time.Second}})
	firsts := []*limit.Rule{
		{Name: "fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: 10 * time.Second}},
		{Name: "first", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 3, Period: 10 * time.Second}},
		{Name: "zone", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: 24 * time.Hour}, Location: shanghai(t)},
		{Name: "sliding", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 3, Period: 10 * time.Second}},
		{Name: "bucket", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 3, Period: 10 * time.Second}},
		{Name: "cost", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 6, Period: 10 * time.Second}, Cost: 2},
		{Name: "conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 3}, LeaseTTL: 10 * time.Second},
	}
	for i, r := range firsts {
		t.Run(r.Name, func(t *testing.T) {
			flushCluster(t, cl)
			at(t, s, t0)
			valid(t, r)
			user := limit.Limit{Rule: r, Key: limit.StringKey("u")}
			// The user limit has lately rejected all it decided, so it
			// stays first even once the route limit rejects some.
			for range rejectionWindow {
				rejectionsOf(r).add(true)
			}
			api := limit.Limit{Rule: route, Key: limit.StringKey("r" + strconv.Itoa(i))}
			lease := func(n int) string { return "lease-" + strconv.Itoa(n) }
			decide := func(n int) limit.Result {
				res, err := s.Decide(ctx, &limit.Request{Limits: []limit.Limit{user, api}, Now: t0, Lease: lease(n)})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			for n := range 2 {
				if res := decide(n); !res.Allowed {
					t.Fatalf("request %d rejected: %+v", n, res.Decisions)
				}
			}
			before, err := s.Peek(ctx, t0, r, user.Key)
			if err != nil {
				t.Fatal(err)
			}
			for n := 2; n < 5; n++ {
				res := decide(n)
				d := res.Decisions[0]
				if res.Allowed || !d.Allowed || d.Undecided || res.Decisions[1].Allowed {
					t.Fatalf("request %d over the route limit: allowed=%v decisions %+v", n, res.Allowed, res.Decisions)
				}
				after, err := s.Peek(ctx, t0, r, user.Key)
				if err != nil {
					t.Fatal(err)
				}
				if after.Remaining != before.Remaining || after.InFlight != before.InFlight {
					t.Fatalf("request %d: %s reads %+v after a give-back, %+v before the request", n, r.Name, after, before)
				}
				if d.Remaining != before.Remaining || d.Delay != 0 {
					t.Fatalf("request %d: %s's decision reads %d remaining (delay %v), its state %d", n, r.Name, d.Remaining, d.Delay, before.Remaining)
				}
			}
		})
	}
}

// A give-back happens once, however often it is sent: the marker in the
// limit's slot remembers it.
func TestClusterGiveBackOnce(t *testing.T) {
	t.Parallel() // most of a cluster's start is waiting
	cl := testredis.StartCluster(t, 3)
	s := openCluster(t, cl, remoteOnly) // what Redis is asked
	ctx := context.Background()
	at(t, s, t0)
	r := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: 10 * time.Second}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u")}
	g := s.groups(&limit.Request{Limits: []limit.Limit{l}, Now: t0})[0]
	c, err := s.get("test")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s.decideGroup(ctx, c, g, "tok1")
		if g.err != nil || !g.res.Allowed {
			t.Fatalf("decide: %v %+v", g.err, g.res)
		}
	}
	for range 3 {
		s.giveBackGroup(ctx, c, g, "tok1")
	}
	st, err := s.Peek(ctx, t0, r, l.Key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 4 {
		t.Fatalf("remaining %d after 2 admissions and one give-back sent 3 times, want 4", st.Remaining)
	}
	if got := g.res.Decisions[0].Remaining; got != 4 {
		t.Fatalf("the give-back's decision reads %d remaining, want 4", got)
	}
}

// Three slot groups, 64 goroutines: a user limit (asked first), an IP
// limit and a tight route limit (asked together). What each key holds at
// the end is exactly what it admitted: every request the route limit
// rejected gave back what the user and IP limits had taken for it.
func TestClusterStaysExact(t *testing.T) {
	t.Parallel() // most of a cluster's start is waiting
	cl := testredis.StartCluster(t, 3)
	s := openCluster(t, cl)
	ctx := context.Background()
	rule := func(name string, n int64) *limit.Rule {
		return valid(t, &limit.Rule{Name: name, Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: n, Period: time.Hour}})
	}
	user, ip, route := rule("user", 30), rule("ip", 60), rule("route", 300)
	const goroutines, each, users, ips = 64, 40, 16, 8
	var (
		mu       sync.Mutex
		admitted = map[string]int64{}
		total    int64
	)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				u := limit.StringKey("u" + strconv.Itoa((g+i)%users))
				a := limit.StringKey("ip" + strconv.Itoa((g*7+i)%ips))
				res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{
					{Rule: route, Key: "r"}, {Rule: user, Key: u}, {Rule: ip, Key: a},
				}})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					mu.Lock()
					total++
					admitted["user:"+string(u)]++
					admitted["ip:"+string(a)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if total != 300 {
		t.Fatalf("admitted %d, want the route's 300 (the user and IP limits allow %d and %d)", total, users*30, ips*60)
	}
	check := func(r *limit.Rule, prefix string, k limit.Key) {
		st, err := s.Peek(ctx, time.Now(), r, k)
		if err != nil {
			t.Fatal(err)
		}
		if used := r.Rate.Count - st.Remaining; used != admitted[prefix+string(k)] {
			t.Errorf("%s %s holds %d admissions, admitted %d", r.Name, k, used, admitted[prefix+string(k)])
		}
	}
	admitted["route:r"] = total
	check(route, "route:", "r")
	for u := range users {
		check(user, "user:", limit.StringKey("u"+strconv.Itoa(u)))
	}
	for a := range ips {
		check(ip, "ip:", limit.StringKey("ip"+strconv.Itoa(a)))
	}
	for _, n := range cl.Nodes() {
		n.CheckExpiry(t)
	}
}

// The store follows a slot that moves to another node (MOVED, and ASK
// while it migrates): decisions go on, and the state moves with the slot.
func TestClusterFollowsMovedSlot(t *testing.T) {
	t.Parallel() // most of a cluster's start is waiting
	cl := testredis.StartCluster(t, 3)
	s := openCluster(t, cl)
	ctx := context.Background()
	r := valid(t, &limit.Rule{Name: "mover", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 1000, Period: time.Hour}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("k")}
	decide := func(n int) {
		t.Helper()
		for range n {
			res, err := s.Decide(ctx, &limit.Request{Limits: []limit.Limit{l}, Now: time.Now()})
			if err != nil || !res.Allowed {
				t.Fatalf("decide: %v %+v", err, res)
			}
		}
	}
	decide(5)
	key := core.StoredKey(s.prefix, r, l.Key)
	nodes := cl.Nodes()
	slot := nodes[0].Do(t, "CLUSTER", "KEYSLOT", key)
	var src, dst *testredis.Server
	for _, n := range nodes {
		// Nodes that do not own the slot answer MOVED.
		if v, err := n.DoValue(t, "EXISTS", key); err == nil && v == int64(1) {
			src = n
		}
	}
	if src == nil {
		t.Fatalf("no node holds %s", key)
	}
	for _, n := range nodes {
		if n != src {
			dst = n
			break
		}
	}
	srcID, dstID := src.Do(t, "CLUSTER", "MYID"), dst.Do(t, "CLUSTER", "MYID")
	dst.Do(t, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	src.Do(t, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	decide(5) // the key is still on src, which answers
	_, port, _ := strings.Cut(dst.Addr(), ":")
	src.Do(t, "MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS", key)
	decide(5) // src answers ASK, dst decides
	for _, n := range nodes {
		n.Do(t, "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
	decide(5) // src answers MOVED
	if dst.Do(t, "EXISTS", key) != "1" {
		t.Fatalf("%s is not on the node its slot moved to", key)
	}
	st, err := s.Peek(ctx, time.Now(), r, l.Key)
	if err != nil {
		t.Fatal(err)
	}
	if st.Remaining != 1000-20 {
		t.Fatalf("remaining %d after 20 admissions across the move, want %d", st.Remaining, 1000-20)
	}
}

// A store told to use a cluster refuses to keep its limits on one
// standalone server, and says why.
func TestClusterModeOnStandalone(t *testing.T) {
	srv := testredis.Start(t)
	s, err := New(Options{Mode: Cluster, Addrs: []string{srv.Addr()}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := valid(t, &limit.Rule{Name: "x", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}})
	_, err = s.Decide(context.Background(), &limit.Request{Limits: []limit.Limit{{Rule: r, Key: "k"}}, Now: time.Now()})
	if !errors.Is(err, limit.ErrStoreUnavailable) || !strings.Contains(err.Error(), "not a Redis Cluster") {
		t.Fatalf("Decide = %v, want ErrStoreUnavailable saying the server is not a cluster", err)
	}
}

// Renewing leases whose keys are in different slots renews each.
func TestClusterRenewAcrossSlots(t *testing.T) {
	t.Parallel() // most of a cluster's start is waiting
	cl := testredis.StartCluster(t, 3)
	s := openCluster(t, cl)
	ctx := context.Background()
	var limits []limit.Limit
	for i := range 4 {
		r := valid(t, &limit.Rule{Name: fmt.Sprintf("c%d", i), Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 2}, LeaseTTL: 2 * time.Second})
		limits = append(limits, limit.Limit{Rule: r, Key: limit.StringKey("k")})
	}
	res, err := s.Decide(ctx, &limit.Request{Limits: limits, Now: time.Now(), Lease: "L"})
	if err != nil || !res.Allowed {
		t.Fatalf("decide: %v %+v", err, res)
	}
	if err := s.Renew(ctx, time.Now(), "L", limits...); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, "L", limits...); err != nil {
		t.Fatal(err)
	}
	for _, l := range limits {
		st, err := s.Peek(ctx, time.Now(), l.Rule, l.Key)
		if err != nil || st.InFlight != 0 {
			t.Fatalf("%s after release: %+v %v", l.Rule.Name, st, err)
		}
	}
}

// onNode returns a key for r whose slot node n of cl owns.
func onNode(t *testing.T, cl *testredis.Cluster, s *Store, r *limit.Rule, n int) limit.Key {
	t.Helper()
	nodes := cl.Nodes()
	for i := range 1000 {
		k := limit.StringKey("k" + strconv.Itoa(i))
		slot, err := strconv.Atoi(nodes[0].Do(t, "CLUSTER", "KEYSLOT", core.StoredKey(s.prefix, r, k)))
		if err != nil {
			t.Fatal(err)
		}
		if slot*len(nodes)/16384 == n {
			return k
		}
	}
	t.Fatalf("no key of %s on node %d", r.Name, n)
	return ""
}

// When the node of a later slot group stalls or dies, the decision fails
// with ErrStoreUnavailable within the timeout, the earlier group gives back
// what it took, and decisions recover with the node.
func TestClusterWhenANodeFails(t *testing.T) {
	cl := testredis.StartCluster(t, 3)
	s, err := New(Options{Mode: Cluster, Addrs: cl.Addrs(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	user := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 100, Period: time.Hour}})
	route := valid(t, &limit.Rule{Name: "route", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1000, Period: time.Second}})
	u := limit.Limit{Rule: user, Key: onNode(t, cl, s, user, 0)}
	r := limit.Limit{Rule: route, Key: onNode(t, cl, s, route, 1)}
	decide := func() (limit.Result, error) {
		return s.Decide(ctx, &limit.Request{Limits: []limit.Limit{r, u}, Now: time.Now()})
	}
	for range 3 {
		if res, err := decide(); err != nil || !res.Allowed {
			t.Fatalf("decide: %v %+v", err, res)
		}
	}
	used := func() int64 {
		t.Helper()
		st, err := s.Peek(ctx, time.Now(), user, u.Key)
		if err != nil {
			t.Fatal(err)
		}
		return user.Rate.Count - st.Remaining
	}
	if n := used(); n != 3 {
		t.Fatalf("user limit used %d, want 3", n)
	}
	node := cl.Nodes()[1]

	node.Do(t, "CLIENT", "PAUSE", "600", "ALL")
	start := time.Now()
	_, err = decide()
	if !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("decide with the route's node paused: %v, want ErrStoreUnavailable", err)
	}
	if took := time.Since(start); took > 200*time.Millisecond+slack {
		t.Fatalf("decide took %v with a 200ms timeout", took)
	}
	if n := used(); n != 3 {
		t.Fatalf("user limit used %d after a decision its route's node never answered, want 3: nothing given back", n)
	}
	admits := func() error {
		res, err := decide()
		if err == nil && !res.Allowed {
			err = fmt.Errorf("rejected: %+v", res.Decisions)
		}
		return err
	}
	within(t, 15*time.Second, admits)

	node.Stop()
	if _, err := decide(); !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("decide with the route's node stopped: %v, want ErrStoreUnavailable", err)
	}
	if n := used(); n != 4 {
		t.Fatalf("user limit used %d after a decision its route's node was down for, want 4", n)
	}
	node.Restart()
	within(t, 15*time.Second, admits)
}

// The limit that has lately rejected the most is asked first, whatever its
// rate: when one IP floods, its limit turns the flood away alone, and the
// user limits it would have passed are never asked.
func TestClusterAsksTheRejectingLimitFirst(t *testing.T) {
	t.Parallel() // most of a cluster's start is waiting
	cl := testredis.StartCluster(t, 3)
	s := openCluster(t, cl, remoteOnly) // what Redis is asked
	ctx := context.Background()
	user := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 10 * time.Second}})
	ip := valid(t, &limit.Rule{Name: "ip", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 10, Period: time.Minute}})
	var undecided int
	for i := range 40 {
		res, err := s.Decide(ctx, &limit.Request{Now: time.Now(), Limits: []limit.Limit{
			{Rule: user, Key: limit.StringKey("u" + strconv.Itoa(i))}, {Rule: ip, Key: "10.0.0.1"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != (i < 10) {
			t.Fatalf("request %d: allowed=%v", i, res.Allowed)
		}
		if res.Decisions[0].Undecided {
			undecided++
		}
	}
	// The user limit (0.1/s) goes first until the IP limit (0.17/s) has
	// rejected more than it: from the 11th request on, the IP limit has.
	if undecided != 29 {
		t.Fatalf("the user limit was left undecided %d times, want 29 (every rejection after the first)", undecided)
	}
	for i := 10; i < 40; i++ {
		st, err := s.Peek(ctx, time.Now(), user, limit.StringKey("u"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		if st.Remaining != 1 {
			t.Fatalf("user u%d, rejected by the IP limit, holds %d of 1", i, 1-st.Remaining)
		}
	}
}

// groups puts limits of one hash tag together, in the request's order,
// and the most selective group first.
func TestGroups(t *testing.T) {
	s, err := New(Options{Mode: Cluster, Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fixed := func(name string, n int64) *limit.Rule {
		return valid(t, &limit.Rule{Name: name, Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: n, Period: time.Second}})
	}
	// Two rules of one name and key share a tag: a fixed window and a
	// token bucket of "user" for "u".
	user, userTB := fixed("user", 10), valid(t, &limit.Rule{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}})
	global, shadow := fixed("global", 1000), fixed("tight", 1)
	shadow.Shadow = true
	req := &limit.Request{Limits: []limit.Limit{
		{Rule: global, Key: "g"}, {Rule: user, Key: "u"}, {Rule: shadow, Key: "s"}, {Rule: userTB, Key: "u"},
	}}
	gs := s.groups(req)
	var got []string
	for _, g := range gs {
		got = append(got, fmt.Sprint(g.idx, len(g.keys), len(g.req.Limits)))
	}
	// user (10/s) before global (1000/s); the shadow limit, never
	// rejecting, last whatever its rate.
	if want := []string{"[1 3] 2 2", "[0] 1 1", "[2] 1 1"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("groups %v, want %v", got, want)
	}
	for _, g := range gs {
		for j, i := range g.idx {
			if g.req.Limits[j] != req.Limits[i] || g.keys[j] != core.StoredKey(s.prefix, req.Limits[i].Rule, req.Limits[i].Key) {
				t.Fatalf("group %v: limit %d is not the request's limit %d", g.idx, j, i)
			}
		}
	}
}

// On a cluster a request rejected in one slot gives back what another
// slot took for it. Another instance that saw the key used up meanwhile,
// and remembered it, forgets it when the give-back is announced: it admits
// the key again, as Redis would.
func TestClusterGiveBackReachesMemory(t *testing.T) {
	t.Parallel()
	cl := testredis.StartCluster(t, 3)
	ctx := context.Background()
	slow := func(o *Options) { o.Timeout = 5 * time.Second }
	b := openCluster(t, cl, slow)             // remembers
	c := openCluster(t, cl, remoteOnly, slow) // takes and gives back
	user := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Hour}})
	route := valid(t, &limit.Rule{Name: "route", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	for range rejectionWindow {
		rejectionsOf(user).add(true) // the user limit is asked first
	}
	// node is the index of the node whose slot holds key: the others
	// answer MOVED.
	node := func(key string) int {
		for i, n := range cl.Nodes() {
			if _, err := n.DoValue(t, "EXISTS", key); err == nil {
				return i
			}
		}
		t.Fatalf("no node holds %s", key)
		return -1
	}
	u := limit.Limit{Rule: user, Key: "u"}
	var r limit.Limit
	for i := 0; ; i++ {
		r = limit.Limit{Rule: route, Key: limit.StringKey("r" + strconv.Itoa(i))}
		if node(core.StoredKey(DefaultPrefix, route, r.Key)) != node(core.StoredKey(DefaultPrefix, user, u.Key)) {
			break
		}
	}
	within(t, 5*time.Second, func() error {
		n := 0
		for _, nd := range cl.Nodes() {
			v, err := nd.DoValue(t, "PUBSUB", "NUMSUB", forgetChannel(DefaultPrefix))
			if err != nil {
				return err
			}
			n += int(v.([]any)[1].(int64))
		}
		if n < 2 {
			return fmt.Errorf("%d stores listen", n)
		}
		return nil
	})
	decide := func(s *Store, ls ...limit.Limit) limit.Result {
		t.Helper()
		res, err := s.Decide(ctx, &limit.Request{Limits: ls, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	decide(c, u) // the user has 1 left
	decide(c, r) // the route has none
	// Hold c's request [user, route] between the user's take and its
	// give-back: the route's node does not answer for a while.
	cl.Nodes()[node(core.StoredKey(DefaultPrefix, route, r.Key))].Do(t, "CLIENT", "PAUSE", "1000", "WRITE")
	done := make(chan limit.Result)
	go func() {
		res, _ := c.Decide(ctx, &limit.Request{Limits: []limit.Limit{u, r}, Now: time.Now()})
		done <- res
	}()
	time.Sleep(300 * time.Millisecond)
	if res := decide(b, u); res.Allowed {
		t.Fatal("b admitted the user while c held its last admission")
	}
	if res := <-done; res.Allowed {
		t.Fatal("c's request over the route limit was admitted")
	}
	within(t, 2*time.Second, func() error {
		if res := decide(b, u); !res.Allowed {
			return fmt.Errorf("b rejects the user after the give-back (local %v, retry %v)", res.Decisions[0].Local, res.Decisions[0].RetryAfter)
		}
		return nil
	})
}
