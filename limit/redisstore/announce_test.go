package redisstore

import (
	"context"
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
		n, err := s.Announce(ctx, id, 300*time.Millisecond)
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
	if n, err := s.Announce(ctx, "d", time.Second); err != nil || n != 1 {
		t.Fatalf("after the others expired: %d, %v; want 1", n, err)
	}
}
