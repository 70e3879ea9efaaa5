package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-gw/floodgate/rehearse"
)

// A protected route in front of the mock API (`floodgate upstream`), whose
// capacity is 100 requests a second: offered 300 a second, protection
// learns a limit near the capacity from where it started (1,000), turns
// the rest away with 503 overloaded and Retry-After, and what reaches the
// API settles near what it can take.
func TestProtectLearnsTheCapacity(t *testing.T) {
	t.Parallel()
	const capacity = 100
	mock, err := rehearse.NewUpstream(rehearse.UpstreamConfig{
		Latency: 200 * time.Millisecond, Capacity: capacity, OverloadLatency: time.Second, Body: "ok",
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var reached sync.Map // second -> *atomic.Int64: requests the API got
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := reached.LoadOrStore(time.Now().Unix(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		mock.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
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
