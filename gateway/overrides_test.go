package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

const overrideConfig = `
admin: {listen: ""}
store: STORE
global_limits:
  - {name: all, key: [global], rate: 100000/s}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 2/1h, align: first}
      - {name: burst, key: [route], algorithm: token_bucket, rate: 100000/s, burst: 50000}
      - {name: flight, key: [route], algorithm: concurrency, limit: 100}
`

func overrideHarness(t *testing.T, store string, up *backend) *harness {
	return newHarness(t, strings.Replace(overrideConfig, "STORE", store, 1), up)
}

func bptr(b bool) *bool { return &b }

// admits counts how many of n requests of user the gateway admits.
func admits(h *harness, user string, n int) int {
	ok := 0
	for range n {
		resp := h.do("GET", "/api", map[string]string{"X-User-Id": user}, nil)
		drain(resp)
		if resp.StatusCode == http.StatusOK {
			ok++
		}
	}
	return ok
}

func setOverride(t *testing.T, h *harness, route, name string, req OverrideRequest) OverrideStatus {
	t.Helper()
	st, err := h.gw.SetOverride(context.Background(), route, name, req)
	if err != nil {
		t.Fatalf("SetOverride %s/%s: %v", route, name, err)
	}
	return st
}

// An override changes the running limit and keeps its counter, as a
// reload with another rate does; shadow and enabled: false stop it from
// rejecting; removing it gives the file's limit back.
func TestOverrideChangesTheRunningLimit(t *testing.T) {
	t.Parallel()
	h := overrideHarness(t, "{type: memory}", newBackend(t, nil))
	if n := admits(h, "u1", 3); n != 2 {
		t.Fatalf("the file's 2/1h admitted %d of 3", n)
	}
	st := setOverride(t, h, "api", "user", OverrideRequest{Change: OverrideChange{Rate: "5/h"}, Reason: "sale", By: "alice"})
	if !st.Applied || st.Change.Rate != "5/h" || st.File.Rate != "2/h" || st.By != "alice" || st.Reason != "sale" {
		t.Fatalf("override as listed: %+v", st)
	}
	// Two of 5 used: three more.
	if n := admits(h, "u1", 5); n != 3 {
		t.Fatalf("after raising to 5/1h, a user who had used 2 was admitted %d more times; want 3", n)
	}
	if got := h.gw.Config().Routes[0].Limits[0].Rate.String(); got != "2/h" {
		t.Fatalf("Config shows %s: it is the file's", got)
	}
	setOverride(t, h, "api", "user", OverrideRequest{Change: OverrideChange{Shadow: bptr(true)}})
	if n := admits(h, "u1", 3); n != 3 {
		t.Fatalf("a shadow override admitted %d of 3", n)
	}
	setOverride(t, h, "api", "user", OverrideRequest{Change: OverrideChange{Enabled: bptr(false)}})
	resp := h.do("GET", "/api", map[string]string{"X-User-Id": "u1"}, nil)
	drain(resp)
	if resp.StatusCode != http.StatusOK || strings.Contains(resp.Header.Get("RateLimit-Policy"), "user") {
		t.Fatalf("a disabled limit: status %d, policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	}
	o := h.gw.Overrides()
	if o.Scope != ScopeInstance || o.Version != 3 || len(o.Overrides) != 1 {
		t.Fatalf("overrides: %+v", o)
	}
	if _, _, err := h.gw.RemoveOverride(context.Background(), "api", "user"); err != nil {
		t.Fatal(err)
	}
	if n := admits(h, "u1", 1); n != 0 {
		t.Fatal("the file's limit is back, and its counter is spent, yet it admitted")
	}
	if _, _, err := h.gw.RemoveOverride(context.Background(), "api", "user"); !errors.Is(err, ErrNoOverride) {
		t.Fatalf("removing it twice: %v", err)
	}
	// The instance's own changes are logged by the admin API's handler
	// (admin's tests); the gateway logs those it learns of.
	if strings.Contains(h.log.String(), `"msg":"runtime override in force"`) {
		t.Errorf("the gateway logged its own change:\n%s", h.log)
	}
}

// A token bucket's burst follows a new rate when it was the rate's count,
// and is kept otherwise; a concurrency limit takes a count; a global limit
// is named under route global.
func TestOverrideBurstAndKinds(t *testing.T) {
	t.Parallel()
	h := overrideHarness(t, "{type: memory}", newBackend(t, nil))
	rule := func(route, name string) *limit.Rule {
		for _, r := range h.gw.gen.Load().routes {
			if r.id != route {
				continue
			}
			for _, l := range r.limits {
				if l.Name == name {
					return l.Rule
				}
			}
		}
		return nil
	}
	setOverride(t, h, "api", "burst", OverrideRequest{Change: OverrideChange{Rate: "10/s"}})
	if r := rule("api", "burst"); r.Rate.Count != 10 || r.Burst != 50000 {
		t.Fatalf("burst 50000 written apart from the rate: rule %v burst %d", r.Rate, r.Burst)
	}
	setOverride(t, h, "api", "burst", OverrideRequest{Change: OverrideChange{Rate: "10/s", Burst: 20}})
	if r := rule("api", "burst"); r.Burst != 20 {
		t.Fatalf("burst given: %d", r.Burst)
	}
	setOverride(t, h, "api", "flight", OverrideRequest{Change: OverrideChange{Limit: 7}})
	if r := rule("api", "flight"); r.Rate.Count != 7 || r.Algorithm != limit.Concurrency {
		t.Fatalf("concurrency: %+v", r.Rate)
	}
	setOverride(t, h, "global", "all", OverrideRequest{Change: OverrideChange{Rate: "3/h"}})
	if r := rule("api", "all"); r.Rate.Count != 3 {
		t.Fatalf("global limit: %v", r.Rate)
	}
	if n := admits(h, "u9", 4); n != 2 {
		// user 2/1h binds first; then all 3/1h.
		t.Fatalf("admitted %d", n)
	}
	if n := admits(h, "u8", 2); n != 1 {
		t.Fatalf("the global override 3/1h let %d of 2 more through after 2", n)
	}
}

// Every value a limit cannot take is refused with its field, and nothing
// changes.
func TestOverrideRefusals(t *testing.T) {
	t.Parallel()
	h := overrideHarness(t, "{type: memory}", newBackend(t, nil))
	for _, tc := range []struct {
		route, name string
		req         OverrideRequest
		field       string
	}{
		{"api", "user", OverrideRequest{}, "override"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Rate: "0/s"}}, "rate"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Rate: "fast"}}, "rate"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Burst: 5}}, "burst"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Limit: 5}}, "limit"},
		{"api", "flight", OverrideRequest{Change: OverrideChange{Rate: "5/s"}}, "rate"},
		{"api", "burst", OverrideRequest{Change: OverrideChange{Rate: "2000000000/s"}}, "rate"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Shadow: bptr(true)}, TTL: 500 * time.Millisecond}, "ttl"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Shadow: bptr(true)}, TTL: 31 * 24 * time.Hour}, "ttl"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Shadow: bptr(true)}, Reason: "a\nb"}, "reason"},
		{"api", "user", OverrideRequest{Change: OverrideChange{Shadow: bptr(true)}, By: strings.Repeat("x", 65)}, "by"},
	} {
		_, err := h.gw.SetOverride(context.Background(), tc.route, tc.name, tc.req)
		var oe *OverrideError
		if !errors.As(err, &oe) || oe.Field != tc.field {
			t.Errorf("%s/%s %+v: %v; want an error for field %s", tc.route, tc.name, tc.req, err, tc.field)
		}
	}
	for _, target := range [][2]string{{"api", "nope"}, {"nope", "user"}, {"global", "user"}} {
		_, err := h.gw.SetOverride(context.Background(), target[0], target[1], OverrideRequest{Change: OverrideChange{Shadow: bptr(true)}})
		if !errors.Is(err, ErrNoLimit) {
			t.Errorf("%s/%s: %v; want ErrNoLimit", target[0], target[1], err)
		}
	}
	if o := h.gw.Overrides(); o.Version != 0 || len(o.Overrides) != 0 {
		t.Fatalf("refusals changed the set: %+v", o)
	}
}

// A reload keeps the overrides; one whose limit the reload removes is
// dropped and logged.
func TestOverrideOutlivesReload(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := overrideHarness(t, "{type: memory}", up)
	setOverride(t, h, "api", "user", OverrideRequest{Change: OverrideChange{Rate: "5/h"}})
	setOverride(t, h, "api", "burst", OverrideRequest{Change: OverrideChange{Enabled: bptr(false)}})
	reload := func(yaml string) {
		t.Helper()
		cfg, err := config.Parse("test.yaml", []byte(strings.ReplaceAll(strings.Replace(yaml, "STORE", "{type: memory}", 1), "{{UP}}", up.URL)))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.gw.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	reload(strings.Replace(overrideConfig, "rate: 2/1h", "rate: 3/1h", 1))
	if n := admits(h, "u1", 6); n != 5 {
		t.Fatalf("after a reload that changed the file's rate, the override's 5/1h admitted %d of 6", n)
	}
	reload(strings.Replace(overrideConfig, "      - {name: burst, key: [route], algorithm: token_bucket, rate: 100000/s, burst: 50000}\n", "", 1))
	o := h.gw.Overrides()
	if len(o.Overrides) != 1 || o.Overrides[0].Limit != "user" {
		t.Fatalf("after the reload that removed burst: %+v", o)
	}
	if !strings.Contains(h.log.String(), `"msg":"runtime override dropped: the config no longer has its limit","route":"api","limit":"burst"`) {
		t.Fatalf("the drop is not logged:\n%s", h.log)
	}
}

func TestOverrideTTLEnds(t *testing.T) {
	t.Parallel()
	h := overrideHarness(t, "{type: memory}", newBackend(t, nil))
	setOverride(t, h, "api", "user", OverrideRequest{Change: OverrideChange{Shadow: bptr(true)}, TTL: time.Second})
	if left := h.gw.Overrides().Overrides[0].TTLLeft; left <= 0 || left > 1 {
		t.Fatalf("ttl_left %v", left)
	}
	// A shadow limit counts: the requests wait for the end, which the
	// log says once the generation without the override is in.
	within(t, 10*time.Second, func() error {
		if o := h.gw.Overrides(); len(o.Overrides) != 0 {
			return fmt.Errorf("still in force: %+v", o.Overrides)
		}
		if !strings.Contains(h.log.String(), `"msg":"runtime override expired"`) {
			return errors.New("the end is not logged")
		}
		return nil
	})
	if n := admits(h, "u1", 3); n != 2 {
		t.Fatalf("the file's 2/1h admitted %d of 3", n)
	}
	if !strings.Contains(h.log.String(), `"msg":"runtime override expired"`) {
		t.Fatalf("the end is not logged:\n%s", h.log)
	}
}

// redisOverrideFleet is three gateways on one Redis.
func redisOverrideFleet(t *testing.T, srv *testredis.Server, up *backend) []*harness {
	return overrideFleet(t, fmt.Sprintf(`{type: redis, redis: {addrs: ["%s"], timeout: 500ms}}`, srv.Addr()), up)
}

func overrideFleet(t *testing.T, store string, up *backend) []*harness {
	var hs []*harness
	for range 3 {
		hs = append(hs, overrideHarness(t, store, up))
	}
	return hs
}

// everyInstance waits until f holds on every instance.
func everyInstance(t *testing.T, hs []*harness, f func(h *harness) error) {
	t.Helper()
	within(t, 10*time.Second, func() error {
		for i, h := range hs {
			if err := f(h); err != nil {
				return fmt.Errorf("instance %d: %v", i, err)
			}
		}
		return nil
	})
}

func hasOverride(route, name, rate string) func(h *harness) error {
	return func(h *harness) error {
		o := h.gw.Overrides()
		for _, st := range o.Overrides {
			if st.Route == route && st.Limit == name && st.Change.Rate == rate && st.Applied {
				return nil
			}
		}
		return fmt.Errorf("version %d: %+v", o.Version, o.Overrides)
	}
}

// An override set on one instance is in force on all three; the local
// rejects of a user it raises go; an instance that starts later comes up
// with it; removing it reaches all. Once on one Redis, once on a 3-master
// cluster.
func TestOverrideReachesTheFleet(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		srv := testredis.Start(t)
		overrideReachesTheFleet(t, fmt.Sprintf(`{type: redis, redis: {addrs: ["%s"], timeout: 500ms}}`, srv.Addr()))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testredis.StartCluster(t, 3)
		overrideReachesTheFleet(t, fmt.Sprintf(`{type: redis, redis: {mode: cluster, addrs: ["%s"], timeout: 1s}}`, strings.Join(cl.Addrs(), `", "`)))
	})
}

func overrideReachesTheFleet(t *testing.T, store string) {
	up := newBackend(t, nil)
	hs := overrideFleet(t, store, up)
	// u1 is spent, and b and c remember it in their local rejects.
	if n := admits(hs[0], "u1", 2); n != 2 {
		t.Fatalf("admitted %d of 2", n)
	}
	for _, h := range hs[1:] {
		if n := admits(h, "u1", 2); n != 0 {
			t.Fatalf("admitted %d of a spent user", n)
		}
	}
	st := setOverride(t, hs[0], "api", "user", OverrideRequest{Change: OverrideChange{Rate: "4/h"}, By: "alice"})
	if st.Applied != true {
		t.Fatalf("%+v", st)
	}
	everyInstance(t, hs, hasOverride("api", "user", "4/h"))
	if n := admits(hs[2], "u1", 3); n != 2 {
		t.Fatalf("after the fleet raised u1's limit to 4, instance c admitted %d of 3; want 2", n)
	}
	late := overrideHarness(t, store, up)
	if err := hasOverride("api", "user", "4/h")(late); err != nil {
		t.Fatalf("an instance started after the override: %v", err)
	}
	hs = append(hs, late)
	version := hs[0].gw.Overrides().Version
	everyInstance(t, hs, func(h *harness) error {
		if v := h.gw.Overrides().Version; v != version {
			return fmt.Errorf("version %d, want %d", v, version)
		}
		return nil
	})
	if _, _, err := hs[1].gw.RemoveOverride(context.Background(), "api", "user"); err != nil {
		t.Fatal(err)
	}
	everyInstance(t, hs, func(h *harness) error {
		if o := h.gw.Overrides(); len(o.Overrides) != 0 || o.Scope != ScopeFleet {
			return fmt.Errorf("%+v", o)
		}
		return nil
	})
	version = hs[0].gw.Overrides().Version
	within(t, 10*time.Second, func() error {
		f, err := hs[0].gw.Fleet(context.Background())
		if err != nil {
			return err
		}
		for _, i := range f.Instances {
			if i.OverridesVersion == nil || *i.OverridesVersion != version {
				return fmt.Errorf("instance %s announces overrides version %v, want %d", i.ID, i.OverridesVersion, version)
			}
		}
		if len(f.Instances) != 4 || !f.Agree.Overrides {
			return fmt.Errorf("fleet %+v", f)
		}
		return nil
	})
}

// Redis stopped: the change fails with an error that says so, and no
// instance changes; once Redis is back, a set it lost is the fleet's.
func TestOverrideStoreDown(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	hs := redisOverrideFleet(t, srv, newBackend(t, nil))
	setOverride(t, hs[0], "api", "user", OverrideRequest{Change: OverrideChange{Rate: "4/h"}})
	everyInstance(t, hs, hasOverride("api", "user", "4/h"))
	srv.Stop()
	_, err := hs[0].gw.SetOverride(context.Background(), "api", "user", OverrideRequest{Change: OverrideChange{Rate: "9/h"}})
	if !errors.Is(err, limit.ErrStoreUnavailable) {
		t.Fatalf("with Redis stopped: %v", err)
	}
	for i, h := range hs {
		if err := hasOverride("api", "user", "4/h")(h); err != nil {
			t.Fatalf("instance %d changed while the change failed: %v", i, err)
		}
	}
	// Restarted empty: its set is another, and every instance takes it.
	srv.Restart()
	everyInstance(t, hs, func(h *harness) error {
		if o := h.gw.Overrides(); len(o.Overrides) != 0 {
			return fmt.Errorf("%+v", o.Overrides)
		}
		return nil
	})
	for i, h := range hs {
		if !strings.Contains(h.log.String(), `"msg":"runtime overrides: the store holds another set`) {
			t.Errorf("instance %d does not say the store lost its set:\n%s", i, h.log)
		}
	}
	setOverride(t, hs[1], "api", "user", OverrideRequest{Change: OverrideChange{Rate: "6/h"}})
	everyInstance(t, hs, hasOverride("api", "user", "6/h"))
}

// Two operators change one limit at once on two instances: every instance
// ends on the last version Redis made, and holds what it says.
func TestOverrideConcurrentOperators(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	hs := redisOverrideFleet(t, srv, newBackend(t, nil))
	var wg sync.WaitGroup
	for op := range 2 {
		wg.Go(func() {
			for i := range 20 {
				rate := fmt.Sprintf("%d/h", 10+op*100+i)
				if _, err := hs[op].gw.SetOverride(context.Background(), "api", "user", OverrideRequest{Change: OverrideChange{Rate: rate}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if v := srv.Do(t, "HGET", "{fg:overrides}:set", "_version"); v != "40" {
		t.Fatalf("Redis holds version %s after 40 changes", v)
	}
	last := hs[2].gw.Overrides()
	everyInstance(t, hs, func(h *harness) error {
		o := h.gw.Overrides()
		if o.Version != 40 || len(o.Overrides) != 1 {
			return fmt.Errorf("%+v", o)
		}
		last = o
		return nil
	})
	for _, h := range hs {
		if o := h.gw.Overrides(); o.Overrides[0].Change != last.Overrides[0].Change {
			t.Fatalf("instances at one version hold different overrides: %+v, %+v", o.Overrides[0], last.Overrides[0])
		}
	}
}

// What others write to the channel or the hash is counted and skipped.
func TestOverrideHostileStore(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	hs := redisOverrideFleet(t, srv, newBackend(t, nil))
	h := hs[0]
	within(t, 10*time.Second, func() error {
		srv.Do(t, "PUBLISH", "fg:overrides", "not a version")
		if n := counterValue(t, h, "gateway_fleet_messages_ignored_total", map[string]string{"reason": "malformed"}); n == 0 {
			return errors.New("a message that is not a version was not counted")
		}
		return nil
	})
	srv.Do(t, "HSET", "{fg:overrides}:set", "e:api/user", `0 {"route":"api","limit":"other"}`, "e:api/burst", `0 {"route":"api","limit":"burst","override":{"rate":"1/s","burst":-1}}`, "_version", "77")
	everyInstance(t, hs, func(h *harness) error {
		if o := h.gw.Overrides(); o.Version != 77 || len(o.Overrides) != 0 {
			return fmt.Errorf("%+v", o)
		}
		return nil
	})
	if n := admits(h, "u1", 3); n != 2 {
		t.Fatalf("the file's limit admitted %d of 3", n)
	}
}

func TestOverrideTTLEndsOnEveryInstance(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	hs := redisOverrideFleet(t, srv, newBackend(t, nil))
	setOverride(t, hs[0], "api", "user", OverrideRequest{Change: OverrideChange{Rate: "4/h"}, TTL: time.Second})
	everyInstance(t, hs, hasOverride("api", "user", "4/h"))
	everyInstance(t, hs, func(h *harness) error {
		if o := h.gw.Overrides(); len(o.Overrides) != 0 {
			return fmt.Errorf("%+v", o.Overrides)
		}
		if n := len(h.gw.gen.Load().routes[0].limits); n != 4 {
			return fmt.Errorf("%d limits", n)
		}
		if r := h.gw.gen.Load().routes[0].limits[1].Rule; r.Rate.Count != 2 {
			return fmt.Errorf("rate %v", r.Rate)
		}
		return nil
	})
}

// A reload that removes an overridden limit on one instance of a fleet
// (a canary, a rolling deploy) leaves the override to the fleet: the
// instance says it cannot apply it, and the others keep it.
func TestOverrideOfARemovedLimitStaysWithTheFleet(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	store := fmt.Sprintf(`{type: redis, redis: {addrs: ["%s"], timeout: 500ms}}`, srv.Addr())
	hs := overrideFleet(t, store, up)
	setOverride(t, hs[0], "api", "burst", OverrideRequest{Change: OverrideChange{Enabled: bptr(false)}})
	setOverride(t, hs[0], "api", "user", OverrideRequest{Change: OverrideChange{Rate: "4/h"}})
	everyInstance(t, hs, func(h *harness) error {
		if n := len(h.gw.Overrides().Overrides); n != 2 {
			return fmt.Errorf("%d overrides", n)
		}
		return nil
	})
	yaml := strings.Replace(strings.Replace(overrideConfig, "STORE", store, 1),
		"      - {name: burst, key: [route], algorithm: token_bucket, rate: 100000/s, burst: 50000}\n", "", 1)
	cfg, err := config.Parse("test.yaml", []byte(strings.ReplaceAll(yaml, "{{UP}}", up.URL)))
	if err != nil {
		t.Fatal(err)
	}
	if err := hs[1].gw.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	for _, st := range hs[1].gw.Overrides().Overrides {
		if st.Applied != (st.Limit == "user") {
			t.Errorf("after the reload: %+v", st)
		}
	}
	if !strings.Contains(hs[1].log.String(), `"msg":"runtime override not applied here","route":"api","limit":"burst"`) {
		t.Fatalf("not logged:\n%s", hs[1].log)
	}
	if n := gaugeValue(t, hs[1], "gateway_overrides", ""); n != 1 {
		t.Errorf("gateway_overrides = %v, want 1 applied", n)
	}
	if n := srv.Do(t, "HEXISTS", "{fg:overrides}:set", "e:api/burst"); n != "1" {
		t.Fatal("one instance's reload took the override from the fleet")
	}
	for _, h := range []*harness{hs[0], hs[2]} {
		if o := h.gw.Overrides(); len(o.Overrides) != 2 || !o.Overrides[0].Applied {
			t.Fatalf("another instance: %+v", o.Overrides)
		}
	}
}

// An override's end goes by the Redis clock: an instance whose own clock
// is two minutes ahead still applies a 60 s override, and ends it with the
// others.
func TestOverrideTTLByTheRedisClock(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	store := fmt.Sprintf(`{type: redis, redis: {addrs: ["%s"], timeout: 500ms}}`, srv.Addr())
	hs := overrideFleet(t, store, up)
	hs[1].clock.Step(2 * time.Minute)
	setOverride(t, hs[0], "api", "user", OverrideRequest{Change: OverrideChange{Rate: "4/h"}, TTL: time.Minute})
	everyInstance(t, hs, hasOverride("api", "user", "4/h"))
	if left := hs[1].gw.Overrides().Overrides[0].TTLLeft; left < 55 || left > 60 {
		t.Fatalf("the instance ahead sees %v s left", left)
	}
}

// An override sent to a Redis that stalls may be made when Redis runs
// again: the call says it does not know, and the instances converge on
// what Redis made.
func TestOverrideToAStalledRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	hs := redisOverrideFleet(t, srv, newBackend(t, nil))
	srv.Pause()
	_, err := hs[0].gw.SetOverride(context.Background(), "api", "user", OverrideRequest{Change: OverrideChange{Rate: "4/h"}})
	srv.Resume()
	if !errors.Is(err, limit.ErrStoreUnavailable) || !strings.Contains(err.Error(), "may or may not") {
		t.Fatalf("an override to a stalled Redis: %v", err)
	}
	everyInstance(t, hs, hasOverride("api", "user", "4/h"))
}
