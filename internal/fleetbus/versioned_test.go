package fleetbus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

// Every change makes one version, announced to every store of the prefix;
// what one store changed, another reads.
func TestVersionedSetChangesAndAnnounces(t *testing.T) {
	srv := testredis.Start(t)
	testVersionedSet(t, open(t, srv), open(t, srv))
}

func TestVersionedSetOnACluster(t *testing.T) {
	cl := testredis.StartCluster(t, 3)
	testVersionedSet(t, openCluster(t, cl), openCluster(t, cl))
}

func testVersionedSet(t *testing.T, a, b *Bus) {
	ctx := context.Background()
	var mu sync.Mutex
	var heard []string
	if err := b.Subscribe("overrides", func(m []byte) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, string(m))
	}); err != nil {
		t.Fatal(err)
	}
	set, err := b.Read(ctx, "overrides")
	if err != nil || set.Version != 0 || len(set.Entries) != 0 {
		t.Fatalf("empty set read as %+v, %v", set, err)
	}
	// The subscription is not synchronous: changes go on until one is
	// heard, and each is then heard in order.
	var first int64
	within(t, 5*time.Second, func() error {
		s, err := a.Put(ctx, "overrides", "api/user", []byte(`{"rate":"10/s"}`), 0)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(heard) == 0 {
			return errors.New("no announcement heard")
		}
		first = s.Version
		return nil
	})
	s, err := a.Put(ctx, "overrides", "global/all", []byte(`x`), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != first+1 || len(s.Entries) != 2 || string(s.Entries["api/user"].Value) != `{"rate":"10/s"}` ||
		!s.Entries["api/user"].Expires.IsZero() || s.Entries["global/all"].Expires.IsZero() {
		t.Fatalf("after a second put: %+v", s)
	}
	if left := time.Until(s.Entries["global/all"].Expires); left < 59*time.Minute || left > 61*time.Minute {
		t.Fatalf("an hour's entry expires in %v", left)
	}
	got, err := b.Read(ctx, "overrides")
	if err != nil || got.Epoch != s.Epoch || got.Version != s.Version || len(got.Entries) != 2 {
		t.Fatalf("the other store reads %+v, %v; want %+v", got, err, s)
	}
	epoch, v, err := b.SetVersion(ctx, "overrides")
	if err != nil || epoch != s.Epoch || v != s.Version {
		t.Fatalf("SetVersion = %q, %d, %v; want %q, %d", epoch, v, err, s.Epoch, s.Version)
	}
	r, err := a.Put(ctx, "overrides", "api/user", []byte(`{"rate":"20/s"}`), 0)
	if err != nil || string(r.Replaced) != `{"rate":"10/s"}` || r.Now.IsZero() || time.Since(r.Now).Abs() > time.Minute {
		t.Fatalf("a replacing put: %+v, %v", r, err)
	}
	s = r
	d, changed, err := b.Delete(ctx, "overrides", "api/user")
	if err != nil || !changed || d.Version != s.Version+1 || len(d.Entries) != 1 || string(d.Replaced) != `{"rate":"20/s"}` {
		t.Fatalf("delete: %+v, %v, %v", d, changed, err)
	}
	d2, changed, err := b.Delete(ctx, "overrides", "api/user")
	if err != nil || changed || d2.Version != d.Version {
		t.Fatalf("a second delete: %+v, %v, %v; want no change and version %d", d2, changed, err, d.Version)
	}
	within(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if last := heard[len(heard)-1]; last != fmt.Sprint(d.Version) {
			return fmt.Errorf("last announcement %q, want %d", last, d.Version)
		}
		return nil
	})
}

// An entry's ttl ends it for every reader, and the next change removes it.
func TestVersionedSetEntriesExpire(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	if _, err := s.Put(ctx, "overrides", "a", []byte("1"), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		set, err := s.Read(ctx, "overrides")
		if err != nil {
			return err
		}
		if len(set.Entries) != 0 {
			return fmt.Errorf("entries %v", set.Entries)
		}
		return nil
	})
	if _, err := s.Put(ctx, "overrides", "b", []byte("2"), 0); err != nil {
		t.Fatal(err)
	}
	if n := srv.Do(t, "HEXISTS", s.setKey("overrides"), "e:a"); n != "0" {
		t.Fatalf("the expired entry is still in the hash after a change: HEXISTS = %s", n)
	}
}

// A set that Redis lost comes back with another epoch, so that a reader
// holding version 5 of the old one does not take version 1 of the new one
// as older.
func TestVersionedSetNewEpochAfterLoss(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	a, err := s.Put(ctx, "overrides", "a", []byte("1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "DEL", s.setKey("overrides"))
	if e, v, err := s.SetVersion(ctx, "overrides"); err != nil || e != "" || v != 0 {
		t.Fatalf("a lost set: epoch %q, version %d, %v", e, v, err)
	}
	b, err := s.Put(ctx, "overrides", "a", []byte("1"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Epoch == a.Epoch || b.Version != 1 {
		t.Fatalf("made again: %+v; before %+v", b, a)
	}
}

// What someone else wrote in the hash is skipped, not trusted; the set's
// size is bounded; a store that cannot reach Redis says so.
func TestVersionedSetBounds(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	key := s.setKey("overrides")
	srv.Do(t, "HSET", key, "e:bad", "no-expiry", "e:neg", "-5 x", "other", "x")
	set, err := s.Read(ctx, "overrides")
	if err != nil || len(set.Entries) != 0 || set.Skipped != 2 {
		t.Fatalf("hostile entries read as %+v, %v", set, err)
	}
	srv.Do(t, "HSET", key, "_version", "many")
	if _, err := s.Read(ctx, "overrides"); !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("a version that is not a number: %v", err)
	}
	if _, err := s.Put(ctx, "overrides", "zz", []byte("x"), 0); !errors.Is(err, limit.ErrStoreUnavailable) || errors.Is(err, ErrUnknown) {
		t.Fatalf("a put with a version that is not a number: %v", err)
	}
	if n := srv.Do(t, "HEXISTS", key, "e:zz"); n != "0" {
		t.Fatal("a put refused for the version wrote its entry")
	}
	srv.Do(t, "DEL", key)
	if _, err := s.Put(ctx, "overrides", "a", []byte(strings.Repeat("x", MaxEntryBytes)), 0); err == nil {
		t.Fatal("an entry over MaxEntryBytes was taken")
	}
	for i := range MaxEntries {
		srv.Do(t, "HSET", key, fmt.Sprintf("e:%d", i), "0 x")
	}
	if _, err := s.Put(ctx, "overrides", "one-more", []byte("x"), 0); !errors.Is(err, ErrFull) {
		t.Fatalf("a put into a full set: %v", err)
	}
	if _, err := s.Put(ctx, "overrides", "7", []byte("y"), 0); err != nil {
		t.Fatalf("replacing an entry of a full set: %v", err)
	}
	if _, err := s.Put(ctx, "forget", "a", nil, 0); !errors.Is(err, ErrKind) {
		t.Fatalf("kind forget: %v", err)
	}
	srv.Stop()
	if _, err := s.Put(ctx, "overrides", "a", []byte("x"), 0); !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("put with Redis stopped: %v", err)
	}
	if _, _, err := s.SetVersion(ctx, "overrides"); !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("version with Redis stopped: %v", err)
	}
}

// A Redis restarted under an idle connection does not fail the next put:
// the operator's first change after the restart is made.
func TestVersionedSetPutAfterRestart(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	for i := range 5 {
		if _, err := s.Put(ctx, "overrides", "a", []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
		srv.Restart()
		set, err := s.Put(ctx, "overrides", "a", []byte("2"), 0)
		if err != nil {
			t.Fatalf("restart %d: the first put after it: %v", i, err)
		}
		if set.Version != 1 {
			t.Fatalf("restart %d: a set made again holds version %d", i, set.Version)
		}
	}
}
