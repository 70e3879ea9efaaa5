package fleetbus

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// openStore returns a store on srv that the test closes when it ends.
func openStore(t testing.TB, srv *testredis.Server, opts ...func(*redisstore.Options)) *redisstore.Store {
	t.Helper()
	o := redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second}
	for _, f := range opts {
		f(&o)
	}
	s, err := redisstore.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// open returns the bus of a store on srv that the test closes when it
// ends.
func open(t testing.TB, srv *testredis.Server, opts ...func(*redisstore.Options)) *Bus {
	t.Helper()
	return New(openStore(t, srv, opts...))
}

// openCluster returns the bus of a store on cl that the test closes when
// it ends, once the store is connected.
func openCluster(t testing.TB, cl *testredis.Cluster) *Bus {
	t.Helper()
	s, err := redisstore.New(redisstore.Options{Mode: redisstore.Cluster, Addrs: cl.Addrs()[:1], Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b := New(s)
	if _, err := b.RedisTime(context.Background()); err != nil {
		t.Fatal(err)
	}
	return b
}

// at puts the bus's clock at when.
func at(t testing.TB, b *Bus, when time.Time) {
	t.Helper()
	if err := b.SetNow(context.Background(), when); err != nil {
		t.Fatal(err)
	}
}

// within retries f until it succeeds, for up to d: what real servers do in
// their own time (a subscription taking hold, an entry expiring) is waited
// for, never slept on.
func within(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
