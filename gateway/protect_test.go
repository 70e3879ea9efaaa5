package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-gw/floodgate/internal/protect"
	"github.com/floodgate-gw/floodgate/internal/upstream"
	"github.com/floodgate-gw/floodgate/rehearse"
)

// mockAPI serves the mock API of `floodgate upstream` (capacity a second
// in latency, 1 s past it), counting the requests it got each second.
func mockAPI(t *testing.T, capacity int, latency time.Duration) (*httptest.Server, *sync.Map) {
	t.Helper()
	mock, err := rehearse.NewUpstream(rehearse.UpstreamConfig{
		Latency: latency, Capacity: capacity, OverloadLatency: time.Second, Body: "ok",
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	reached := &sync.Map{} // second -> *atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := reached.LoadOrStore(time.Now().Unix(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	return up, reached
}

// A protected route in front of the mock API (`floodgate upstream`), whose
// capacity is 100 requests a second: offered 300 a second, protection
// learns a limit near the capacity from where it started (1,000), turns
// the rest away with 503 overloaded and Retry-After, and what reaches the
// API settles near what it can take.
func TestProtectLearnsTheCapacity(t *testing.T) {
	t.Parallel()
	const capacity = 100
	up, reached := mockAPI(t, capacity, 200*time.Millisecond)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["`+up.URL+`"], timeout: 700ms}
    protect: {min: 10, max: 1000}
`, nil)
	if got := h.gw.Protected(); len(got) != 1 || got[0].Limit != 1000 {
		t.Fatalf("protection before any request: %+v, want coupon at its max 1000", got)
	}
	var overloaded, retryAfter atomic.Int64
	stop := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	wg.Go(func() {
		for time.Now().Before(stop) {
			time.Sleep(250 * time.Millisecond)
			p := h.gw.Protected()[0]
			t.Logf("limit %.0f baseline %.3f", p.Limit, p.Baseline)
		}
	})
	for range 60 { // 60 clients, one request each 100 ms or as soon as the last is answered: 300 a second
		wg.Go(func() {
			for next := time.Now(); next.Before(stop); next = next.Add(100 * time.Millisecond) {
				time.Sleep(time.Until(next))
				resp := h.do("POST", "/coupon", nil, nil)
				if resp.StatusCode == http.StatusServiceUnavailable {
					if strings.Contains(drain(resp), `"code":"overloaded"`) {
						overloaded.Add(1)
					}
					if resp.Header.Get("Retry-After") == "1" {
						retryAfter.Add(1)
					}
					continue
				}
				drain(resp)
			}
		})
	}
	wg.Wait()
	limit := h.gw.Protected()[0].Limit
	t.Logf("limit %.0f, baseline %.3fs, %d overloaded", limit, h.gw.Protected()[0].Baseline, overloaded.Load())
	if limit > 1.2*capacity {
		t.Errorf("the learned limit is %.0f after 8 s at 3 × the capacity %d", limit, capacity)
	}
	if overloaded.Load() == 0 || retryAfter.Load() != overloaded.Load() {
		t.Errorf("%d answered overloaded, %d of them with Retry-After: 1", overloaded.Load(), retryAfter.Load())
	}
	if got := testutil.ToFloat64(h.gw.metrics.protectRefused.WithLabelValues("coupon")); got != float64(overloaded.Load()) {
		t.Errorf("gateway_protect_refused_total %v, want %d", got, overloaded.Load())
	}
	// The last three whole seconds: what reached the API stays near its
	// capacity.
	last := stop.Unix() - 1
	for s := last - 2; s <= last; s++ {
		if n, ok := reached.Load(s); !ok || n.(*atomic.Int64).Load() > 1.3*capacity {
			var got int64
			if ok {
				got = n.(*atomic.Int64).Load()
			}
			t.Errorf("second %d: %d requests reached the API of capacity %d", s-last+2, got, capacity)
		}
	}
}

// A request protection turns away gets the route's reject answer with
// Retry-After, the access log's outcome overloaded and, with
// fallback.record, an event of type overloaded; a gRPC call gets
// UNAVAILABLE. A reload that keeps the block keeps what was learned; one
// that changes it starts again.
func TestProtectTurnsAway(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	file := filepath.Join(t.TempDir(), "events.jsonl")
	stdout := &syncWriter{b: &strings.Builder{}}
	yaml := func(max string) string {
		return strings.ReplaceAll(`
admin: {listen: ""}
server: {access_log: stdout}
events:
  sink: file
  file: {path: "`+file+`"}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"]}
    fallback: {record: true}
    protect: {min: 0.1, max: `+max+`, reject: {code: busy, message: "Full; come back in a second"}}
`, "{{UP}}", up.URL)
	}
	h := newHarnessWith(t, yaml("0.1"), up, func(o *Options) { o.Stdout = stdout })
	// One in ten seconds: the first passes, the next is turned away,
	// however late a loaded machine sends it (at 1 a second, a machine
	// that took 0.9 s over the first let the second through).
	drain(h.do("POST", "/coupon", nil, nil))
	resp := h.do("POST", "/coupon", map[string]string{"X-User-Id": "u1"}, nil)
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	m := answerOf(t, resp, 503, "busy")
	if m["message"] != "Full; come back in a second" || m["recorded"] != true {
		t.Errorf("answer %v: want the reject's message, recorded", m)
	}
	var ev map[string]any
	for deadline := time.Now().Add(3 * time.Second); ev == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, _ := os.ReadFile(file)
		json.Unmarshal(data, &ev)
	}
	if ev["type"] != "overloaded" || ev["route"] != "coupon" || ev["path"] != "/coupon" {
		t.Errorf("event %v, want type overloaded of the route", ev)
	}
	var overloaded int
	for deadline := time.Now().Add(3 * time.Second); overloaded == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		overloaded = strings.Count(stdout.String(), `"outcome":"overloaded"`)
	}
	if overloaded != 1 {
		t.Errorf("%d access log lines with outcome overloaded, want 1:\n%s", overloaded, stdout.String())
	}
	// A reload that keeps the block keeps the protector; one that changes
	// it makes a new one, at its new start.
	before := h.gw.gen.Load().routes[0].protect
	if err := h.gw.Reload(mustParse(t, yaml("0.1"))); err != nil {
		t.Fatal(err)
	}
	if h.gw.gen.Load().routes[0].protect != before {
		t.Error("a reload that kept the protect block made a new protector")
	}
	if err := h.gw.Reload(mustParse(t, yaml("50"))); err != nil {
		t.Fatal(err)
	}
	if p := h.gw.Protected(); len(p) != 1 || p[0].Limit != 50 || p[0].Max != 50 {
		t.Errorf("after a reload to max 50: %+v", p)
	}
}

// A gRPC call protection turns away gets UNAVAILABLE, in a trailers-only
// answer.
func TestProtectTurnsAwayGRPC(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: g
    match: {path: /pkg.Svc/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c}
    protect: {min: 0.1, max: 0.1}
`, up.URL, nil)
	// One in ten seconds: the second call is turned away, however late a
	// loaded machine sends it.
	grpcCall(t, h, "/pkg.Svc/Call", "5S")
	resp, _ := grpcCall(t, h, "/pkg.Svc/Call", "5S")
	if st, msg := resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message"); st != "14" || !strings.Contains(msg, "capacity") {
		t.Errorf("grpc-status %q (%q), want 14 UNAVAILABLE with overloaded's message", st, msg)
	}
}

// When the route's breaker closes, the upstream behind it is coming back:
// admission warms up again from a tenth of the limit learned.
func TestProtectWarmsUpWhenTheBreakerCloses(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"]}
    breaker: {enabled: true}
    protect: {min: 1, max: 200, warm_up: 1s}
`, up)
	// The first requests warm up from 20 (a route starts idle); a second
	// later, and some ticks, admission is the limit: 200, or less if a
	// loaded machine's delays looked like overload and cut it (answers
	// over 25 ms, which a test under -race on two busy cores gives).
	for deadline := time.Now().Add(10 * time.Second); ; {
		drain(h.do("POST", "/coupon", nil, nil))
		if p := h.gw.Protected()[0]; p.Admitting == p.Limit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s of traffic: %+v, want admitting the limit", h.gw.Protected()[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := h.gw.ForceBreaker("coupon", "open", 0); err != nil {
		t.Fatal(err)
	}
	if err := h.gw.ForceBreaker("coupon", "auto", 0); err != nil {
		t.Fatal(err)
	}
	// A tenth of the limit learned, and no more than a tick's worth of
	// ramp above it should a tick come between.
	if p := h.gw.Protected()[0]; p.Admitting < max(p.Limit/10, 1) || p.Admitting > max(p.Limit*0.15, 1) {
		t.Errorf("when the breaker closed: admitting %v of a limit %v, want a tenth of it", p.Admitting, p.Limit)
	}
}

// BenchmarkServeHTTPProtect is BenchmarkServeHTTP's request without
// limits through a route's protection, at a limit it never reaches: what
// protection costs a request (an admission, and the count of its end).
func BenchmarkServeHTTPProtect(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	for _, tc := range []struct{ name, protect string }{
		{"off", ""},
		{"on", "    protect: {min: 1000000000, warm_up: 0s}\n"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := mustParseB(b, `admin: {listen: ""}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["`+up.URL+`"]}
`+tc.protect)
			gw, err := New(cfg, Options{Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			serveUsers(b, gw)
		})
	}
}

// With priority, when the limit binds the high level is admitted whole
// and the low one gets what is left; a value that is no level is the
// lowest; the refusals are counted by level.
func TestProtectPriority(t *testing.T) {
	t.Parallel()
	const capacity = 100
	up, _ := mockAPI(t, capacity, 50*time.Millisecond)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["`+up.URL+`"], timeout: 5s}
    protect:
      min: 5
      max: 80
      warm_up: 0s
      # Slow past 5 s, which the API never is, a max below its capacity,
      # so that its 1 s windows never overflow, and a 5 s timeout, which
      # a busy machine's delays never reach (timeouts cut the limit to
      # 23-38 under make check): the limit stays at its max, 80/s, and
      # binds. The learning is tested apart; this is the sharing of a
      # limit that binds.
      tolerance: 100
      priority: {key: "header:X-Priority", levels: [high, low], max_wait: 200ms}
`, nil)
	var offered, admitted [2]atomic.Int64
	stop := time.Now().Add(7 * time.Second)
	measure := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	// 40/s high, 100/s low: 140/s against a limit of 80/s.
	for i, level := range []string{"high", "whatever"} {
		for range []int{4, 10}[i] {
			wg.Go(func() {
				// Open loop: each request goes at its time in a goroutine
				// of its own, so that requests that wait for room or for a
				// slow machine do not thin the offered load below the
				// capacity, where the limit would not bind.
				var sends sync.WaitGroup
				defer sends.Wait()
				for next := time.Now(); next.Before(stop); next = next.Add(100 * time.Millisecond) {
					time.Sleep(time.Until(next))
					sent := time.Now()
					if sent.After(stop) {
						break
					}
					sends.Go(func() {
						resp := h.do("POST", "/coupon", map[string]string{"X-Priority": level}, nil)
						body := drain(resp)
						if sent.Before(measure) {
							return
						}
						offered[i].Add(1)
						// Admitted: what protection let through, answered
						// in time or not (the mock's 1 s windows overflow
						// now and then at a limit near its capacity).
						if !strings.Contains(body, `"code":"overloaded"`) {
							admitted[i].Add(1)
						}
					})
				}
			})
		}
	}
	wg.Wait()
	hi := float64(admitted[0].Load()) / float64(offered[0].Load())
	lo := float64(admitted[1].Load()) / float64(offered[1].Load())
	t.Logf("high: %d of %d admitted (%.0f%%); low: %d of %d (%.0f%%); limit %.0f", admitted[0].Load(), offered[0].Load(), 100*hi,
		admitted[1].Load(), offered[1].Load(), 100*lo, h.gw.Protected()[0].Limit)
	if hi < 0.95 {
		t.Errorf("%.0f%% of the high level admitted, want ≥ 95%%", 100*hi)
	}
	// What high leaves of 80/s is 40 of the low level's 100/s, 40 %: a
	// gate that let the low level through at will would admit nearly all.
	if lo == 0 || lo > 0.6 {
		t.Errorf("%.0f%% of the low level admitted, want what high leaves of 80/s: some, about 40 of 100/s", 100*lo)
	}
	m := h.gw.metrics.protectRefusedLevel
	if l, hr := testutil.ToFloat64(m.WithLabelValues("coupon", "low")), testutil.ToFloat64(m.WithLabelValues("coupon", "high")); l == 0 || hr > l/10 {
		t.Errorf("refused by level: high %v, low %v", hr, l)
	}
}

// What an exchange tells protection, by how it ended.
func TestProtectResult(t *testing.T) {
	ra := http.Header{"Retry-After": {"3"}}
	for _, tc := range []struct {
		name string
		res  upstream.Result
		h    http.Header
		want protect.Result
		wait time.Duration
	}{
		{"200", upstream.Result{End: upstream.Done, Status: 200}, nil, protect.Answered, 0},
		{"429 with Retry-After", upstream.Result{End: upstream.Done, Status: 429}, ra, protect.Throttled, 3 * time.Second},
		{"503", upstream.Result{End: upstream.Done, Status: 503}, nil, protect.Throttled, 0},
		{"502", upstream.Result{End: upstream.Done, Status: 502}, nil, protect.Failed, 0},
		{"404, the application's", upstream.Result{End: upstream.Done, Status: 404}, nil, protect.Dropped, 0},
		{"500, the application's", upstream.Result{End: upstream.Done, Status: 500}, nil, protect.Dropped, 0},
		{"no answer", upstream.Result{End: upstream.Failed}, nil, protect.Failed, 0},
		{"timed out", upstream.Result{End: upstream.TimedOut}, nil, protect.Failed, 0},
		{"the client left", upstream.Result{End: upstream.ClientGone}, nil, protect.Dropped, 0},
		{"the client's upload failed", upstream.Result{End: upstream.ClientBody}, nil, protect.Ignored, 0},
		{"gRPC UNAVAILABLE", upstream.Result{End: upstream.Done, Status: 200, GRPCFailed: 503}, nil, protect.Throttled, 0},
		{"gRPC RESOURCE_EXHAUSTED", upstream.Result{End: upstream.Done, Status: 200}, http.Header{"Grpc-Status": {"8"}, "Retry-After": {"2"}}, protect.Throttled, 2 * time.Second},
		{"gRPC NOT_FOUND", upstream.Result{End: upstream.Done, Status: 200}, http.Header{"Grpc-Status": {"5"}}, protect.Dropped, 0},
		{"gRPC OK", upstream.Result{End: upstream.Done, Status: 200}, http.Header{"Grpc-Status": {"0"}}, protect.Answered, 0},
	} {
		if got, wait := protectResult(&tc.res, tc.h, true); got != tc.want || wait != tc.wait {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, wait, tc.want, tc.wait)
		}
		// throttling: false, the upstream's 429 and 503 are its answers
		// to the request, as a 4xx.
		want := tc.want
		if want == protect.Throttled {
			want = protect.Dropped
		}
		if got, _ := protectResult(&tc.res, tc.h, false); got != want {
			t.Errorf("%s, throttling false: %v, want %v", tc.name, got, want)
		}
	}
}
