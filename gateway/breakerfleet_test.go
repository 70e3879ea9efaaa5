package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

const fleetBreakerConfig = `
admin: {listen: ""}
store: %s
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"], timeout: 20s}
    breaker:
      enabled: true
      scope: fleet
      window: 30s
      min_calls: 12
      failure_rate: 0.5
      open_for: 1s
      half_open_calls: 3
`

// Three gateways on one Redis share a fleet breaker: failures spread over
// the three, each instance's too few to decide alone, open all three; the
// fleet lets half_open_calls trials through in all, not per instance; and
// their success closes the breaker of every instance. Once on a
// 3-master Redis Cluster.
func TestFleetBreaker(t *testing.T) {
	t.Parallel()
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "standalone", true: "cluster"}[cluster], func(t *testing.T) {
			var store string
			if cluster {
				cl := testredis.StartCluster(t, 3)
				store = fmt.Sprintf(`{type: redis, redis: {mode: cluster, addrs: ["%s"], timeout: 1s}}`, strings.Join(cl.Addrs(), `", "`))
			} else {
				srv := testredis.Start(t)
				store = fmt.Sprintf(`{type: redis, redis: {addrs: [%q], timeout: 1s}}`, srv.Addr())
			}
			fleetBreakerCycle(t, store)
		})
	}
}

func fleetBreakerCycle(t *testing.T, store string) {
	var hits atomic.Int64
	release := make(chan struct{})
	var mode atomic.Value
	mode.Store("fail")
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "trial":
			// The first three wait, so that every trial is in flight
			// while the fleet is asked for more; any past the third
			// answers at once for the test to count it.
			if hits.Add(1) <= 3 {
				<-release
			}
			w.Write([]byte("ok"))
		default:
			w.Write([]byte("ok"))
		}
	})
	cfg := fmt.Sprintf(fleetBreakerConfig, store)
	gws := []*harness{newHarness(t, cfg, up), newHarness(t, cfg, up), newHarness(t, cfg, up)}
	states := func() []string {
		var ss []string
		for _, h := range gws {
			ss = append(ss, h.gw.Breakers()[0].State)
		}
		return ss
	}

	// 5 failures per instance: 15 of 15 in the fleet's window, while 5 is
	// under min_calls 12 for any one of them. The fleet may open from the
	// 13th call on, when a tick has shared the first 12 before it: the
	// slower the machine sends them, the sooner in the sequence.
	for i := range 15 {
		h := gws[i%3]
		resp := h.do("GET", "/coupon", nil, nil)
		body := drain(resp)
		if i >= 12 && resp.StatusCode == 503 && strings.Contains(body, `"code":"service_unavailable"`) {
			continue
		}
		if body != "" || resp.StatusCode != 500 {
			t.Fatalf("call %d: %d, want the upstream's 500 while the fleet is closed", i, resp.StatusCode)
		}
	}
	within(t, 10*time.Second, func() error {
		if ss := states(); ss[0] != "OPEN" || ss[1] != "OPEN" || ss[2] != "OPEN" {
			return fmt.Errorf("states %v, want OPEN on all three", ss)
		}
		return nil
	})
	for _, h := range gws {
		if g := gaugeValue(t, h, "gateway_breaker_fleet_fallback", "coupon"); g != 0 {
			t.Errorf("fallback gauge %v while Redis answers", g)
		}
		resp := h.do("GET", "/coupon", nil, nil)
		answerOf(t, resp, 503, "service_unavailable")
	}

	// After open_for, three trials for the fleet. Requests go to the three
	// instances in turn, each from its own goroutine (a trial waits at the
	// upstream), until three reached the upstream; then 30 more: every one
	// is refused.
	mode.Store("trial")
	var wg sync.WaitGroup
	var trialsOK atomic.Int64
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; hits.Load() < 3; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("%d trials reached the upstream in 15s, want 3", hits.Load())
		}
		h := gws[i%3]
		wg.Go(func() {
			if resp := h.do("GET", "/coupon", nil, nil); drain(resp) == "ok" {
				trialsOK.Add(1)
			}
		})
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 30 {
		resp := gws[i%3].do("GET", "/coupon", nil, nil)
		drain(resp)
	}
	if n := hits.Load(); n != 3 {
		t.Fatalf("%d trials reached the upstream across the fleet, want half_open_calls 3", n)
	}
	close(release)
	wg.Wait()
	if trialsOK.Load() != 3 {
		t.Fatalf("%d trials passed, want 3", trialsOK.Load())
	}
	mode.Store("ok")
	within(t, 10*time.Second, func() error {
		if ss := states(); ss[0] != "CLOSED" || ss[1] != "CLOSED" || ss[2] != "CLOSED" {
			return fmt.Errorf("states %v after three good trials, want CLOSED on all three", ss)
		}
		return nil
	})
	for _, h := range gws {
		if resp := h.do("GET", "/coupon", nil, nil); drain(resp) != "ok" {
			t.Fatalf("closed again: %d", resp.StatusCode)
		}
	}
}

// When Redis stops, a fleet breaker decides on its instance's own window,
// and says so (the gauge, Degraded for /readyz); when Redis is back, it
// follows the fleet again.
func TestFleetBreakerFallback(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	cfg := fmt.Sprintf(fleetBreakerConfig, fmt.Sprintf(`{type: redis, redis: {addrs: [%q], timeout: 200ms}}`, srv.Addr()))
	h := newHarness(t, cfg, up)
	within(t, 10*time.Second, func() error {
		if n := len(srv.Keys(t)); n == 0 {
			return fmt.Errorf("no key in Redis yet")
		}
		return nil
	})
	srv.Stop()
	within(t, 10*time.Second, func() error {
		if g := gaugeValue(t, h, "gateway_breaker_fleet_fallback", "coupon"); g != 1 {
			return fmt.Errorf("fallback gauge %v with Redis stopped, want 1", g)
		}
		if d := h.gw.Degraded(); !strings.Contains(d, "breaker of route coupon decides on this instance's window") {
			return fmt.Errorf("Degraded: %q", d)
		}
		return nil
	})
	// On its own window: min_calls failures of this instance open it.
	for i := range 12 {
		if resp := h.do("GET", "/coupon", nil, nil); drain(resp) != "" || resp.StatusCode != 502 {
			t.Fatalf("call %d: %d, want the upstream's 502", i, resp.StatusCode)
		}
	}
	if st := h.gw.Breakers()[0].State; st != "OPEN" {
		t.Fatalf("12 failures of 12 on the instance's own window: %s, want OPEN", st)
	}
	if !strings.Contains(h.log.String(), `"msg":"circuit breaker decides on this instance's window: the fleet's is out of reach"`) {
		t.Errorf("no WARN line for the fallback:\n%s", h.log.String())
	}

	srv.Restart()
	within(t, 20*time.Second, func() error {
		if g := gaugeValue(t, h, "gateway_breaker_fleet_fallback", "coupon"); g != 0 {
			return fmt.Errorf("fallback gauge %v with Redis back, want 0", g)
		}
		if d := h.gw.Degraded(); d != "" {
			return fmt.Errorf("Degraded: %q", d)
		}
		// The line follows the change of state, from the link's own
		// goroutine: it may come a moment after the gauge.
		if !strings.Contains(h.log.String(), `"msg":"circuit breaker follows the fleet's window again"`) {
			return fmt.Errorf("no INFO line for the return:\n%s", h.log.String())
		}
		return nil
	})
}

// A force across the fleet holds every instance's fleet breaker whatever
// the fleet's window says, and auto starts the fleet afresh: closed, not
// back in the opening the force overrode.
func TestFleetBreakerForce(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	cfg := fmt.Sprintf(strings.Replace(fleetBreakerConfig, "open_for: 1s", "open_for: 1h", 1),
		fmt.Sprintf(`{type: redis, redis: {addrs: [%q], timeout: 1s}}`, srv.Addr()))
	a, b := newHarness(t, cfg, up), newHarness(t, cfg, up)
	for i := range 12 {
		drain([]*harness{a, b}[i%2].do("GET", "/coupon", nil, nil))
	}
	within(t, 10*time.Second, func() error {
		if sa, sb := a.gw.Breakers()[0].State, b.gw.Breakers()[0].State; sa != "OPEN" || sb != "OPEN" {
			return fmt.Errorf("states %s, %s; want OPEN", sa, sb)
		}
		return nil
	})
	ctx := t.Context()
	if err := a.gw.FleetForceBreaker(ctx, "ops", "coupon", "closed", 0); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, func() error {
		if st := b.gw.Breakers()[0]; !st.Forced || st.State != "CLOSED" {
			return fmt.Errorf("b: %+v, want forced CLOSED", st)
		}
		return nil
	})
	// Several ticks: the fleet's OPEN does not lift the force.
	time.Sleep(5 * fleetTick)
	for _, h := range []*harness{a, b} {
		if st := h.gw.Breakers()[0]; !st.Forced || st.State != "CLOSED" {
			t.Fatalf("after some ticks: %+v, want forced CLOSED", st)
		}
		if resp := h.do("GET", "/coupon", nil, nil); drain(resp) != "" || resp.StatusCode != 503 || resp.Header.Get("Content-Type") == "application/json" {
			t.Fatalf("forced closed: %d %q, want the upstream's 503", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	if err := a.gw.FleetForceBreaker(ctx, "ops", "coupon", "auto", 0); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, func() error {
		for _, h := range []*harness{a, b} {
			if st := h.gw.Breakers()[0]; st.Forced || st.State != "CLOSED" {
				return fmt.Errorf("after auto: %+v, want CLOSED, not forced", st)
			}
		}
		return nil
	})
	time.Sleep(5 * fleetTick)
	for _, h := range []*harness{a, b} {
		if st := h.gw.Breakers()[0]; st.State != "CLOSED" {
			t.Fatalf("some ticks after auto: %+v; the fleet's old opening came back", st)
		}
	}

	// Forced open across the fleet: every instance refuses, while the
	// fleet's own state is closed.
	if err := b.gw.FleetForceBreaker(ctx, "ops", "coupon", "open", 0); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, func() error {
		if st := a.gw.Breakers()[0]; !st.Forced || st.State != "OPEN" {
			return fmt.Errorf("a: %+v, want forced OPEN", st)
		}
		return nil
	})
	time.Sleep(5 * fleetTick)
	for _, h := range []*harness{a, b} {
		answerOf(t, h.do("GET", "/coupon", nil, nil), 503, "service_unavailable")
	}
}

// A fleet breaker's requests make no Redis call of their own in CLOSED:
// the script calls during 2,000 requests are the ticks' and the
// announcements', however many requests there are.
func TestFleetBreakerCallsRedisPerTick(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	h := newHarness(t, fmt.Sprintf(fleetBreakerConfig, fmt.Sprintf(`{type: redis, redis: {addrs: [%q], timeout: 1s}}`, srv.Addr())), up)
	scripts := func() int64 {
		var n int64
		for _, line := range strings.Split(srv.Do(t, "INFO", "commandstats"), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
				v, _, _ := strings.Cut(rest, ",")
				fmt.Sscan(v, &n)
			}
		}
		return n
	}
	before, start := scripts(), time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 250 {
				if resp := h.do("GET", "/coupon", nil, nil); drain(resp) == "" || resp.StatusCode != 200 {
					t.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	calls, took := scripts()-before, time.Since(start)
	bound := int64(took/fleetTick) + int64(took/announceEvery) + 4
	if bound >= 2000 {
		t.Fatalf("2,000 requests took %v: too long to tell ticks from requests", took)
	}
	if calls > bound {
		t.Fatalf("%d script calls during 2,000 requests in %v; the ticks and announcements make at most %d", calls, took, bound)
	}
	// The calls reached the fleet's window all the same, by the ticks.
	within(t, 5*time.Second, func() error {
		if st := h.gw.Breakers()[0]; st.Calls != 2000 {
			return fmt.Errorf("the fleet's window holds %d calls, want 2000", st.Calls)
		}
		return nil
	})
}
