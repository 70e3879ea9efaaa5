package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// TestExactAcrossInstances runs three gateways on one Redis and hammers a
// user limit from 64 goroutines spread over them: exactly the limit is
// admitted, and no rejected request reaches the upstream. Once with
// limits of three algorithms, once with four fixed windows (global, api,
// user, ip), whose decisions the store batches when they queue, and once
// on a 3-master Redis Cluster.
func TestExactAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, api, ip string
		cluster       bool
	}{
		{"mixed", "algorithm: token_bucket, rate: 100000/s", "algorithm: sliding_window, rate: 100000/min", false},
		{"fixed_windows", "rate: 100000/s", "rate: 100000/min", false},
		// On a cluster the four limits live in four slots: the user
		// limit, the most selective, is asked first.
		{"cluster", "algorithm: token_bucket, rate: 100000/s", "rate: 100000/min", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*testredis.Server
			store := `{type: redis, redis: {addrs: ["%s"], timeout: 1s}}`
			if tc.cluster {
				cl := testredis.StartCluster(t, 3)
				nodes = cl.Nodes()
				store = fmt.Sprintf(`{type: redis, redis: {mode: cluster, addrs: ["%s"], timeout: 1s}}`, strings.Join(cl.Addrs(), `", "`))
			} else {
				srv := testredis.Start(t)
				nodes = []*testredis.Server{srv}
				store = fmt.Sprintf(store, srv.Addr())
			}
			exactAcrossInstances(t, store, nodes, tc.api, tc.ip)
		})
	}
}

// exactAcrossInstances runs three gateways on the store and the Redis
// servers nodes, and 64 clients at them.
func exactAcrossInstances(t *testing.T, store string, nodes []*testredis.Server, api, ip string) {
	up := newBackend(t, nil)
	cfg := `
admin: {listen: ""}
store: ` + store + `
global_limits:
  - {name: global, key: [global], rate: 100000/s}
routes:
  - id: sale
    match: {path: /sale}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: api, key: [route], ` + api + `}
      - {name: user, key: ["header:X-User-Id"], rate: 5/1h, align: first}
      - {name: ip, key: [ip], ` + ip + `}
`
	var gws []*harness
	for range 3 {
		gws = append(gws, newHarness(t, cfg, up))
	}
	var admitted, rejected atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		h := gws[i%3]
		wg.Go(func() {
			for range 10 {
				resp := h.do("GET", "/sale", map[string]string{"X-User-Id": "hot"}, nil)
				drain(resp)
				switch resp.StatusCode {
				case http.StatusOK:
					admitted.Add(1)
				case http.StatusTooManyRequests:
					rejected.Add(1)
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 5 || rejected.Load() != 635 {
		t.Fatalf("admitted %d, rejected %d; want exactly 5 and 635", admitted.Load(), rejected.Load())
	}
	if up.hits.Load() != 5 {
		t.Fatalf("upstream saw %d requests, want 5", up.hits.Load())
	}
	// Every key the gateways wrote expires. -2 is a key that expired
	// between KEYS and PTTL (the api limit's windows are a second long);
	// -1 one that never would.
	for _, srv := range nodes {
		keys, err := srv.DoValue(t, "KEYS", "fg:*")
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys.([]any) {
			if ttl := srv.Do(t, "PTTL", k.(string)); ttl == "-1" {
				t.Errorf("key %s has PTTL %s", k, ttl)
			}
		}
	}
}

// TestStoreDown: with Redis gone, on_error: deny answers 503, allow admits
// and local decides in memory (docs/configuration.md, When the store fails).
// A stopped Redis refuses connections at once: the timeout bounds only the
// calls made while it runs, which a loaded machine may slow past 100ms.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
store: {type: redis, redis: {addrs: ["`+srv.Addr()+`"], timeout: 2s}, local_share: 1}
routes:
  - id: deny
    match: {path: /deny}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [ip], rate: 100/s, on_error: deny}]
  - id: allow
    match: {path: /allow}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [ip], rate: 1/min, on_error: allow}]
  - id: local
    match: {path: /local}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [ip], rate: 2/min, on_error: local}]
`, up)
	if resp := h.do("GET", "/deny", nil, nil); drain(resp) == "" || resp.StatusCode != 200 {
		t.Fatalf("with Redis up: %d", resp.StatusCode)
	}
	srv.Stop()
	answerOf(t, h.do("GET", "/deny", nil, nil), 503, "limiter_unavailable")
	for range 3 {
		resp := h.do("GET", "/allow", nil, nil)
		if drain(resp) == "" || resp.StatusCode != 200 {
			t.Fatalf("on_error allow: %d", resp.StatusCode)
		}
		// A limit dropped by on_error allow has no state to show.
		for _, name := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining"} {
			if v := resp.Header.Get(name); v != "" {
				t.Errorf("on_error allow: %s: %s", name, v)
			}
		}
	}
	for i := range 2 {
		if resp := h.do("GET", "/local", nil, nil); drain(resp) == "" || resp.StatusCode != 200 {
			t.Fatalf("on_error local, request %d: %d", i, resp.StatusCode)
		}
	}
	answerOf(t, h.do("GET", "/local", nil, nil), 429, "rate_limited")
	if n := counterValue(t, h, "gateway_ratelimit_store_errors_total", nil); n < 6 {
		t.Errorf("store errors counted %v", n)
	}
	// Each decision is counted once, as an error, whatever on_error made
	// of it; a local rejection is still a rejection of the request.
	for _, tt := range []struct {
		route                  string
		errors, allowed, local float64
	}{{"deny", 1, 1, 0}, {"allow", 3, 0, 0}, {"local", 3, 0, 1}} {
		count := func(result string) float64 {
			return counterValue(t, h, "gateway_ratelimit_decisions_total", map[string]string{"route": tt.route, "limit": "l", "result": result})
		}
		if e, a, r := count("error"), count("allowed"), count("rejected"); e != tt.errors || a != tt.allowed || r != 0 {
			t.Errorf("route %s: decisions error %v, allowed %v, rejected %v; want %v, %v (before Redis stopped), 0", tt.route, e, a, r, tt.errors, tt.allowed)
		}
		if n := counterValue(t, h, "gateway_rate_limited_total", map[string]string{"route": tt.route, "limit": "l"}); n != tt.local {
			t.Errorf("route %s: rate limited %v, want %v", tt.route, n, tt.local)
		}
	}
	if !strings.Contains(h.log.String(), `"msg":"rate-limit store failed; deciding by on_error"`) {
		t.Errorf("no ERROR line for the store's failure: %s", h.log.String())
	}

	// Back: the first decision it makes says so, once.
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(h.log.String(), `"msg":"rate-limit store answers again"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no INFO line once the store answered again: %s", h.log.String())
		}
		drain(h.do("GET", "/allow", nil, nil))
		time.Sleep(20 * time.Millisecond)
	}
	// A decision may still fail once it is back (a reconnecting
	// connection, a slow first call on a loaded machine), and the next
	// that succeeds then says so again: once per failure since.
	errors := func() float64 {
		return counterValue(t, h, "gateway_ratelimit_decisions_total", map[string]string{"route": "allow", "limit": "l", "result": "error"})
	}
	failed := errors()
	for range 3 {
		drain(h.do("GET", "/allow", nil, nil))
	}
	if n, again := strings.Count(h.log.String(), "rate-limit store answers again"), errors()-failed; n < 1 || float64(n) > 1+again {
		t.Errorf("the store's return logged %d times, with %v failures after it; want once per return", n, again)
	}
}

// TestLocalShare: two gateways announce themselves in Redis; when Redis
// fails, each grants half of a limit on its own, so the fleet together
// does not exceed it.
func TestLocalShare(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	cfg := `
admin: {listen: ""}
store: {type: redis, redis: {addrs: ["` + srv.Addr() + `"], timeout: 2s}}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [route], rate: 10/min}]
`
	a, b := newHarness(t, cfg, up), newHarness(t, cfg, up)
	deadline := time.Now().Add(5 * time.Second)
	for a.gw.instances.Load() != 2 || b.gw.instances.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("instances seen: %d and %d, want 2", a.gw.instances.Load(), b.gw.instances.Load())
		}
		a.gw.announceOnce()
		b.gw.announceOnce()
	}
	srv.Stop()
	admitted := 0
	for _, h := range []*harness{a, b} {
		for range 10 {
			if resp := h.do("GET", "/api", nil, nil); drain(resp) != "" && resp.StatusCode == 200 {
				admitted++
			}
		}
	}
	if admitted != 10 {
		t.Fatalf("two instances in local fallback admitted %d, want 5 each: 10", admitted)
	}
}

// TestLeaseReleasedAfterTimeout: a concurrency lease whose decision timed
// out, but whose script ran later, is released all the same.
func TestLeaseReleasedAfterTimeout(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
store: {type: redis, redis: {addrs: ["`+srv.Addr()+`"], timeout: 50ms}, on_error: allow}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: inflight, key: [route], algorithm: concurrency, limit: 5}]
`, up)
	drain(h.do("GET", "/api", nil, nil)) // load the script while Redis answers
	// Writes wait 300ms: the decision times out, the script runs later.
	srv.Do(t, "CLIENT", "PAUSE", "300", "WRITE")
	if resp := h.do("GET", "/api", nil, nil); drain(resp) == "" || resp.StatusCode != 200 {
		t.Fatalf("on_error allow: %d", resp.StatusCode)
	}
	// Once the pause is over the script runs and takes its lease; the
	// release the gateway sent after the timeout frees it.
	deadline := time.Now().Add(3 * time.Second)
	for {
		n := srv.Do(t, "ZCARD", "fg:{api:inflight:route=api}:cc")
		if n == "0" && time.Since(deadline.Add(-3*time.Second)) > 400*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s leases held after the paused script ran and the release was sent", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSentinelStore: with store.redis.mode sentinel the gateway finds the
// master through the sentinels and keeps its counts through a failover.
func TestSentinelStore(t *testing.T) {
	t.Parallel()
	sn := testredis.StartSentinel(t, 1, 1)
	up := newBackend(t, nil)
	h := newHarness(t, fmt.Sprintf(`
admin: {listen: ""}
store: {type: redis, on_error: deny, redis: {mode: sentinel, master_name: %s, addrs: ["%s"], timeout: 1s}}
routes:
  - id: sale
    match: {path: /sale}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 2/1h, align: first}
`, testredis.MasterName, strings.Join(sn.Addrs(), `", "`)), up)
	status := func() int {
		resp := h.do("GET", "/sale", map[string]string{"X-User-Id": "u"}, nil)
		drain(resp)
		return resp.StatusCode
	}
	for i, want := range []int{200, 200, 429} {
		if got := status(); got != want {
			t.Fatalf("request %d: status %d, want %d", i, got, want)
		}
	}
	sn.Master(t).Do(t, "WAIT", "1", "2000")
	sn.Failover(t)
	// While the store fails over, on_error deny answers 503; then the new
	// master, which holds the replicated count, rejects the user again.
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := status()
		if got == http.StatusTooManyRequests {
			break
		}
		if got != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("status %d after the failover, want 503 while it lasts and then 429", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if up.hits.Load() != 2 {
		t.Fatalf("upstream saw %d requests, want 2", up.hits.Load())
	}
}

// TestClusterUndecidedNotCounted: on a cluster, a request that the user
// limit (asked first, alone) rejects never reaches the route's limit in
// another slot, and the route's limit counts no decision for it.
func TestClusterUndecidedNotCounted(t *testing.T) {
	t.Parallel() // most of a cluster's start is waiting
	cl := testredis.StartCluster(t, 3)
	h := newHarness(t, `
admin: {listen: ""}
store: {type: redis, redis: {mode: cluster, addrs: ["`+strings.Join(cl.Addrs(), `", "`)+`"], timeout: 1s}}
routes:
  - id: sale
    match: {path: /sale}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: api, key: [route], rate: 100000/s}
      - {name: user, key: ["header:X-User-Id"], rate: 1/min}
`, newBackend(t, nil))
	for i, want := range []int{200, 429} {
		resp := h.do("GET", "/sale", map[string]string{"X-User-Id": "u1"}, nil)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	decisions := func(limit, result string) float64 {
		return counterValue(t, h, "gateway_ratelimit_decisions_total", map[string]string{"route": "sale", "limit": limit, "result": result})
	}
	if got := decisions("api", "allowed"); got != 1 {
		t.Errorf("the route's limit counted %v admissions, want 1: the rejected request never asked it", got)
	}
	if got := decisions("user", "rejected"); got != 1 {
		t.Errorf("the user limit counted %v rejections, want 1", got)
	}
}

// On a cluster with one master down the others answer between its
// failures: the store is said to answer again once no decision failed for
// a second, not between each two failures.
func TestStoreAnswersAgainOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "admin: {listen: \"\"}\n"+fleetRoutes, nil)
	for range 100 {
		h.gw.logStoreError(errors.New("decide on 127.0.0.1:7702: connection refused"))
		h.gw.storeAnswered()
	}
	if n := strings.Count(h.log.String(), "rate-limit store answers again"); n != 0 {
		t.Fatalf("said %d times while decisions kept failing", n)
	}
	h.clock.Step(storeRecovered)
	h.gw.storeAnswered()
	h.gw.storeAnswered()
	if n := strings.Count(h.log.String(), "rate-limit store answers again"); n != 1 {
		t.Fatalf("said %d times a second after the last failure, want 1", n)
	}
}
