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
