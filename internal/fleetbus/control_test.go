package fleetbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// A message published by one store reaches every store of the prefix, the
// publisher's own included, and none of another prefix.
func TestControlReachesEveryStoreOfThePrefix(t *testing.T) {
	srv := testredis.Start(t)
	a, b := open(t, srv), open(t, srv)
	other := open(t, srv, func(o *redisstore.Options) { o.Prefix = "other:" })
	var mu sync.Mutex
	got := map[string][]string{}
	for name, s := range map[string]*Bus{"a": a, "b": b, "other": other} {
		if err := s.Subscribe("control", func(m []byte) {
			mu.Lock()
			defer mu.Unlock()
			got[name] = append(got[name], string(m))
		}); err != nil {
			t.Fatal(err)
		}
	}
	within(t, 5*time.Second, func() error {
		v, err := srv.DoValue(t, "PUBSUB", "NUMSUB", redisstore.DefaultPrefix+"control", "other:control")
		if err != nil {
			return err
		}
		if n, m := v.([]any)[1].(int64), v.([]any)[3].(int64); n != 2 || m != 1 {
			return fmt.Errorf("%d and %d subscribers, want 2 and 1", n, m)
		}
		return nil
	})
	if err := a.Publish(context.Background(), "control", []byte("hello\x00")); err != nil {
		t.Fatal(err)
	}
	within(t, 2*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got["a"]) != 1 || len(got["b"]) != 1 || got["a"][0] != "hello\x00" || got["b"][0] != "hello\x00" {
			return fmt.Errorf("received %q", got)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got["other"]) != 0 {
		t.Fatalf("another prefix received %q", got["other"])
	}
}

func TestControlRefusesBadKindsAndClosedStores(t *testing.T) {
	srv := testredis.Start(t)
	store := openStore(t, srv)
	s := New(store)
	for _, kind := range []string{"", "forget", string(make([]byte, 65))} {
		if err := s.Publish(context.Background(), kind, nil); !errors.Is(err, ErrKind) {
			t.Errorf("Publish(%q): %v, want ErrKind", kind, err)
		}
		if err := s.Subscribe(kind, func([]byte) {}); !errors.Is(err, ErrKind) {
			t.Errorf("Subscribe(%q): %v, want ErrKind", kind, err)
		}
	}
	srv.Stop()
	if err := s.Publish(context.Background(), "control", []byte("x")); !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Errorf("Publish with Redis stopped: %v, want ErrStoreUnavailable", err)
	}
	store.Close()
	if err := s.Subscribe("control", func([]byte) {}); !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Errorf("Subscribe after Close: %v, want ErrStoreUnavailable", err)
	}
}
