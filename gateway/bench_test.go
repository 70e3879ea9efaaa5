package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// BenchmarkServeHTTP measures the gateway's handler on one request, from
// routing to the end of the upstream exchange, with a real upstream over
// loopback and an in-memory response writer: the gateway's own cost,
// without the client's. The limits are four fixed windows, global, api,
// user and ip (a flash sale's usual set), on the memory store and on a
// Redis started for the run, with users varied per request.
func BenchmarkServeHTTP(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	srv := testredis.Start(b)
	for _, tc := range []struct{ name, limits string }{
		{"no_limits", ""},
		{"four_fixed_memory", `
global_limits: [{name: global, key: [global], rate: 100000000/s}]
`},
		{"four_fixed_redis", `
store: {type: redis, redis: {addrs: ["` + srv.Addr() + `"]}}
global_limits: [{name: global, key: [global], rate: 100000000/s}]
`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			yaml := "admin: {listen: \"\"}\n" + tc.limits + `
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["` + up.URL + `"]}
`
			if tc.limits != "" {
				yaml += `    limits:
      - {name: api, key: [route], rate: 100000000/s}
      - {name: user, key: ["header:X-User-Id", path], fallback: [ip], rate: 1000000/10s}
      - {name: ip, key: [ip], rate: 1000000/min}
`
			}
			cfg := mustParseB(b, yaml)
			gw, err := New(cfg, Options{Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					req := httptest.NewRequest("GET", "/api/activities/lucky-meal/receive", nil)
					req.Header.Set("X-User-Id", strconv.Itoa(i%100000))
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
