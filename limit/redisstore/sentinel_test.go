package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// The store finds the master through the sentinels and follows it through
// a failover: decisions fail for a moment, with ErrStoreUnavailable, then
// go on at the new master, with the counts the old one replicated.
func TestSentinelFollowsFailover(t *testing.T) {
	sn := testredis.StartSentinel(t, 1, 1)
	s := openSentinel(t, sn)
	ctx := context.Background()
	r := valid(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 100, Period: time.Hour}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u")}
	decide := func() (limit.Result, error) {
		return s.Decide(ctx, &limit.Request{Limits: []limit.Limit{l}, Now: time.Now()})
	}
	for range 3 {
		if res, err := decide(); err != nil || !res.Allowed {
			t.Fatalf("decide: %v %+v", err, res)
		}
	}
	old := sn.Master(t)
	// The count reaches the replica before the master dies.
	if got := old.Do(t, "WAIT", "1", "2000"); got != "1" {
		t.Fatalf("WAIT: %s replicas acknowledged", got)
	}
	next := sn.Failover(t)
	var first limit.Result
	within(t, 15*time.Second, func() error {
		res, err := decide()
		if err != nil && !errors.Is(err, limit.ErrStoreUnavailable) {
			t.Fatalf("decide during the failover: %v, want ErrStoreUnavailable", err)
		}
		first = res
		return err
	})
	if !first.Allowed || first.Decisions[0].Remaining != 100-4 {
		t.Fatalf("first decision at the new master: %+v, want admitted with 96 remaining", first.Decisions[0])
	}
	if next.Do(t, "EXISTS", core.StoredKey(s.prefix, r, l.Key)) != "1" {
		t.Fatalf("the new master %s does not hold the count", next.Addr())
	}
}

// A switchover (the master steps down while it runs) moves the store too.
func TestSentinelFollowsSwitchover(t *testing.T) {
	sn := testredis.StartSentinel(t, 1, 1)
	s := openSentinel(t, sn)
	ctx := context.Background()
	r := valid(t, &limit.Rule{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1000, Period: time.Second}})
	l := limit.Limit{Rule: r, Key: limit.StringKey("u")}
	next := sn.Switchover(t)
	within(t, 15*time.Second, func() error {
		if _, err := s.Decide(ctx, &limit.Request{Limits: []limit.Limit{l}, Now: time.Now()}); err != nil {
			return err
		}
		if next.Do(t, "EXISTS", core.StoredKey(s.prefix, r, l.Key)) != "1" {
			return errors.New("the count is not on the new master")
		}
		return nil
	})
}

// openSentinel returns a store on sn's master that the test closes when
// it ends.
func openSentinel(t *testing.T, sn *testredis.Sentinel) *Store {
	t.Helper()
	s, err := New(Options{Mode: Sentinel, Addrs: sn.Addrs(), MasterName: testredis.MasterName, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
