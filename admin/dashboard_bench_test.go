package admin

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkDashboardJSON is one poll of the page, with the series of 10
// routes, on a gateway of 100 and of 1,000 routes with a full history.
func BenchmarkDashboardJSON(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			fb := &fakeBackend{}
			fb.cfg.Store(parseConfig(b, "tok"))
			reg := prometheus.NewRegistry()
			requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_http_requests_total"}, []string{"route", "code"})
			limited := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_rate_limited_total"}, []string{"route", "limit"})
			dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gateway_request_duration_seconds",
				Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"route"})
			reg.MustRegister(requests, limited, dur)
			h := NewHandler(fb, reg, slog.New(slog.DiscardHandler))
			defer h.Close()
			now := time.Now()
			for k := range historyLen + 1 {
				for i := range n {
					r := fmt.Sprintf("route-%d", i)
					requests.WithLabelValues(r, "200").Add(float64(i))
					requests.WithLabelValues(r, "429").Add(1)
					limited.WithLabelValues(r, "user").Add(1)
					dur.WithLabelValues(r).Observe(float64(i%50) / 1000)
				}
				h.h.hist.take(now.Add(time.Duration(k) * sampleEvery))
			}
			q := "/dashboard.json?since=0"
			for i := range 10 {
				q += fmt.Sprintf("&route=route-%d", i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:9090"+q, nil))
				if w.Code != 200 {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
