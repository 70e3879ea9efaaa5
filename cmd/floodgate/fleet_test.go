package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// fleetConfig is a gateway on a shared Redis: a global limit leased to
// each instance in slices, and a per-user limit decided in Redis and
// answered from memory once used up.
const fleetConfig = `
server: {listen: "{{LISTEN}}"}
admin: {listen: "{{ADMIN}}", token: {{TOKEN}}}
store: {type: redis, redis: {addrs: ["{{REDIS}}"], timeout: 1s}}
global_limits:
  - {name: global, key: [global], rate: 150/1h, sync: lease}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - {name: user, key: [header:X-User-Id], rate: 1/1h}
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
  - id: cart
    match: {path: /cart}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
`

// fleet starts n floodgate serve processes on one Redis, and waits until
// each listens for the keys the others forget and for fleet actions.
func fleet(t *testing.T, n int) []*proc {
	ps, _ := fleetOn(t, n)
	return ps
}

func fleetOn(t *testing.T, n int) ([]*proc, *testredis.Server) {
	srv := testredis.Start(t)
	var ps []*proc
	for range n {
		f := newFixture(t, nil)
		f.write(strings.ReplaceAll(fleetConfig, "{{REDIS}}", srv.Addr()))
		ps = append(ps, f.serve())
	}
	ps[0].waitFor("every instance to listen", func() bool {
		v, err := srv.DoValue(t, "PUBSUB", "NUMSUB", "fg:forget", "fg:control", "fg:overrides")
		return err == nil && v.([]any)[1].(int64) == int64(n) && v.([]any)[3].(int64) == int64(n) && v.([]any)[5].(int64) == int64(n)
	})
	return ps, srv
}

// Three gateway processes share a leased global limit under demand four
// times above it: never more than the limit is admitted, and no more than
// the slices held at the end is left unused.
func TestFleetLeasesAGlobalLimit(t *testing.T) {
	t.Parallel()
	ps := fleet(t, 3)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for g := range 24 {
		p := ps[g%3]
		wg.Go(func() {
			for i := range 25 {
				r := request(t, "GET", "http://"+p.f.listen+"/api/sale", "X-User-Id", strconv.Itoa(g*25+i))
				mu.Lock()
				codes[r.code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	admitted := codes[http.StatusOK]
	// Each instance holds at most a slice of 2% of what it used, rounded
	// up, when the window has nothing left.
	if admitted > 150 || admitted < 150-3-3 || codes[http.StatusTooManyRequests] != 600-admitted {
		t.Fatalf("answers %v: want 144 to 150 admitted of a global 150, the rest 429", codes)
	}
}

// A user over the limit is answered from memory by every instance; a
// reset on one of them, of the fleet by default, lets the user in again on
// the others too, and each says so in its log. The user's one request an
// hour is taken again by the first instance that admits it, so each
// instance is tried with a reset of its own.
func TestFleetResetReachesEveryInstance(t *testing.T) {
	t.Parallel()
	ps := fleet(t, 3)
	a := ps[0]
	get := func(p *proc) int {
		return request(t, "GET", "http://"+p.f.listen+"/api/x", "X-User-Id", "alice").code
	}
	if c := get(a); c != http.StatusOK {
		t.Fatalf("first request: %d", c)
	}
	for _, p := range ps[1:] {
		for range 3 {
			if c := get(p); c != http.StatusTooManyRequests {
				t.Fatalf("over the limit on %s: %d", p.f.listen, c)
			}
		}
		r := a.admin("DELETE", "/admin/limits?route=api&limit=user&key=alice")
		if r.code != http.StatusOK || r.json(t)["scope"] != "fleet" {
			t.Fatalf("reset: %d %s", r.code, r.body)
		}
		start := time.Now()
		p.waitFor("alice admitted after the reset", func() bool { return get(p) == http.StatusOK })
		t.Logf("%s admits alice %v after the reset answered", p.f.listen, time.Since(start).Round(time.Millisecond))
		p.waitLog(`"msg":"limit key reset by the fleet","by":"admin","from":"[^"]+","route":"api","scope":"fleet","limit":"user"`)
	}
	a.waitLog(`"msg":"limit key reset","route":"api","limit":"user","key":\["alice"\],"fallback":false,"scope":"fleet","by":"admin"`)
}

// breakerOf is the route's breaker as p's GET /admin/breakers shows it.
func breakerOf(t *testing.T, p *proc, route string) (state string, forced bool) {
	t.Helper()
	r := p.admin("GET", "/admin/breakers")
	var bs struct {
		Breakers []struct {
			Route, State string
			Forced       bool
		}
	}
	if err := json.Unmarshal([]byte(r.body), &bs); err != nil {
		t.Fatalf("breakers: %d %s", r.code, r.body)
	}
	for _, b := range bs.Breakers {
		if b.Route == route {
			return b.State, b.Forced
		}
	}
	t.Fatalf("no breaker %s in %s", route, r.body)
	return "", false
}

// waitBreaker waits until every p shows route's breaker in state, forced
// or not, and logs how long that took.
func waitBreaker(t *testing.T, ps []*proc, route, state string, forced bool) {
	t.Helper()
	start := time.Now()
	for _, p := range ps {
		p.waitFor(route+" "+state, func() bool {
			s, f := breakerOf(t, p, route)
			return s == state && f == forced
		})
	}
	t.Logf("%s %s (forced %v) on %d instances after %v", route, state, forced, len(ps), time.Since(start).Round(time.Millisecond))
}

// A breaker forced on one instance of the fleet is forced on all, its ttl
// ends on all, and auto from another instance gives it back on all;
// scope=instance leaves the others alone.
func TestFleetForcedBreaker(t *testing.T) {
	t.Parallel()
	ps, srv := fleetOn(t, 3)
	a, b := ps[0], ps[1]
	r := a.admin("POST", "/admin/breakers/coupon?state=open&ttl=2s")
	if m := r.json(t); r.code != http.StatusOK || m["scope"] != "fleet" || m["state"] != "OPEN" {
		t.Fatalf("force: %d %s", r.code, r.body)
	}
	waitBreaker(t, ps, "coupon", "OPEN", true)
	a.waitLog(`"msg":"circuit breaker forced","route":"coupon","state":"OPEN","forced":true,"ttl":"2s","scope":"fleet","by":"admin"`)
	for _, p := range ps[1:] {
		p.waitLog(`"msg":"circuit breaker forced by the fleet","by":"admin","from":"[^"]+","route":"coupon","scope":"fleet","ttl":"2s","state":"OPEN","forced":true`)
		if c := p.status("/coupon"); c == http.StatusOK {
			t.Fatalf("%s lets a request through the forced breaker", p.f.listen)
		}
	}
	// The ttl ends on every instance.
	waitBreaker(t, ps, "coupon", "CLOSED", false)

	if r := a.admin("POST", "/admin/breakers/coupon?state=open"); r.code != http.StatusOK {
		t.Fatalf("force: %d %s", r.code, r.body)
	}
	waitBreaker(t, ps, "coupon", "OPEN", true)
	if r := b.admin("POST", "/admin/breakers/coupon?state=auto"); r.code != http.StatusOK {
		t.Fatalf("auto: %d %s", r.code, r.body)
	}
	waitBreaker(t, ps, "coupon", "CLOSED", false)

	// scope=instance publishes nothing: a fleet force of another route
	// sent after it, in order on the same connection, arrives first.
	r = a.admin("POST", "/admin/breakers/coupon?state=open&scope=instance")
	if r.code != http.StatusOK || r.json(t)["scope"] != "instance" {
		t.Fatalf("force on the instance: %d %s", r.code, r.body)
	}
	if r := a.admin("POST", "/admin/breakers/cart?state=open"); r.code != http.StatusOK {
		t.Fatalf("force: %d %s", r.code, r.body)
	}
	waitBreaker(t, ps, "cart", "OPEN", true)
	for _, p := range ps[1:] {
		if s, f := breakerOf(t, p, "coupon"); s != "CLOSED" || f {
			t.Fatalf("%s: coupon %s (forced %v) after a force of a's own", p.f.listen, s, f)
		}
	}
	if s, f := breakerOf(t, a, "coupon"); s != "OPEN" || !f {
		t.Fatalf("a: coupon %s (forced %v)", s, f)
	}

	// Whatever else arrives on the channel is counted and changes nothing.
	for _, m := range []string{
		"garbage",
		`{"floodgate":2,"kind":"breaker","from":"x","nonce":"1","route":"cart","state":"closed"}`,
		`{"floodgate":1,"kind":"nuke","from":"x","nonce":"2"}`,
		`{"floodgate":1,"kind":"breaker","from":"x","nonce":"3","route":"cart","state":"closed","pad":"` + strings.Repeat("x", 20<<10) + `"}`,
	} {
		srv.Do(t, "PUBLISH", "fg:control", m)
	}
	for _, p := range ps {
		for reason, n := range map[string]string{"malformed": "2", "unknown_kind": "1", "too_large": "1"} {
			series := `gateway_fleet_messages_ignored_total{reason="` + reason + `"} ` + n
			p.waitFor(series, func() bool { return strings.Contains(p.admin("GET", "/metrics").body, series) })
		}
		if s, f := breakerOf(t, p, "cart"); s != "OPEN" || !f {
			t.Fatalf("%s: cart %s (forced %v) after the garbage", p.f.listen, s, f)
		}
	}
}

// With Redis stopped a fleet action fails with 503 and leaves the caller
// as it was; a bad scope is refused with 400.
func TestFleetActionWithRedisStopped(t *testing.T) {
	t.Parallel()
	ps, srv := fleetOn(t, 2)
	a := ps[0]
	for _, target := range []string{"/admin/breakers/coupon?state=open&scope=all", "/admin/limits?route=api&limit=user&key=u&scope=everywhere"} {
		method := map[bool]string{true: "POST", false: "DELETE"}[strings.Contains(target, "breakers")]
		r := a.admin(method, target)
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, `parameter \"scope\"`) {
			t.Fatalf("%s %s: %d %s", method, target, r.code, r.body)
		}
	}
	srv.Stop()
	r := a.admin("POST", "/admin/breakers/coupon?state=open")
	if r.code != http.StatusServiceUnavailable || r.json(t)["code"] != "store_unavailable" {
		t.Fatalf("fleet force with Redis stopped: %d %s", r.code, r.body)
	}
	if s, f := breakerOf(t, a, "coupon"); s != "CLOSED" || f {
		t.Fatalf("coupon %s (forced %v) after a force that failed", s, f)
	}
	r = a.admin("DELETE", "/admin/limits?route=api&limit=user&key=u")
	if r.code != http.StatusServiceUnavailable || r.json(t)["code"] != "store_unavailable" {
		t.Fatalf("fleet reset with Redis stopped: %d %s", r.code, r.body)
	}
	// The instance alone can still be steered.
	if r := a.admin("POST", "/admin/breakers/coupon?state=open&scope=instance"); r.code != http.StatusOK {
		t.Fatalf("force on the instance with Redis stopped: %d %s", r.code, r.body)
	}
}
