package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// Three gateways on one Redis in front of the mock API of capacity 100 a
// second, offered 300 a second split 70/15/15: they hold one limit, at
// most near the API's capacity, so that what reaches the API is that
// limit however uneven the split, and each admits about the same share of
// what it is offered.
// Redis stopped, each protects alone and says so; back, they share again.
func TestProtectFleetSplit(t *testing.T) {
	t.Parallel()
	const capacity = 100
	up, reached := mockAPI(t, capacity, 200*time.Millisecond)
	srv := testredis.Start(t)
	cfg := fmt.Sprintf(`
admin: {listen: ""}
store: {type: redis, redis: {addrs: [%q], timeout: 200ms}}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["%s"], timeout: 700ms}
    # Slow past 600 ms: the race detector's own delays, on a busy machine,
    # are not the API's (it takes 1 s when overloaded).
    protect: {min: 5, max: 1000, tolerance: 3}
`, srv.Addr(), up.URL)
	hs := []*harness{newHarness(t, cfg, nil), newHarness(t, cfg, nil), newHarness(t, cfg, nil)}
	clients := []int{42, 9, 9} // each one request each 100 ms: 420, 90, 90... /s offered at most; 70/15/15
	var offered, admitted [3]atomic.Int64
	load := func(d time.Duration) (stop time.Time) {
		stop = time.Now().Add(d)
		var wg sync.WaitGroup
		for i, h := range hs {
			for range clients[i] {
				wg.Go(func() {
					for next := time.Now(); next.Before(stop); next = next.Add(140 * time.Millisecond) {
						time.Sleep(time.Until(next))
						resp := h.do("POST", "/coupon", nil, nil)
						offered[i].Add(1)
						if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(drain(resp), "overloaded") {
							admitted[i].Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		return stop
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
			var b strings.Builder
			for _, h := range hs {
				p := h.gw.Protected()[0]
				fmt.Fprintf(&b, " [%.0f %.1f %.3f]", p.Limit, p.Admitting, p.Baseline)
			}
			t.Log(b.String())
		}
	}()
	load(9 * time.Second) // the first cut, and the climb back to what the API takes
	// On a loaded machine the climb may still be above what the API takes
	// when the 9 s end (142 of 100 seen, under make check's -p 4): the
	// split is measured once the fleet's limit has come back to it.
	for extra := 0; hs[0].gw.Protected()[0].Limit > 1.15*capacity; extra++ {
		if extra == 10 {
			t.Fatalf("fleet limit %.0f after 10 s more load, above the API's capacity %d", hs[0].gw.Protected()[0].Limit, capacity)
		}
		load(time.Second)
	}
	for i := range offered {
		offered[i].Store(0)
		admitted[i].Store(0)
	}
	calls := func() int64 { // the scripts Redis ran: the reports, and the announcements
		info := srv.Do(t, "INFO", "commandstats")
		var n int64
		for _, line := range strings.Split(info, "\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
				var c int64
				fmt.Sscanf(line[strings.Index(line, "calls=")+6:], "%d", &c)
				n += c
			}
		}
		return n
	}
	before, began := calls(), time.Now()
	from := time.Now().Unix() + 1
	// The fleet's limit while the split is measured, sampled: what reaches
	// the API is held to it.
	lo, hi := math.Inf(1), 0.0
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			l := hs[0].gw.Protected()[0].Limit
			lo, hi = min(lo, l), max(hi, l)
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	to := load(5*time.Second).Unix() - 1 // the last second the load filled
	close(stopSampling)
	<-sampled
	loaded := float64(calls()-before) / time.Since(began).Seconds() / 3
	// Idle as long as loaded: the bus announces each instance every 5 s,
	// and a window of 2 s held one of those or none, 0.5 a second apart.
	before, began = calls(), time.Now()
	time.Sleep(5 * time.Second)
	idle := float64(calls()-before) / time.Since(began).Seconds() / 3
	// Two a second are the route's reports; the bus's own (the overrides'
	// and forces' versions every second, an announcement every 5 s) are
	// the rest, whatever the traffic.
	t.Logf("Redis calls a second per instance: %.1f under %d requests, %.1f idle", loaded,
		offered[0].Load()+offered[1].Load()+offered[2].Load(), idle)
	if loaded > idle+0.5 || loaded > 5 {
		t.Errorf("%.1f Redis calls a second per instance under load, %.1f idle: want the same, two of them the route's", loaded, idle)
	}
	for s := from; s <= to; s++ {
		var got int64
		if n, ok := reached.Load(s); ok {
			got = n.(*atomic.Int64).Load()
		}
		// Never far above what the API takes, nor above the fleet's
		// limit; and the limit, not less. How near the limit comes to
		// the capacity is TestProtectLearnsTheCapacity's: on a loaded
		// machine the race detector's and the scheduler's delays add to
		// the API's latency, and the limit learned may be well below it
		// (43 of 100 seen under make check).
		most, least := 1.3*min(hi, capacity), 0.6*lo
		t.Logf("second %d: %d reached the API", s-from, got)
		if float64(got) > most || float64(got) < least {
			t.Errorf("second %d: %d requests reached the API of capacity %d, the fleet's limit being %.0f to %.0f: want %.0f..%.0f",
				s-from, got, capacity, lo, hi, least, most)
		}
	}
	t.Logf("fleet limit %.0f to %.0f while measured, the API's capacity %d", lo, hi, capacity)
	var fr [3]float64
	for i := range fr {
		fr[i] = float64(admitted[i].Load()) / float64(max(offered[i].Load(), 1))
		p := hs[i].gw.Protected()[0]
		t.Logf("instance %d: admitted %d of %d (%.0f%%), fleet limit %.0f, admitting %.1f, %d instances",
			i, admitted[i].Load(), offered[i].Load(), 100*fr[i], p.Limit, p.Admitting, p.Instances)
		if p.Instances != 3 {
			t.Errorf("instance %d: shares the limit with %d instances, want 3", i, p.Instances)
		}
	}
	for i := 1; i < 3; i++ {
		if fr[i] < 0.5*fr[0] || fr[i] > 2*fr[0] {
			t.Errorf("instance %d admitted %.0f%% of its offer, instance 0 %.0f%%: one is starved", i, 100*fr[i], 100*fr[0])
		}
	}

	close(done)
	// Redis stops: each instance protects alone, with its share of the
	// fleet's limit as its own, and says so.
	srv.Stop()
	for i, h := range hs {
		within(t, 5*time.Second, func() error {
			if d := h.gw.Degraded(); !strings.Contains(d, "protection of route coupon decides on this instance's own") {
				return fmt.Errorf("instance %d: degraded %q", i, d)
			}
			if v := testutil.ToFloat64(h.gw.metrics.protectFallback.WithLabelValues("coupon")); v != 1 {
				return fmt.Errorf("instance %d: fallback gauge %v", i, v)
			}
			return nil
		})
		if p := h.gw.Protected()[0]; p.Instances != 0 || p.Limit > 1.3*capacity {
			t.Errorf("instance %d alone: %+v, want no instances and its share of the limit", i, p)
		}
		if !strings.Contains(h.log.String(), "protects the upstream alone") {
			t.Errorf("instance %d: no WARN line:\n%s", i, h.log)
		}
	}
	srv.Restart()
	for i, h := range hs {
		within(t, 10*time.Second, func() error {
			if d := h.gw.Degraded(); d != "" {
				return fmt.Errorf("instance %d: degraded %q", i, d)
			}
			if p := h.gw.Protected()[0]; p.Instances != 3 {
				return fmt.Errorf("instance %d: %d instances", i, p.Instances)
			}
			return nil
		})
	}
}

// An operator pins a protected route's limit fleet-wide through the
// overrides (limit "protect"), with a ttl; the instances admit the pin,
// shared, and take the learned limit back when it is removed. enabled:
// false turns protection off; what protection cannot take is refused.
func TestProtectPin(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	cfg := fmt.Sprintf(`
admin: {listen: ""}
store: {type: redis, redis: {addrs: [%q], timeout: 500ms}}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["%s"]}
    protect: {max: 1000, warm_up: 0s}
`, srv.Addr(), up.URL)
	a, b := newHarness(t, cfg, nil), newHarness(t, cfg, nil)
	ctx := context.Background()
	if _, err := a.gw.SetOverride(ctx, "coupon", "protect", OverrideRequest{Change: OverrideChange{Rate: "20/s"}, TTL: time.Hour, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]*harness{"a": a, "b": b} {
		within(t, 5*time.Second, func() error {
			p := h.gw.Protected()[0]
			if p.Pinned != 20 || p.Limit != 20 || p.Admitting > 20 {
				return fmt.Errorf("instance %s: %+v, want pinned at 20", name, p)
			}
			return nil
		})
	}
	// Pinned at 20 a second: a burst of 40 at once gets a few through. The
	// burst is sent at once, and what the pin admits while it lasts (a
	// loaded machine stretches it) is allowed on top.
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 40 {
		wg.Go(func() {
			resp, err := a.srv.Client().Get(a.srv.URL + "/coupon")
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if n, most := ok.Load(), 10+int64(20*time.Since(start).Seconds()); n > most {
		t.Errorf("%d of 40 admitted at once under a pin of 20/s shared by two, in %v: want at most %d", n, time.Since(start), most)
	}
	if _, _, err := a.gw.RemoveOverride(ctx, "coupon", "protect"); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		if p := b.gw.Protected()[0]; p.Pinned != 0 || p.Limit != 1000 {
			return fmt.Errorf("after the pin: %+v, want the learned 1000", p)
		}
		return nil
	})
	// A pin of one request an hour, one request, the pin removed: the
	// route admits again at once, not after the hour the pin's pace owed.
	if _, err := a.gw.SetOverride(ctx, "coupon", "protect", OverrideRequest{Change: OverrideChange{Rate: "1/h"}}); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		if p := a.gw.Protected()[0]; p.Admitting > 1 {
			return fmt.Errorf("pinned at 1/h: admitting %v", p.Admitting)
		}
		return nil
	})
	for range 3 {
		drain(a.do("GET", "/coupon", nil, nil))
	}
	if _, _, err := a.gw.RemoveOverride(ctx, "coupon", "protect"); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		if resp := a.do("GET", "/coupon", nil, nil); resp.StatusCode != http.StatusOK {
			return fmt.Errorf("the pin of 1/h removed: %d %s", resp.StatusCode, drain(resp))
		}
		return nil
	})
	if _, err := a.gw.SetOverride(ctx, "coupon", "protect", OverrideRequest{Change: OverrideChange{Enabled: bptr(false)}}); err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() error {
		if p := b.gw.Protected(); len(p) != 0 {
			return fmt.Errorf("protection disabled, still %+v", p)
		}
		return nil
	})
	for _, c := range []OverrideChange{{Burst: 5}, {Limit: 3}, {Shadow: bptr(true)}, {Rate: "0/s"}} {
		var oe *OverrideError
		if _, err := a.gw.SetOverride(ctx, "coupon", "protect", OverrideRequest{Change: c}); !errors.As(err, &oe) {
			t.Errorf("override %+v of protection: %v, want an OverrideError", c, err)
		}
	}
}
