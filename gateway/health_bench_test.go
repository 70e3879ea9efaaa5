package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkServeHTTPTargets is BenchmarkServeHTTP's request without
// limits over two targets: what choosing among them costs, by balance,
// with active checks running (their state is read on every pick).
func BenchmarkServeHTTPTargets(b *testing.B) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	a, c := httptest.NewServer(ok), httptest.NewServer(ok)
	defer a.Close()
	defer c.Close()
	for _, tc := range []struct{ name, upstream string }{
		{"round_robin", ``},
		{"round_robin_checked", `, health: {path: /healthz, interval: 2s}`},
		{"least_request_checked", `, balance: least_request, health: {path: /healthz, interval: 2s}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := mustParseB(b, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["`+a.URL+`", "`+c.URL+`"]`+tc.upstream+`}
`)
			gw, err := New(cfg, Options{Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := httptest.NewRequest("GET", "/api/activities/lucky-meal/receive", nil)
					w := httptest.NewRecorder()
					gw.ServeHTTP(w, req)
					if w.Code != 200 {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
			})
		})
	}
}
