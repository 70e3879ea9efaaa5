package gateway

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// target is an upstream on a port of its own that a test can kill (its
// listener and connections closed) and start again on the same port. Its
// /healthz answers healthStatus; other paths count in hits and answer
// 200, or hold until released with /hold.
type target struct {
	t            *testing.T
	addr         string
	url          string
	mu           sync.Mutex
	srv          *http.Server
	hits         atomic.Int64 // requests but checks
	checks       atomic.Int64
	holding      atomic.Int64
	healthStatus atomic.Int64
	release      chan struct{}
}

func newTarget(t *testing.T) *target {
	t.Helper()
	ln := listenBelowEphemeral(t)
	tg := &target{t: t, addr: ln.Addr().String(), release: make(chan struct{})}
	tg.url = "http://" + tg.addr
	tg.healthStatus.Store(200)
	tg.serve(ln)
	t.Cleanup(func() {
		tg.unblock()
		tg.kill()
	})
	return tg
}

func (tg *target) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			tg.checks.Add(1)
			w.WriteHeader(int(tg.healthStatus.Load()))
			return
		case "/hold":
			tg.hits.Add(1)
			// The head goes out, the body waits: the exchange is in
			// flight while its body streams.
			tg.holding.Add(1) // before the head, which the test waits for
			defer tg.holding.Add(-1)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-tg.release:
			case <-r.Context().Done():
			}
			io.WriteString(w, "released")
			return
		}
		tg.hits.Add(1)
		io.WriteString(w, "ok")
	})}
	tg.mu.Lock()
	tg.srv = srv
	tg.mu.Unlock()
	go srv.Serve(ln)
}

func (tg *target) unblock() {
	select {
	case <-tg.release:
	default:
		close(tg.release)
	}
}

// kill closes the listener and every connection.
func (tg *target) kill() {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.srv.Close()
}

// restart listens on the same port again.
func (tg *target) restart() {
	tg.t.Helper()
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		if ln, err = net.Listen("tcp", tg.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		tg.t.Fatal(err)
	}
	tg.serve(ln)
}

// listenBelowEphemeral listens on a port below Linux's default range of
// ephemeral ports (32768-60999). A target killed and started again on
// its port must not find it taken by an outgoing connection meanwhile
// (the gateway's and the checks' dials to the dead port pick ports from
// that range, and one may even connect to itself).
func listenBelowEphemeral(t *testing.T) net.Listener {
	t.Helper()
	for i := 0; i < 100; i++ {
		port := 20000 + rand.IntN(12000)
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			return ln
		}
	}
	t.Fatal("no free port in 20000-31999 after 100 tries")
	return nil
}

// waitFor polls cond until it holds, or fails the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// targetStatus is the status of one target of a route.
func targetStatus(t *testing.T, gw *Gateway, route, target string) TargetStatus {
	t.Helper()
	for _, r := range gw.Routes() {
		if r.Route != route {
			continue
		}
		for _, ts := range r.Targets {
			if ts.Target == target {
				return ts
			}
		}
	}
	t.Fatalf("no target %s on route %s in %+v", target, route, gw.Routes())
	return TargetStatus{}
}

// healthyGauge reads gateway_upstream_healthy of a target; -1: no series.
func healthyGauge(t *testing.T, h *harness, route, target string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gateway_upstream_healthy" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["route"] == route && labels["target"] == target {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// A target killed under load is taken out by its checks while the
// requests go on to the other; started again on its port, it is back once
// its checks pass.
func TestHealthKilledTargetUnderLoad(t *testing.T) {
	t.Parallel()
	a, b := newTarget(t), newTarget(t)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: ["`+a.url+`", "`+b.url+`"]
      health: {path: /healthz, interval: 500ms, timeout: 400ms, healthy_after: 2, unhealthy_after: 2}
`, nil)
	const clients = 8
	var ok, failed atomic.Int64
	var failMu sync.Mutex
	var failures []string // the last few, to say what failed
	noteFailure := func(s string) {
		failMu.Lock()
		defer failMu.Unlock()
		failures = append(failures[max(0, len(failures)-4):], s)
	}
	defer func() {
		if t.Failed() {
			failMu.Lock()
			t.Logf("last failures: %q", failures)
			failMu.Unlock()
			t.Logf("log:\n%s", h.log.String())
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := h.srv.Client().Get(h.srv.URL + "/api/x")
				if err != nil {
					failed.Add(1)
					noteFailure(err.Error())
					continue
				}
				body := drain(resp)
				if resp.StatusCode == 200 {
					ok.Add(1)
				} else {
					failed.Add(1)
					noteFailure(strconv.Itoa(resp.StatusCode) + " " + body)
				}
			}
		})
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	waitFor(t, "both targets to take requests", func() bool { return a.hits.Load() > 50 && b.hits.Load() > 50 })
	b.kill()
	waitFor(t, "the killed target to fail its checks", func() bool {
		return targetStatus(t, h.gw, "api", b.url).State == upstream.StateUnhealthy
	})
	if g := healthyGauge(t, h, "api", b.url); g != 0 {
		t.Errorf("gateway_upstream_healthy of the killed target %v, want 0", g)
	}
	// What failed is what was in flight to it or waited on one of its
	// connections when it died: at most a request per client and per
	// idle connection.
	before, aBefore := ok.Load(), a.hits.Load()
	waitFor(t, "200 more requests", func() bool { return ok.Load() > before+200 })
	if n := failed.Load(); n > 2*clients {
		t.Errorf("%d requests failed around the kill, want at most %d", n, 2*clients)
	}
	// Up to one request per client was counted at the target before,
	// and answered after, the counts were read.
	if n := a.hits.Load() - aBefore; n < 200-clients {
		t.Errorf("the live target took %d of the 200 requests", n)
	}
	failedBefore := failed.Load()

	b.restart()
	waitFor(t, "the restarted target to pass its checks", func() bool {
		return targetStatus(t, h.gw, "api", b.url).State == upstream.StateHealthy
	})
	hitsBack := b.hits.Load()
	waitFor(t, "requests to reach the restarted target", func() bool { return b.hits.Load() > hitsBack+50 })
	if n := failed.Load() - failedBefore; n != 0 {
		t.Errorf("%d requests failed while the target came back", n)
	}
	if g := healthyGauge(t, h, "api", b.url); g != 1 {
		t.Errorf("gateway_upstream_healthy of the restarted target %v, want 1", g)
	}
	log := h.log.String()
	for _, want := range []string{
		`"msg":"upstream target failed its health checks","route":"api","target":"` + b.url + `","reason":"health_check"`,
		// Back by its checks, which also end an ejection its failed
		// exchanges may have earned.
		`"msg":"upstream target back in rotation","route":"api","target":"` + b.url + `","reason":"health_check"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
}

// A target that answers 5xx in a row is ejected for base_time, twice as
// long at each ejection that follows, up to max_time; one that stays in
// rotation for max_time after its last ejection starts again from
// base_time. The gateway's clock alone decides.
func TestEjectionGrows(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	var badHits atomic.Int64
	bad := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		badHits.Add(1)
		if failing.Load() {
			w.WriteHeader(503)
		}
	})
	good := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: ["`+bad.URL+`", "`+good.URL+`"]
      eject: {consecutive_5xx: 2, base_time: 10s, max_time: 40s}
`, nil)
	failing.Store(true)
	// eject sends requests until the bad target has had two more, and
	// checks the ejection that follows.
	eject := func(n int, want time.Duration) {
		t.Helper()
		start := badHits.Load()
		for i := 0; badHits.Load() < start+2; i++ {
			if i > 10 {
				t.Fatalf("ejection %d: the bad target had %d requests of 10", n, badHits.Load()-start)
			}
			drain(h.do("GET", "/api/x", nil, nil))
		}
		s := targetStatus(t, h.gw, "api", bad.URL)
		if s.State != upstream.StateEjected || s.Ejections != n || s.EjectedUntil == nil || s.EjectedUntil.Sub(s.Since) != want {
			t.Fatalf("ejection %d: %+v, want ejected for %v", n, s, want)
		}
		if g := healthyGauge(t, h, "api", bad.URL); g != 0 {
			t.Fatalf("ejection %d: gateway_upstream_healthy %v, want 0", n, g)
		}
		// While it is out, the other target takes every request.
		for range 4 {
			resp := h.do("GET", "/api/x", nil, nil)
			if drain(resp); resp.StatusCode != 200 {
				t.Fatalf("ejection %d: %d from the target in rotation", n, resp.StatusCode)
			}
		}
		if got := badHits.Load() - start; got != 2 {
			t.Fatalf("ejection %d: the ejected target had %d requests", n, got-2)
		}
		h.clock.Step(want)
	}
	eject(1, 10*time.Second)
	eject(2, 20*time.Second)
	eject(3, 40*time.Second)
	eject(4, 40*time.Second)
	// Back in rotation, and sound, for max_time: the count starts again.
	failing.Store(false)
	drain(h.do("GET", "/api/x", nil, nil))
	if s := targetStatus(t, h.gw, "api", bad.URL); s.State != upstream.StateHealthy {
		t.Fatalf("after its ejection: %+v", s)
	}
	if g := healthyGauge(t, h, "api", bad.URL); g != 1 {
		t.Fatalf("after its ejection: gateway_upstream_healthy %v, want 1", g)
	}
	h.clock.Step(40 * time.Second)
	failing.Store(true)
	eject(1, 10*time.Second)

	log := h.log.String()
	for _, want := range []string{
		`"msg":"upstream target ejected","route":"api","target":"` + bad.URL + `","reason":"consecutive_5xx","ejected_for":20,"ejections":2`,
		`"msg":"upstream target back in rotation","route":"api","target":"` + bad.URL + `","reason":"ejection_ended"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
}

// Connections refused in a row eject a target too; when every target is
// ejected they are asked all the same, so that the route learns of the
// one that comes back.
func TestEjectionRefused(t *testing.T) {
	t.Parallel()
	a, b := newTarget(t), newTarget(t)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: ["`+a.url+`", "`+b.url+`"]
      eject: {consecutive_failures: 2, base_time: 1h, max_time: 1h}
`, nil)
	b.kill()
	// A POST is not tried on another target after a refusal.
	for i := 0; targetStatus(t, h.gw, "api", b.url).State != upstream.StateEjected; i++ {
		if i > 20 {
			t.Fatalf("not ejected after 20 requests: %+v", targetStatus(t, h.gw, "api", b.url))
		}
		h.clock.Step(upstream.EjectFor) // past the pass-over of a refused target
		drain(h.do("POST", "/api/x", nil, strings.NewReader("body")))
	}
	a.kill()
	for i := 0; targetStatus(t, h.gw, "api", a.url).State != upstream.StateEjected; i++ {
		if i > 20 {
			t.Fatalf("not ejected after 20 requests: %+v", targetStatus(t, h.gw, "api", a.url))
		}
		h.clock.Step(upstream.EjectFor)
		drain(h.do("POST", "/api/x", nil, strings.NewReader("body")))
	}
	a.restart()
	resp := h.do("GET", "/api/x", nil, nil)
	if body := drain(resp); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("every target ejected, one back: %d %q", resp.StatusCode, body)
	}
}

// A route whose every target fails its checks answers 502
// upstream_unavailable without asking any, and the breaker does not count
// the answer: no exchange took place.
func TestNoHealthyTarget(t *testing.T) {
	t.Parallel()
	a, b := newTarget(t), newTarget(t)
	a.healthStatus.Store(503)
	b.healthStatus.Store(500)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	h := newHarness(t, `
admin: {listen: ""}
server: {access_log: `+accessLog+`}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: ["`+a.url+`", "`+b.url+`"]
      connect_timeout: 1h
      timeout: 1h
      health: {path: /healthz, interval: 300ms, timeout: 250ms, unhealthy_after: 1, healthy_after: 1}
    breaker: {enabled: true, min_calls: 1, failure_rate: 0.1}
`, nil)
	waitFor(t, "both targets to fail their checks", func() bool {
		return targetStatus(t, h.gw, "api", a.url).State == upstream.StateUnhealthy &&
			targetStatus(t, h.gw, "api", b.url).State == upstream.StateUnhealthy
	})
	for range 5 {
		answerOf(t, h.do("GET", "/api/x", nil, nil), 502, "upstream_unavailable")
		answerOf(t, h.do("POST", "/api/x", nil, strings.NewReader("body")), 502, "upstream_unavailable")
	}
	if n := a.hits.Load() + b.hits.Load(); n != 0 {
		t.Errorf("the targets had %d requests", n)
	}
	if bs := h.gw.Breakers(); len(bs) != 1 || bs[0].State != "CLOSED" || bs[0].Calls != 0 {
		t.Errorf("breaker %+v, want CLOSED with no calls", bs)
	}
	if log := h.log.String(); !strings.Contains(log, `"kind":"no_healthy_target"`) {
		t.Errorf("the log lacks the failure's kind:\n%s", log)
	}
	waitFor(t, "the access log's 10 lines", func() bool {
		data, _ := os.ReadFile(accessLog)
		return strings.Count(string(data), `"status":502,`) == 10
	})
	data, _ := os.ReadFile(accessLog)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.Contains(line, `"outcome":"admitted","error":"no_healthy_target"}`) || strings.Contains(line, `"upstream"`) {
			t.Errorf("access log line %s", line)
		}
	}
	s := targetStatus(t, h.gw, "api", a.url)
	if s.LastCheck == nil || s.LastCheck.OK || s.LastCheck.Result != "503" || s.LastCheck.Failed < 1 {
		t.Errorf("last check %+v", s.LastCheck)
	}
	a.healthStatus.Store(200)
	waitFor(t, "a target to pass its checks", func() bool {
		return targetStatus(t, h.gw, "api", a.url).State == upstream.StateHealthy
	})
	resp := h.do("GET", "/api/x", nil, nil)
	if drain(resp); resp.StatusCode != 200 || a.hits.Load() != 1 {
		t.Fatalf("%d, %d requests at the healthy target", resp.StatusCode, a.hits.Load())
	}
}

// least_request sends a request to the target with the fewest in
// flight, an answer whose body still streams included.
func TestLeastRequest(t *testing.T) {
	t.Parallel()
	a, b := newTarget(t), newTarget(t)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /**}
    upstream:
      targets: ["`+a.url+`", "`+b.url+`"]
      balance: least_request
`, nil)
	var held []*http.Response
	defer func() {
		for _, resp := range held {
			resp.Body.Close()
		}
	}()
	// Two held on one target, one on the other: the head came, the body
	// waits.
	for range 3 {
		held = append(held, h.do("GET", "/hold", nil, nil))
	}
	busy, idle := a, b
	if b.holding.Load() > a.holding.Load() {
		busy, idle = b, a
	}
	if busy.holding.Load() != 2 || idle.holding.Load() != 1 {
		t.Fatalf("held %d and %d, want 2 and 1", busy.holding.Load(), idle.holding.Load())
	}
	busyHits, idleHits := busy.hits.Load(), idle.hits.Load()
	for range 10 {
		drain(h.do("GET", "/quick", nil, nil))
	}
	if busy.hits.Load() != busyHits || idle.hits.Load() != idleHits+10 {
		t.Errorf("quick requests: %d to the busier target, %d to the other; want 0 and 10",
			busy.hits.Load()-busyHits, idle.hits.Load()-idleHits)
	}
	if s := targetStatus(t, h.gw, "api", busy.url); s.InFlight == nil || *s.InFlight != 2 {
		t.Errorf("in flight %v, want 2: %+v", s.InFlight, s)
	}
	a.unblock()
	b.unblock()
	for _, resp := range held {
		if body := drain(resp); body != "released" {
			t.Errorf("held body %q", body)
		}
	}
	held = nil
	waitFor(t, "nothing in flight", func() bool {
		return *targetStatus(t, h.gw, "api", a.url).InFlight == 0 && *targetStatus(t, h.gw, "api", b.url).InFlight == 0
	})
	// Even again: round robin between equals.
	a0, b0 := a.hits.Load(), b.hits.Load()
	for range 10 {
		drain(h.do("GET", "/quick", nil, nil))
	}
	if a.hits.Load()-a0 != 5 || b.hits.Load()-b0 != 5 {
		t.Errorf("between idle targets: %d and %d of 10", a.hits.Load()-a0, b.hits.Load()-b0)
	}
}

// least_request over a single target counts its requests in flight too,
// so that the routes' view shows in_flight whenever the balance is
// least_request.
func TestLeastRequestOneTarget(t *testing.T) {
	t.Parallel()
	a := newTarget(t)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["`+a.url+`"], balance: least_request}
`, nil)
	held := h.do("GET", "/hold", nil, nil)
	defer held.Body.Close()
	if s := targetStatus(t, h.gw, "api", a.url); s.InFlight == nil || *s.InFlight != 1 {
		t.Errorf("in flight %v, want 1: %+v", s.InFlight, s)
	}
	a.unblock()
	if body := drain(held); body != "released" {
		t.Errorf("held body %q", body)
	}
	waitFor(t, "nothing in flight", func() bool {
		n := targetStatus(t, h.gw, "api", a.url).InFlight
		return n != nil && *n == 0
	})
}

// A reload that keeps a route and its targets keeps what their checks
// found, restarts the checks whose settings changed, and stops those of
// the targets it removes or whose checks it turns off; Close stops them
// all.
func TestHealthReload(t *testing.T) {
	t.Parallel()
	a, b := newTarget(t), newTarget(t)
	a.healthStatus.Store(503)
	tmpl := `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: [TARGETS]
      health: HEALTH
`
	conf := func(targets, health string) string {
		return strings.NewReplacer("TARGETS", targets, "HEALTH", health).Replace(tmpl)
	}
	both := `"` + a.url + `", "` + b.url + `"`
	checks := `{path: /healthz, interval: 100ms, timeout: 80ms, unhealthy_after: 1}`
	h := newHarness(t, conf(both, checks), nil)
	hr := h.gw.health
	waitFor(t, "the first target to fail its checks", func() bool {
		return targetStatus(t, h.gw, "api", a.url).State == upstream.StateUnhealthy
	})
	if n := hr.Checkers(); n != 2 {
		t.Fatalf("%d checkers, want 2", n)
	}
	since := targetStatus(t, h.gw, "api", a.url).Since
	reload := func(yaml string) {
		t.Helper()
		if err := h.gw.Reload(mustParse(t, yaml)); err != nil {
			t.Fatal(err)
		}
	}
	// The same route, a limit added: the states and checkers stay.
	reload(conf(both, checks) + "    limits: [{name: all, key: [route], rate: 1000/s}]\n")
	if s := targetStatus(t, h.gw, "api", a.url); s.State != upstream.StateUnhealthy || !s.Since.Equal(since) {
		t.Errorf("after a reload that kept the target: %+v", s)
	}
	if n := hr.Checkers(); n != 2 {
		t.Errorf("%d checkers, want 2", n)
	}
	// Other check settings: new checkers on the same states.
	checksA := a.checks.Load()
	reload(conf(both, `{path: /healthz, interval: 120ms, timeout: 80ms, unhealthy_after: 1, healthy_after: 1}`))
	if s := targetStatus(t, h.gw, "api", a.url); s.State != upstream.StateUnhealthy {
		t.Errorf("after new check settings: %+v", s)
	}
	waitFor(t, "the new checker to check", func() bool { return a.checks.Load() > checksA })
	if n := hr.Checkers(); n != 2 {
		t.Errorf("%d checkers, want 2", n)
	}
	// One target removed: its checker stops.
	reload(conf(`"`+a.url+`"`, checks))
	if n := hr.Checkers(); n != 1 {
		t.Errorf("%d checkers after removing a target, want 1", n)
	}
	// A check the stopped checker had sent may still reach the target,
	// which counts it on arrival: the count is taken once it has stood
	// still for three intervals.
	stopped := b.checks.Load()
	for still, tries := 0, 0; still < 3; tries++ {
		if tries == 30 {
			t.Fatalf("the removed target is still checked 3 s after its checker stopped")
		}
		time.Sleep(100 * time.Millisecond)
		if n := b.checks.Load(); n != stopped {
			stopped, still = n, 0
		} else {
			still++
		}
	}
	// Checks turned off: the target they took out is back.
	reload(conf(`"`+a.url+`"`, `{interval: 0s}`))
	if n := hr.Checkers(); n != 0 {
		t.Errorf("%d checkers without checks, want 0", n)
	}
	if s := targetStatus(t, h.gw, "api", a.url); s.State != upstream.StateHealthy || s.LastCheck != nil {
		t.Errorf("with checks turned off: %+v", s)
	}
	resp := h.do("GET", "/api/x", nil, nil)
	if drain(resp); resp.StatusCode != 200 {
		t.Errorf("with checks turned off: %d", resp.StatusCode)
	}
	if b.checks.Load() != stopped {
		t.Errorf("the removed target was checked %d times more", b.checks.Load()-stopped)
	}
	reload(conf(both, checks))
	if n := hr.Checkers(); n != 2 {
		t.Errorf("%d checkers, want 2", n)
	}
	h.gw.Close()
	if n := hr.Checkers(); n != 0 {
		t.Errorf("%d checkers after Close, want 0", n)
	}
	// A reload after Close starts none.
	if err := h.gw.Reload(mustParse(t, conf(both, checks))); err == nil {
		if n := hr.Checkers(); n != 0 {
			t.Errorf("%d checkers after a reload that followed Close", n)
		}
	}
}

// GET /admin/routes' answer, as the admin API encodes it.
func TestRoutesJSON(t *testing.T) {
	t.Parallel()
	a := newTarget(t)
	a.healthStatus.Store(503)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: ["`+a.url+`"]
      health: {path: /healthz, interval: 1s, timeout: 900ms, unhealthy_after: 1}
`, nil)
	waitFor(t, "the target to fail its checks", func() bool {
		return targetStatus(t, h.gw, "api", a.url).State == upstream.StateUnhealthy
	})
	data, err := json.Marshal(h.gw.Routes())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0]["route"] != "api" || got[0]["balance"] != "round_robin" || got[0]["health_checks"] != true {
		t.Fatalf("routes %s", data)
	}
	ts := got[0]["targets"].([]any)[0].(map[string]any)
	lc, _ := ts["last_check"].(map[string]any)
	if ts["target"] != a.url || ts["state"] != "unhealthy" || ts["since"] == nil || lc == nil || lc["ok"] != false || lc["result"] != "503" {
		t.Errorf("target %s", data)
	}
	if _, ok := ts["in_flight"]; ok {
		t.Errorf("in_flight without least_request: %s", data)
	}
	if g := healthyGauge(t, h, "api", a.url); g != 0 {
		t.Errorf("gateway_upstream_healthy %v, want 0", g)
	}
}

// A target starts in rotation, active checks or not: until its first
// check ends, requests reach it.
func TestHealthStartsHealthy(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var checking atomic.Int64
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checking.Add(1)
			<-release // the first check does not end while the test runs
			return
		}
		io.WriteString(w, "ok")
	})
	defer close(release)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: ["{{UP}}"]
      health: {path: /healthz, interval: 1h, timeout: 30m}
`, up)
	waitFor(t, "the first check to begin", func() bool { return checking.Load() == 1 })
	s := targetStatus(t, h.gw, "api", up.URL)
	if s.State != upstream.StateHealthy || s.LastCheck != nil {
		t.Fatalf("before its first check: %+v", s)
	}
	if g := healthyGauge(t, h, "api", up.URL); g != 1 {
		t.Errorf("gateway_upstream_healthy %v, want 1", g)
	}
	resp := h.do("GET", "/api/x", nil, nil)
	if body := drain(resp); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("before its first check: %d %q", resp.StatusCode, body)
	}
}

// Active checks end an ejection: early once healthy_after checks passed
// since it began, and when it is over without waiting for a request.
func TestEjectionEndedByChecks(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	bad := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && failing.Load() {
			w.WriteHeader(503)
		}
	})
	good := newBackend(t, nil)
	tmpl := `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream:
      targets: ["` + bad.URL + `", "` + good.URL + `"]
      eject: {consecutive_5xx: 1, base_time: 1h, max_time: 1h}
      health: HEALTH
`
	// A healthy_after no check reaches while the test runs: only the
	// end of the ejection brings the target back.
	h := newHarness(t, strings.Replace(tmpl, "HEALTH", `{path: /healthz, interval: 200ms, timeout: 190ms, healthy_after: 1000000}`, 1), nil)
	failing.Store(true)
	ejectBad := func() {
		t.Helper()
		for i := 0; targetStatus(t, h.gw, "api", bad.URL).State != upstream.StateEjected; i++ {
			if i > 10 {
				t.Fatal("not ejected after 10 requests")
			}
			drain(h.do("GET", "/api/x", nil, nil))
		}
	}
	ejectBad()
	h.clock.Step(time.Hour)
	waitFor(t, "a check to find the ejection over", func() bool {
		return strings.Contains(h.log.String(), `"msg":"upstream target back in rotation","route":"api","target":"`+bad.URL+`","reason":"ejection_ended"`)
	})
	if s := targetStatus(t, h.gw, "api", bad.URL); s.State != upstream.StateHealthy {
		t.Fatalf("after its ejection: %+v", s)
	}

	// healthy_after 2: two checks that pass after the ejection end it.
	if err := h.gw.Reload(mustParse(t, strings.Replace(tmpl, "HEALTH", `{path: /healthz, interval: 200ms, timeout: 190ms, healthy_after: 2}`, 1))); err != nil {
		t.Fatal(err)
	}
	ejectBad()
	waitFor(t, "two checks to end the ejection", func() bool {
		return targetStatus(t, h.gw, "api", bad.URL).State == upstream.StateHealthy
	})
	if log := h.log.String(); !strings.Contains(log, `"msg":"upstream target back in rotation","route":"api","target":"`+bad.URL+`","reason":"health_check"`) {
		t.Errorf("the log lacks the early end:\n%s", log)
	}
	if s := targetStatus(t, h.gw, "api", bad.URL); s.Ejections != 2 || s.LastCheck == nil || s.LastCheck.Passed < 2 {
		t.Errorf("after the early end: %+v", s)
	}
}
