package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// open returns a store on srv that the test closes when it ends.
func open(t testing.TB, srv *testredis.Server, opts ...func(*Options)) *Store {
	t.Helper()
	o := Options{Addrs: []string{srv.Addr()}, Timeout: time.Second}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// remoteOnly turns the store's local rejects off, for tests of what Redis
// itself answers.
func remoteOnly(o *Options) { o.NoLocalRejects = true }

// at puts the store's clock at t.
func at(t testing.TB, s *Store, when time.Time) {
	t.Helper()
	if err := s.SetNow(context.Background(), when); err != nil {
		t.Fatal(err)
	}
}

// keys lists every key of srv's current database.
func keys(t testing.TB, srv *testredis.Server) []string {
	t.Helper()
	var all []string
	cursor := "0"
	for {
		v, err := srv.DoValue(t, "SCAN", cursor, "COUNT", "1000")
		if err != nil {
			t.Fatal(err)
		}
		page := v.([]any)
		cursor = page[0].(string)
		for _, k := range page[1].([]any) {
			all = append(all, k.(string))
		}
		if cursor == "0" {
			return all
		}
	}
}

// checkExpiry fails t if a key of srv would never expire: every key the
// store writes has an expiry, on every path of every script, so a failure
// can never leave a counter that lives forever.
func checkExpiry(t testing.TB, srv *testredis.Server) {
	t.Helper()
	for _, k := range keys(t, srv) {
		v, err := srv.DoValue(t, "PTTL", k)
		if err != nil {
			t.Fatal(err)
		}
		if ttl := v.(int64); ttl == -1 {
			t.Errorf("key %q has no expiry", k)
		}
	}
}

// shanghai is a zone whose days start at 16:00 UTC, for zone-aligned
// windows.
func shanghai(t *testing.T) *time.Location { return zone(t, "Asia/Shanghai") }

func newYork(t *testing.T) *time.Location { return zone(t, "America/New_York") }

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// client is the rueidis client s decides with, for tests that make its
// calls themselves.
func client(t testing.TB, s *Store) rueidis.Client {
	t.Helper()
	c, err := s.get("decide")
	if err != nil {
		t.Fatal(err)
	}
	return c
}
