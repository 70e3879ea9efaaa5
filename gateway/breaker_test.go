package gateway

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const breakerConfig = `
admin: {listen: ""}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"], timeout: 300ms}
    limits: [{name: user, key: ["header:X-User-Id"], rate: 1000/min}]
    breaker:
      enabled: true
      window: 10s
      min_calls: 10
      failure_rate: 0.5
      slow_call_duration: 100ms
      slow_call_rate: 0.8
      open_for: 300ms
      half_open_calls: 3
    fallback:
      status: 503
      code: coupon_busy
      message: "The coupon system is busy; your entry is recorded"
`

// flakyUpstream fails, hangs or answers as told.
type flakyUpstream struct {
	mode atomic.Value // "ok", "fail", "slow", "hang"
	*backend
}

func newFlaky(t *testing.T) *flakyUpstream {
	f := &flakyUpstream{}
	f.mode.Store("ok")
	f.backend = newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch f.mode.Load() {
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "slow":
			time.Sleep(150 * time.Millisecond)
			w.Write([]byte("slow"))
		case "hang": // until the gateway gives up the exchange
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			w.Write([]byte("ok"))
		}
	})
	return f
}

func TestBreakerCycle(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	// The trials below wait for each other at the upstream; on a busy
	// machine that takes longer than breakerConfig's 300 ms timeout, and
	// its 100 ms slow call, which would fail them for a reason that is
	// not the breaker's (TestBreakerSlowCalls is about slow calls).
	cfg := strings.Replace(breakerConfig, "timeout: 300ms", "timeout: 10s", 1)
	h := newHarness(t, strings.Replace(cfg, "slow_call_duration: 100ms", "slow_call_duration: 10s", 1), up.backend)
	user := map[string]string{"X-User-Id": "u1"}
	call := func() *http.Response { return h.do("GET", "/coupon", user, nil) }

	up.mode.Store("fail")
	for i := range 10 {
		resp := call()
		drain(resp)
		if resp.StatusCode != 500 {
			t.Fatalf("call %d: %d, want the upstream's 500 while the breaker is closed", i, resp.StatusCode)
		}
	}
	// 10 calls, all failed: open. The next request never reaches the
	// upstream, takes no quota, and says when to come back.
	hits := up.hits.Load()
	before, _ := h.gw.LimitState(context.Background(), "coupon", "user", []string{"u1"}, false)
	resp := call()
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra != 1 {
		t.Errorf("Retry-After %q, want 1 (open_for 300ms rounded up)", resp.Header.Get("Retry-After"))
	}
	m := answerOf(t, resp, 503, "coupon_busy")
	if m["message"] != "The coupon system is busy; your entry is recorded" {
		t.Errorf("message %v", m["message"])
	}
	after, _ := h.gw.LimitState(context.Background(), "coupon", "user", []string{"u1"}, false)
	if up.hits.Load() != hits || after.Remaining != before.Remaining {
		t.Fatalf("an open breaker let a request through or took quota: hits %d→%d, remaining %d→%d", hits, up.hits.Load(), before.Remaining, after.Remaining)
	}
	if g := gaugeValue(t, h, "gateway_circuit_breaker_state", "coupon"); g != 1 {
		t.Errorf("state gauge %v, want 1", g)
	}

	// After open_for, exactly half_open_calls trials go through.
	h.clock.Step(350 * time.Millisecond)
	up.mode.Store("ok")
	release := make(chan struct{})
	var gate sync.WaitGroup
	gate.Add(3)
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		gate.Done()
		<-release
		w.Write([]byte("ok"))
	}
	var wg sync.WaitGroup
	var trialsOK atomic.Int64
	for range 3 {
		wg.Go(func() {
			if resp := call(); drain(resp) == "ok" {
				trialsOK.Add(1)
			}
		})
	}
	gate.Wait()
	answerOf(t, call(), 503, "coupon_busy") // a 4th request while 3 trials run
	close(release)
	wg.Wait()
	if trialsOK.Load() != 3 {
		t.Fatalf("%d of 3 trials passed", trialsOK.Load())
	}
	up.backend.handler = func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }
	if resp := call(); drain(resp) != "ok" {
		t.Fatalf("after 3 good trials the breaker should be closed: %d", resp.StatusCode)
	}
	if n := counterValue(t, h, "gateway_circuit_breaker_transitions_total", map[string]string{"route": "coupon", "from": "HALF_OPEN", "to": "CLOSED"}); n != 1 {
		t.Errorf("HALF_OPEN→CLOSED counted %v times", n)
	}
	// The open breaker's answer and the one while the trials ran, not
	// the upstream's own 500s.
	if n := counterValue(t, h, "gateway_circuit_breaker_refused_total", map[string]string{"route": "coupon"}); n != 2 {
		t.Errorf("gateway_circuit_breaker_refused_total = %v, want 2", n)
	}
	if !strings.Contains(h.log.String(), `"msg":"circuit breaker OPEN"`) {
		t.Errorf("no WARN line for the transition: %s", h.log.String())
	}
}

func TestBreakerSlowCalls(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	h := newHarness(t, breakerConfig, up.backend)
	up.mode.Store("slow")
	for range 10 {
		drain(h.do("GET", "/coupon", map[string]string{"X-User-Id": "u"}, nil))
	}
	answerOf(t, h.do("GET", "/coupon", map[string]string{"X-User-Id": "u"}, nil), 503, "coupon_busy")
}

func TestBreakerIgnoresRejectedAndCancelled(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	// The route's timeout is 10 s: one that fired before a loaded
	// machine delivers a client's giving up would be a real failure.
	cfg := strings.Replace(breakerConfig, "rate: 1000/min", "rate: 1/min", 1)
	h := newHarness(t, strings.Replace(cfg, "timeout: 300ms", "timeout: 10s", 1), up.backend)
	up.mode.Store("fail")
	// One failure, then requests the limit rejects: they never reach the
	// upstream and must not count as calls.
	drain(h.do("GET", "/coupon", map[string]string{"X-User-Id": "u"}, nil))
	for range 20 {
		answerOf(t, h.do("GET", "/coupon", map[string]string{"X-User-Id": "u"}, nil), 429, "rate_limited")
	}
	// Clients that give up do not count either. The upstream hangs: a
	// slow answer could come before a loaded machine delivers a client's
	// 20 ms giving up, and count as the slow call it is.
	up.mode.Store("hang")
	slowFrom := up.hits.Load()
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/coupon", nil)
		req.Header.Set("X-User-Id", "c"+strconv.Itoa(i))
		if resp, err := h.srv.Client().Do(req); err == nil {
			drain(resp)
		}
		cancel()
	}
	// Every request reports to the breaker before ServeHTTP returns and
	// observes its duration: wait for the 21 before and every one of the
	// 20 that reached the upstream to have ended. (On a busy machine a
	// client may give up before its request reaches the gateway at all.)
	want := uint64(21 + up.hits.Load() - slowFrom)
	deadline := time.Now().Add(5 * time.Second)
	for histogramCount(t, h, "gateway_request_duration_seconds", "coupon") < want {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests ended", histogramCount(t, h, "gateway_request_duration_seconds", "coupon"), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, b := range h.gw.Breakers() {
		if b.State != "CLOSED" || b.Calls != 1 {
			t.Fatalf("breaker %+v: only the one real call may count", b)
		}
	}
}

func TestBreakerForcedAndReload(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	h := newHarness(t, breakerConfig, up.backend)
	if err := h.gw.ForceBreaker("coupon", "open", 0); err != nil {
		t.Fatal(err)
	}
	resp := h.do("GET", "/coupon", map[string]string{"X-User-Id": "u"}, nil)
	if resp.Header.Get("Retry-After") != "" {
		t.Error("a forced-open breaker has no next trial to announce")
	}
	answerOf(t, resp, 503, "coupon_busy")
	// A reload that leaves the breaker's settings alone keeps its state.
	if err := h.gw.Reload(mustParse(t, strings.ReplaceAll(breakerConfig, "{{UP}}", up.URL)+"\n")); err != nil {
		t.Fatal(err)
	}
	answerOf(t, h.do("GET", "/coupon", map[string]string{"X-User-Id": "u"}, nil), 503, "coupon_busy")
	if err := h.gw.ForceBreaker("coupon", "auto", 0); err != nil {
		t.Fatal(err)
	}
	if resp := h.do("GET", "/coupon", map[string]string{"X-User-Id": "u"}, nil); drain(resp) != "ok" {
		t.Fatalf("auto: %d", resp.StatusCode)
	}
	if err := h.gw.ForceBreaker("nope", "open", 0); err == nil {
		t.Fatal("forced a breaker of a route that has none")
	}
}

// A force with a ttl lasts that long and no longer, across a reload; a
// later force replaces it, ttl and all.
func TestBreakerForcedForAWhile(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	h := newHarness(t, breakerConfig, up.backend)
	state := func() string {
		for _, b := range h.gw.Breakers() {
			if b.Route == "coupon" {
				return fmt.Sprintf("%s forced=%v", b.State, b.Forced)
			}
		}
		return "none"
	}
	if err := h.gw.ForceBreaker("coupon", "OPEN", 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != "OPEN forced=true" {
		t.Fatalf("forced open for 300ms: %s", got)
	}
	if err := h.gw.Reload(mustParse(t, strings.ReplaceAll(breakerConfig, "{{UP}}", up.URL)+"\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for state() != "CLOSED forced=false" {
		if time.Now().After(deadline) {
			t.Fatalf("5 s after a force of 300ms: %s", state())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A force for a while, then one for good: the first one's end does
	// not lift the second.
	if err := h.gw.ForceBreaker("coupon", "open", 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.ForceBreaker("coupon", "closed", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if got := state(); got != "CLOSED forced=true" {
		t.Fatalf("a force for good after one of 100ms, 300ms on: %s", got)
	}
	for _, bad := range []struct {
		state string
		ttl   time.Duration
		want  string
	}{
		{"open", -time.Second, "ttl -1s: want a positive duration"},
		{"open", MaxForceTTL + time.Nanosecond, "ttl 168h0m0.000000001s is too long: at most 168h (7 days)"},
		{"closed", math.MaxInt64, "is too long: at most 168h (7 days)"},
		{"auto", time.Second, "ttl 1s: auto gives the breaker back to its window at once and takes no ttl"},
	} {
		if err := h.gw.ForceBreaker("coupon", bad.state, bad.ttl); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s for %v: %v, want %s", bad.state, bad.ttl, err, bad.want)
		}
	}
	if got := state(); got != "CLOSED forced=true" {
		t.Errorf("after the refused forces: %s", got)
	}
	// The ttl left shows while a force with one runs.
	if err := h.gw.ForceBreaker("coupon", "open", MaxForceTTL); err != nil {
		t.Fatal(err)
	}
	for _, b := range h.gw.Breakers() {
		if b.Route == "coupon" && (b.TTL <= 0 || b.TTL > MaxForceTTL.Seconds()) {
			t.Errorf("ttl left %v, want up to %v", b.TTL, MaxForceTTL.Seconds())
		}
	}
	if err := h.gw.ForceBreaker("coupon", "auto", 0); err != nil {
		t.Fatal(err)
	}
	for _, b := range h.gw.Breakers() {
		if b.TTL != 0 {
			t.Errorf("ttl left %v after auto", b.TTL)
		}
	}
}

// A reload that changes a route's breaker settings carries the breaker's
// state over: an open breaker stays open (an operator lengthening open_for
// during an outage must not let the traffic through), and a forced one
// stays forced.
func TestBreakerStateSurvivesNewSettings(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	h := newHarness(t, breakerConfig, up.backend)
	user := map[string]string{"X-User-Id": "u1"}
	up.mode.Store("fail")
	for range 10 {
		drain(h.do("GET", "/coupon", user, nil))
	}
	answerOf(t, h.do("GET", "/coupon", user, nil), 503, "coupon_busy")
	reload := func(openFor string) {
		t.Helper()
		src := strings.ReplaceAll(strings.Replace(breakerConfig, "open_for: 300ms", "open_for: "+openFor, 1), "{{UP}}", up.URL)
		if err := h.gw.Reload(mustParse(t, src)); err != nil {
			t.Fatal(err)
		}
	}
	reload("30s")
	up.mode.Store("ok")
	h.clock.Step(350 * time.Millisecond) // past the old open_for, not the new
	hits := up.hits.Load()
	resp := h.do("GET", "/coupon", user, nil)
	if ra, _ := strconv.Atoi(resp.Header.Get("Retry-After")); ra < 29 || ra > 30 {
		t.Errorf("Retry-After %q after open_for became 30s, want 29 or 30", resp.Header.Get("Retry-After"))
	}
	answerOf(t, resp, 503, "coupon_busy")
	if up.hits.Load() != hits {
		t.Error("a request reached the upstream after a reload changed the open breaker's settings")
	}
	if g := gaugeValue(t, h, "gateway_circuit_breaker_state", "coupon"); g != 1 {
		t.Errorf("state gauge %v after the reload, want 1", g)
	}
	if b := h.gw.Breakers(); len(b) != 1 || b[0].State != "OPEN" || b[0].Forced {
		t.Errorf("breakers %+v, want coupon OPEN, not forced", b)
	}

	if err := h.gw.ForceBreaker("coupon", "closed", 0); err != nil {
		t.Fatal(err)
	}
	reload("1s")
	if b := h.gw.Breakers(); len(b) != 1 || b[0].State != "CLOSED" || !b[0].Forced {
		t.Errorf("breakers %+v, want coupon forced CLOSED", b)
	}
	if resp := h.do("GET", "/coupon", user, nil); drain(resp) != "ok" {
		t.Errorf("forced closed after a reload: %d", resp.StatusCode)
	}
}

// A trial whose answer's head comes in time is judged by it, however long
// its body then streams: the upstream timeout counts to the head.
func TestBreakerTrialStreamsPastTimeout(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	h := newHarness(t, strings.Replace(breakerConfig, "half_open_calls: 3", "half_open_calls: 1", 1), up.backend)
	user := map[string]string{"X-User-Id": "u1"}
	up.mode.Store("fail")
	for range 10 {
		drain(h.do("GET", "/coupon", user, nil))
	}
	answerOf(t, h.do("GET", "/coupon", user, nil), 503, "coupon_busy")
	h.clock.Step(350 * time.Millisecond) // open_for
	up.backend.handler = func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for range 5 { // 500 ms, past the 300 ms timeout
			io.WriteString(w, "x")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}
	resp := h.do("GET", "/coupon", user, nil)
	if body := drain(resp); resp.StatusCode != 200 || body != "xxxxx" {
		t.Fatalf("the trial: %d %q", resp.StatusCode, body)
	}
	if b := h.gw.Breakers(); len(b) != 1 || b[0].State != "CLOSED" {
		t.Fatalf("breakers %+v after a good trial that streamed past the timeout, want CLOSED", b)
	}
	if resp := h.do("GET", "/coupon", user, nil); drain(resp) != "xxxxx" {
		t.Errorf("after the trial: %d", resp.StatusCode)
	}
	if n := counterValue(t, h, "gateway_circuit_breaker_transitions_total", map[string]string{"route": "coupon", "from": "HALF_OPEN", "to": "OPEN"}); n != 0 {
		t.Errorf("HALF_OPEN→OPEN counted %v times", n)
	}
}

func gaugeValue(t *testing.T, h *harness, name, route string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if route == "" && len(m.GetLabel()) == 0 {
					return m.GetGauge().GetValue()
				}
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "route" && lp.GetValue() == route {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	return -1
}

func histogramCount(t *testing.T, h *harness, name, route string) uint64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "route" && lp.GetValue() == route {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

// A client whose body is too long or breaks off says nothing about the
// upstream: the breaker does not count it.
func TestBreakerIgnoresClientBodyFailures(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	h := newHarness(t, strings.Replace(breakerConfig, "admin: {listen: \"\"}", "admin: {listen: \"\"}\nserver: {max_body_bytes: 64}", 1), up.backend)
	user := map[string]string{"X-User-Id": "u1"}
	for range 20 {
		// No Content-Length: the limit bites while the body streams.
		resp := h.do("POST", "/coupon", user, io.MultiReader(strings.NewReader(strings.Repeat("x", 100))))
		answerOf(t, resp, 413, "body_too_large")
	}
	if bs := h.gw.Breakers(); len(bs) != 1 || bs[0].State != "CLOSED" || bs[0].Calls != 0 {
		t.Fatalf("breakers after 20 oversized bodies: %+v, want closed with no call counted", bs)
	}
	if resp := h.do("GET", "/coupon", user, nil); drain(resp) != "ok" {
		t.Fatalf("after oversized bodies: %d", resp.StatusCode)
	}
	if bs := h.gw.Breakers(); bs[0].Calls != 1 {
		t.Fatalf("breaker calls %d after one answered request, want 1", bs[0].Calls)
	}
}
