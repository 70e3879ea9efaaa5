package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

func fleetGateway(t *testing.T, yaml, version, digest string) *Gateway {
	t.Helper()
	gw, err := New(mustParse(t, yaml), Options{Logger: discardLogger(), Version: version, ConfigDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return gw
}

func fleetIDs(f Fleet) []string {
	var ids []string
	for _, i := range f.Instances {
		ids = append(ids, i.ID)
	}
	return ids
}

// Three instances on one Redis each list all three; the one on another
// config file shows as disagreeing; what someone else planted in the keys
// is skipped and counted; an instance that stops announcing drops out
// after its announcement's ttl.
func TestFleetView(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	cfg := fmt.Sprintf("admin: {listen: \"\"}\nstore: {type: redis, redis: {addrs: [%q], timeout: 2s}}\n", srv.Addr()) + fleetRoutes
	gws := []*Gateway{
		fleetGateway(t, cfg, "v1.2.0", "aaaa"),
		fleetGateway(t, cfg, "v1.2.0", "bbbb"),
		fleetGateway(t, cfg, "v1.2.0", "aaaa"),
	}
	var want []string
	for _, gw := range gws {
		want = append(want, gw.ids.Prefix())
	}
	slices.Sort(want)
	ctx := context.Background()
	for i, gw := range gws {
		within(t, 5*time.Second, func() error {
			f, err := gw.Fleet(ctx)
			if err != nil {
				return err
			}
			if got := fleetIDs(f); !slices.Equal(got, want) {
				return fmt.Errorf("instance %d lists %q, want %q", i, got, want)
			}
			return nil
		})
	}

	// Entries planted by someone else: an id without info, info that is
	// not floodgate's, a huge entry, an id that is not alive.
	far := fmt.Sprint(time.Now().Add(time.Hour).UnixMicro())
	srv.Do(t, "ZADD", "fg:instances", far, "bare", far, "alien", far, "huge", far, strings.Repeat("i", 5000))
	srv.Do(t, "HSET", "{fg:instances}:info", "alien", `1 {"floodgate":2,"version":"x"}`,
		"huge", "1 "+strings.Repeat("{", 1<<20), "dead", `1 {"floodgate":1}`)

	f, err := gws[0].Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := fleetIDs(f); !slices.Equal(got, want) {
		t.Fatalf("with planted entries: %q, want %q", got, want)
	}
	if f.Skipped != 4 {
		t.Errorf("skipped %d, want 4", f.Skipped)
	}
	if f.Agree.Config || !f.Agree.Version || !f.Agree.Overrides {
		t.Errorf("agree %+v, want config false, version and overrides true", f.Agree)
	}
	if !slices.Equal(f.Disagreeing, []string{gws[1].ids.Prefix()}) {
		t.Errorf("disagreeing %q, want %q", f.Disagreeing, gws[1].ids.Prefix())
	}
	for _, i := range f.Instances {
		if i.Self != (i.ID == gws[0].ids.Prefix()) || i.Version != "v1.2.0" || i.Store != "ok" ||
			i.OverridesVersion == nil || *i.OverridesVersion != 0 || i.LastSeen.IsZero() || i.Started.IsZero() || i.Uptime < 0 {
			t.Errorf("instance %+v", i)
		}
	}
	b, _ := json.Marshal(f.Instances[0])
	// The fleet's set is read at start: none yet, version 0.
	if !strings.Contains(string(b), `"overrides_version":0`) {
		t.Errorf("instance as JSON: %s", b)
	}

	// An instance that stops announcing (one that crashed) is gone once
	// its announcement lasted its ttl.
	store, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	info, _ := json.Marshal(announcement{Floodgate: 1, Version: "v1.2.0", Config: "aaaa", Store: "ok", Started: time.Now()})
	if _, err := fleetbus.New(store).Announce(ctx, "crashed", info, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if f, err = gws[2].Fleet(ctx); err != nil || !slices.Contains(fleetIDs(f), "crashed") {
		t.Fatalf("after the announcement: %q, %v", fleetIDs(f), err)
	}
	within(t, 5*time.Second, func() error {
		f, err := gws[2].Fleet(ctx)
		if err != nil {
			return err
		}
		if slices.Contains(fleetIDs(f), "crashed") {
			return fmt.Errorf("crashed still listed: %q", fleetIDs(f))
		}
		return nil
	})

	// An instance that stops leaves at once.
	gws[1].Close()
	f, err = gws[0].Fleet(ctx)
	if err != nil || slices.Contains(fleetIDs(f), gws[1].ids.Prefix()) || len(f.Instances) != 2 {
		t.Fatalf("after an instance closed: %q, %v", fleetIDs(f), err)
	}
}

// With the memory store the fleet is the one instance.
func TestFleetViewOfTheMemoryStore(t *testing.T) {
	t.Parallel()
	gw := fleetGateway(t, "admin: {listen: \"\"}\n"+fleetRoutes, "v1", "cafe")
	f, err := gw.Fleet(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Instances) != 1 || !f.Agree.Config || !f.Agree.Version || len(f.Disagreeing) != 0 {
		t.Fatalf("fleet %+v", f)
	}
	if i := f.Instances[0]; !i.Self || i.ID != gw.ids.Prefix() || i.Version != "v1" || i.Config != "cafe" || i.Store != "ok" {
		t.Fatalf("instance %+v", i)
	}
	gw.SetConfigDigest("beef")
	if f, _ = gw.Fleet(context.Background()); f.Instances[0].Config != "beef" {
		t.Fatalf("after SetConfigDigest: %+v", f.Instances[0])
	}
}

func TestMajority(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		configs     string
		disagreeing string
	}{
		{"", ""},
		{"a", ""},
		{"a a b", "2"},
		{"b a", "0"}, // a tie goes to the least value, the same on every instance
		{"b b a a c", "0 1 4"},
	} {
		var is []Instance
		for n, cfg := range strings.Fields(c.configs) {
			is = append(is, Instance{ID: fmt.Sprint(n), Config: cfg})
		}
		f := fleetOf(is, 0)
		if got := strings.Join(f.Disagreeing, " "); got != c.disagreeing || f.Agree.Config != (got == "") || !f.Agree.Version {
			t.Errorf("%q: disagreeing %q, agree %+v; want %q", c.configs, got, f.Agree, c.disagreeing)
		}
	}
}
