package fleetbus

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

func TestAnnounce(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	for i, id := range []string{"a", "b", "a", "c"} {
		n, err := s.Announce(ctx, id, nil, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{1, 2, 2, 3}[i]; n != want {
			t.Fatalf("announcement %d (%s): %d alive, want %d", i, id, n, want)
		}
	}
	if ttl := srv.Do(t, "PTTL", "fg:instances"); strings.HasPrefix(ttl, "-") {
		t.Fatalf("instances set has PTTL %s", ttl)
	}
	time.Sleep(350 * time.Millisecond) // announcements expire in Redis time
	if n, err := s.Announce(ctx, "d", nil, time.Second); err != nil || n != 1 {
		t.Fatalf("after the others expired: %d, %v; want 1", n, err)
	}
}

// Instances reads what the live instances announced, and what someone
// else planted in the keys costs a count, not the answer.
func TestInstances(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := s.Announce(ctx, id, []byte(`{"id":"`+id+`"}`), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Announce(ctx, "short", []byte(`{}`), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Announce(ctx, "bare", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	far := strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)
	srv.Do(t, "ZADD", "fg:instances", far, strings.Repeat("x", MaxInfo+1))
	srv.Do(t, "ZADD", "fg:instances", far, "huge", far, "garbled")
	srv.Do(t, "HSET", "{fg:instances}:info", "huge", "1 "+strings.Repeat("y", MaxInfo), "garbled", "no-time", "dead", "1 {}")
	as, now, skipped, err := s.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 3 {
		t.Errorf("skipped %d, want 3 (long id, huge entry, garbled entry)", skipped)
	}
	got := map[string]Announcement{}
	for _, a := range as {
		got[a.ID] = a
	}
	if len(got) != 4 || got["a"].Info == nil || string(got["b"].Info) != `{"id":"b"}` || got["bare"].Info != nil {
		t.Fatalf("instances: %+v", as)
	}
	if a := got["a"]; a.Seen.After(now) || now.Sub(a.Seen) > time.Minute || a.Expires.Sub(a.Seen) != time.Minute {
		t.Errorf("a seen %v, expires %v, now %v", a.Seen, a.Expires, now)
	}
	time.Sleep(350 * time.Millisecond) // "short" expires in Redis time
	if as, _, _, err = s.Instances(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.ID == "short" {
			t.Fatalf("expired instance still listed: %+v", a)
		}
	}
	// The next announcement drops the info of the dead.
	if _, err := s.Announce(ctx, "a", []byte(`{}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := srv.Do(t, "HEXISTS", "{fg:instances}:info", "short"); v != "0" {
		t.Fatalf("HEXISTS of the expired instance's info: %s", v)
	}
	if _, err := s.Announce(ctx, "a", make([]byte, MaxInfo+1), time.Minute); err == nil {
		t.Fatal("an announcement over MaxInfo was written")
	}
}

// A short announcement does not end a longer one's with the keys, and a
// withdrawn instance is gone at once.
func TestAnnounceShortAndWithdraw(t *testing.T) {
	srv := testredis.Start(t)
	s := open(t, srv)
	ctx := context.Background()
	if _, err := s.Announce(ctx, "long", []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Announce(ctx, "short", []byte("y"), 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	as, _, _, err := s.Instances(ctx)
	if err != nil || len(as) != 1 || as[0].ID != "long" || string(as[0].Info) != "x" {
		t.Fatalf("after the short one ended: %+v, %v; want the long one, with its info", as, err)
	}
	if err := s.Withdraw(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	if as, _, _, err = s.Instances(ctx); err != nil || len(as) != 0 {
		t.Fatalf("after the withdrawal: %+v, %v", as, err)
	}
	if n := srv.Do(t, "HEXISTS", "{fg:instances}:info", "long"); n != "0" {
		t.Fatalf("the info of a withdrawn instance stays: HEXISTS %s", n)
	}
}
