package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
)

const fleetRoutes = `
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["http://127.0.0.1:1"]}
    breaker: {enabled: true}
  - id: cart
    match: {path: /cart}
    upstream: {targets: ["http://127.0.0.1:1"]}
    breaker: {enabled: true}
`

// With the memory store the instance is the fleet's only member: fleet is
// refused, not taken for instance.
func TestScopeOfTheMemoryStore(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "admin: {listen: \"\"}\n"+fleetRoutes, nil)
	if s, err := h.gw.Scope(""); s != ScopeInstance || err != nil {
		t.Fatalf(`Scope(""): %q, %v`, s, err)
	}
	for _, s := range []string{"fleet", "FLEET", "everywhere"} {
		if _, err := h.gw.Scope(s); !errors.Is(err, ErrScope) {
			t.Errorf("Scope(%q): %v, want ErrScope", s, err)
		}
	}
	if err := h.gw.FleetForceBreaker(context.Background(), "admin", "coupon", "open", 0); !errors.Is(err, ErrScope) {
		t.Fatalf("FleetForceBreaker: %v, want ErrScope", err)
	}
	if st := h.gw.Breakers()[0]; st.Forced {
		t.Fatalf("forced after a refused fleet force: %+v", st)
	}
}

// An instance whose reload replaced its store listens on the old and the
// new one until the old closes: a fleet action is still carried out once.
func TestFleetActionOnceAcrossAStoreSwap(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	cfg := func(timeout string) string {
		return fmt.Sprintf("admin: {listen: \"\"}\nserver: {shutdown_timeout: 5s}\nstore: {type: redis, redis: {addrs: [%q], timeout: %s}}\n", srv.Addr(), timeout) + fleetRoutes
	}
	a, b := newHarness(t, cfg("1s"), nil), newHarness(t, cfg("1s"), nil)
	if err := b.gw.Reload(mustParse(t, cfg("2s"))); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		v, err := srv.DoValue(t, "PUBSUB", "NUMSUB", "fg:control")
		if err != nil {
			return err
		}
		if n := v.([]any)[1].(int64); n != 3 {
			return fmt.Errorf("%d subscribers, want 3", n)
		}
		return nil
	})
	if s, err := a.gw.Scope(""); s != ScopeFleet || err != nil {
		t.Fatalf(`Scope(""): %q, %v`, s, err)
	}
	ctx := context.Background()
	if err := a.gw.FleetForceBreaker(ctx, "ops", "coupon", "OPEN", time.Hour); err != nil {
		t.Fatal(err)
	}
	// The second force is the barrier: once b has it, b has had the first
	// on both subscriptions.
	if err := a.gw.FleetForceBreaker(ctx, "ops", "cart", "closed", 0); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		if n := strings.Count(b.log.String(), `"route":"cart"`); n == 0 {
			return errors.New("b has not forced cart")
		}
		return nil
	})
	if n := strings.Count(b.log.String(), `"msg":"circuit breaker forced by the fleet","by":"ops"`); n != 2 {
		t.Fatalf("b logged %d fleet forces, want 2:\n%s", n, b.log.String())
	}
	for _, st := range b.gw.Breakers() {
		if !st.Forced || st.Route == "coupon" && (st.State != "OPEN" || st.TTL <= 0) {
			t.Fatalf("b's breaker %+v", st)
		}
	}
	if strings.Contains(a.log.String(), "by the fleet") {
		t.Fatalf("a carried out its own action twice:\n%s", a.log.String())
	}

	// floodgate's format with what no admin call would send: logged, not
	// carried out.
	c := a.gw.gen.Load().bus
	for i, m := range []string{
		`"route":"coupon","state":"auto","ttl_ns":-5`,
		`"route":"coupon","state":"open","ttl_ns":` + fmt.Sprint(int64(MaxForceTTL+time.Second)),
		`"route":"nope","state":"open"`,
		`"route":"coupon","state":"sideways"`,
	} {
		msg := fmt.Sprintf(`{"floodgate":1,"kind":"breaker","from":"elsewhere","nonce":"n%d",%s}`, i, m)
		if err := c.Publish(ctx, controlKind, []byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	within(t, 5*time.Second, func() error {
		if n := strings.Count(b.log.String(), `"msg":"fleet breaker force not applied"`); n != 4 {
			return fmt.Errorf("b logged %d refused forces, want 4", n)
		}
		return nil
	})
	if st := b.gw.Breakers()[0]; st.Route != "coupon" || st.State != "OPEN" || st.TTL <= 0 {
		t.Fatalf("b's coupon breaker after the refused forces: %+v", st)
	}
}

// within retries f until it returns nil, and fails the test with its last
// error after d.
func within(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A fleet force sent to a Redis that stalls gets no answer, and may reach
// the others when Redis runs again: the instance that took it forces its
// own breaker too, and says it does not know of the others'.
func TestFleetForceToAStalledRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	cfg := fmt.Sprintf("admin: {listen: \"\"}\nstore: {type: redis, redis: {addrs: [%q], timeout: 100ms}}\n", srv.Addr()) + fleetRoutes
	a, b := newHarness(t, cfg, nil), newHarness(t, cfg, nil)
	within(t, 5*time.Second, func() error {
		v, err := srv.DoValue(t, "PUBSUB", "NUMSUB", "fg:control")
		if err != nil {
			return err
		}
		if n := v.([]any)[1].(int64); n != 2 {
			return fmt.Errorf("%d subscribers, want 2", n)
		}
		return nil
	})
	srv.Pause()
	err := a.gw.FleetForceBreaker(context.Background(), "ops", "coupon", "open", 0)
	srv.Resume()
	if !errors.Is(err, limit.ErrStoreUnavailable) || !strings.Contains(err.Error(), "may or may not") {
		t.Fatalf("a force to a stalled Redis: %v", err)
	}
	for name, h := range map[string]*harness{"a": a, "b": b} {
		within(t, 10*time.Second, func() error {
			if s := breakerState(h.gw, "coupon"); s != "OPEN" {
				return fmt.Errorf("instance %s: breaker %s", name, s)
			}
			return nil
		})
	}
}

// An instance that starts while a fleet force lasts is forced too, for
// what is left of its ttl; one that was not listening when the fleet gave
// the breaker back is given it back; a force of its own stands.
func TestFleetForceReachesLateInstances(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	cfg := fmt.Sprintf("admin: {listen: \"\"}\nstore: {type: redis, redis: {addrs: [%q], timeout: 500ms}}\n", srv.Addr()) + fleetRoutes
	a := newHarness(t, cfg, nil)
	ctx := context.Background()
	if err := a.gw.FleetForceBreaker(ctx, "ops", "coupon", "open", time.Hour); err != nil {
		t.Fatal(err)
	}
	late := newHarness(t, cfg, nil)
	// The breaker is forced before the line is logged: both are waited for.
	within(t, 5*time.Second, func() error {
		if s := breakerState(late.gw, "coupon"); s != "OPEN" {
			return fmt.Errorf("the late instance's breaker is %s", s)
		}
		if !strings.Contains(late.log.String(), `"msg":"circuit breaker forced by the fleet","by":"ops"`) {
			return fmt.Errorf("not logged:\n%s", late.log)
		}
		return nil
	})
	for _, b := range late.gw.Breakers() {
		if b.Route == "coupon" && (b.TTL < 3500 || b.TTL > 3600) {
			t.Fatalf("the late instance's force lasts %v s, want what is left of an hour", b.TTL)
		}
	}
	// The fleet gives it back while late does not hear (no message, only
	// the set's change): the store's set says so on the next beat.
	srv.Do(t, "HDEL", "{fg:forces}:set", "e:coupon")
	srv.Do(t, "HINCRBY", "{fg:forces}:set", "_version", "1")
	within(t, 5*time.Second, func() error {
		if s := breakerState(late.gw, "coupon"); s != "CLOSED" || forced(late.gw, "coupon") {
			return fmt.Errorf("coupon %s, forced %v", s, forced(late.gw, "coupon"))
		}
		if !strings.Contains(late.log.String(), `"msg":"circuit breaker given back by the fleet","route":"coupon"`) {
			return fmt.Errorf("not logged:\n%s", late.log)
		}
		return nil
	})
	// Forced for the fleet again, on the set alone.
	if err := a.gw.FleetForceBreaker(ctx, "ops", "cart", "closed", 0); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		if !forced(late.gw, "cart") {
			return errors.New("cart not forced")
		}
		return nil
	})
	// A force of the instance's own is not undone by the fleet's set.
	if err := late.gw.ForceBreaker("cart", "open", 0); err != nil {
		t.Fatal(err)
	}
	srv.Do(t, "HINCRBY", "{fg:forces}:set", "_version", "1")
	late.gw.syncOnce() // what the next beat does
	if s := breakerState(late.gw, "cart"); s != "OPEN" {
		t.Fatalf("the instance's own force was undone: %s", s)
	}
	if err := a.gw.FleetForceBreaker(ctx, "ops", "cart", "auto", 0); err != nil {
		t.Fatal(err)
	}
	if n := srv.Do(t, "HEXISTS", "{fg:forces}:set", "e:cart"); n != "0" {
		t.Fatal("a fleet auto left the force in the store")
	}
}

// A force heard by its message before the sender kept it in the fleet's
// set: a set read in that gap does not give it back, nor force it again;
// once the force has had the time to reach the set, the set steers again.
func TestFleetForceHeardBeforeTheSetHoldsIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "admin: {listen: \"\"}\n"+fleetRoutes, nil)
	msg := `{"floodgate":1,"kind":"breaker","from":"elsewhere","nonce":"n1","by":"ops","route":"cart","state":"open"}`
	h.gw.onControl([]byte(msg))
	if !forced(h.gw, "cart") {
		t.Fatal("the message did not force cart")
	}
	// The set as it was before the sender kept the force: without cart.
	stale := fleetbus.Set{Epoch: "e", Version: 1, Entries: map[string]fleetbus.Entry{}, Now: time.Now()}
	h.gw.applyForces(stale)
	if !forced(h.gw, "cart") {
		t.Fatal("a set read before the sender kept the force gave it back")
	}
	if v := h.gw.keptForces.version; v != 0 {
		t.Errorf("the set's version %d recorded while a force settles: it would not be read again", v)
	}
	// The set with the force, read before the message came: carried out
	// once, by whichever comes first.
	b, _ := json.Marshal(keptForce{State: "open", By: "ops", From: "elsewhere", Nonce: "n2"})
	h.gw.applyForces(fleetbus.Set{Epoch: "e", Version: 2, Entries: map[string]fleetbus.Entry{"coupon": {Value: b}}, Now: time.Now()})
	h.gw.onControl([]byte(strings.ReplaceAll(strings.ReplaceAll(msg, "n1", "n2"), "cart", "coupon")))
	if n := strings.Count(h.log.String(), `"msg":"circuit breaker forced by the fleet"`); n != 2 {
		t.Errorf("%d fleet forces logged, want 2 (cart's message, coupon's set entry):\n%s", n, h.log.String())
	}
	// Settled: a set without cart now says the fleet gave it back.
	h.gw.keptForces.mu.Lock()
	h.gw.keptForces.heard["cart"] = time.Now().Add(-forceSettle)
	h.gw.keptForces.mu.Unlock()
	h.gw.applyForces(fleetbus.Set{Epoch: "e", Version: 3, Entries: map[string]fleetbus.Entry{"coupon": {Value: b}}, Now: time.Now()})
	if forced(h.gw, "cart") || !forced(h.gw, "coupon") {
		t.Fatalf("settled: cart forced %v, coupon forced %v; want false and true", forced(h.gw, "cart"), forced(h.gw, "coupon"))
	}
	if v := h.gw.keptForces.version; v != 3 {
		t.Errorf("the set's version %d recorded once settled, want 3", v)
	}
}
