package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

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
			serveUsers(b, gw)
		})
	}
}

// BenchmarkServeHTTPBreaker is BenchmarkServeHTTP's request through a
// CLOSED breaker, of scope instance and of scope fleet, on the Redis
// store with no limits: what a breaker costs a request. The fleet's
// breaker makes its Redis calls on its own tick, not per request; the
// run reports them as redis_calls/s (script calls, the round trips) and
// redis_cmds/s (every command, those the script runs included), from
// the server's INFO commandstats over the run.
func BenchmarkServeHTTPBreaker(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	srv := testredis.Start(b)
	for _, scope := range []string{"instance", "fleet"} {
		b.Run(scope, func(b *testing.B) {
			cfg := mustParseB(b, `
admin: {listen: ""}
store: {type: redis, redis: {addrs: ["`+srv.Addr()+`"]}}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["`+up.URL+`"]}
    breaker: {enabled: true, scope: `+scope+`}
`)
			gw, err := New(cfg, Options{Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			calls0, cmds0 := redisCommands(b, srv)
			start := time.Now()
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
			b.StopTimer()
			if d := time.Since(start); d > 2*fleetTick {
				calls, cmds := redisCommands(b, srv)
				b.ReportMetric(float64(calls-calls0)/d.Seconds(), "redis_calls/s")
				b.ReportMetric(float64(cmds-cmds0)/d.Seconds(), "redis_cmds/s")
			}
		})
	}
}

// redisCommands reads srv's counts of script calls and of all commands,
// less the INFO calls that read them.
func redisCommands(b *testing.B, srv *testredis.Server) (scripts, all int64) {
	b.Helper()
	for _, line := range strings.Split(srv.Do(b, "INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		v, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		all += n
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			scripts += n
		}
	}
	return scripts, all
}

// serveUsers runs b.N requests of 100,000 users through gw, from as many
// goroutines as GOMAXPROCS, and fails on an answer other than 200.
func serveUsers(b *testing.B, gw *Gateway) {
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
}
