package gateway

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/floodgate-gw/floodgate/config"
)

// The allocations of one request through ServeHTTP, in every goroutine
// (the upstream client's included; the upstream below allocates nothing
// per request). Each is a ceiling, pinned at what the request allocates
// today: a change that adds an allocation to the request path fails
// TestRequestAllocs, and one that removes allocations lowers the
// constant with it.
const (
	// allocsProxied: a request proxied by a route without limits.
	allocsProxied = 11
	// allocsProxiedFourLimits: the same through the seeds' four
	// fixed-window limits (global, api, user, ip) on the memory store,
	// all admitting.
	allocsProxiedFourLimits = 13
	// allocsRejected: a request that a per-user limit on the memory
	// store rejects with a 429.
	allocsRejected = 0
)

// TestRequestAllocs pins the allocations of a proxied request without
// limits and with four memory limits, and of a rejected one, through
// ServeHTTP, with an in-memory response writer (BenchmarkReject's) and an
// upstream over loopback that answers every request with the same bytes.
func TestRequestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes what allocates")
	}
	up := cannedUpstream(t)
	four := `
global_limits: [{name: global, key: [global], rate: 100000000/s}]
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://` + up + `"]}
    limits:
      - {name: api, key: [route], rate: 100000000/s}
      - {name: user, key: ["header:X-User-Id", path], fallback: [ip], rate: 1000000/10s}
      - {name: ip, key: [ip], rate: 1000000/min}
`
	for _, tc := range []struct {
		name   string
		yaml   string
		status int
		pin    float64
	}{
		{"proxied", `
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://` + up + `"]}
`, 200, allocsProxied},
		{"proxied_four_limits", four, 200, allocsProxiedFourLimits},
		{"rejected", `
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://` + up + `"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 1/1h}
`, 429, allocsRejected},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("allocs.yaml", []byte("admin: {listen: \"\"}\n"+tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			gw, err := New(cfg, Options{Logger: discardLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			r := httptest.NewRequest("GET", "/api/activities/lucky-meal/receive", nil)
			r.Header.Set("X-User-Id", "u1")
			r.Header.Set("X-Request-Id", "req-1")
			w := &rejectWriter{h: http.Header{}}
			serve := func() {
				// What the gateway set on the request the last time
				// (the X-Forwarded fields of the request it sent on).
				delete(r.Header, "X-Forwarded-For")
				delete(r.Header, "X-Forwarded-Proto")
				delete(r.Header, "X-Forwarded-Host")
				clear(w.h)
				w.code = 0
				gw.ServeHTTP(w, r)
			}
			// The first request of a user is admitted; the second,
			// for the rejecting limit, is the first one rejected.
			for range 2 {
				serve()
			}
			if w.code != tc.status {
				t.Fatalf("status %d, want %d", w.code, tc.status)
			}
			n := testing.AllocsPerRun(1000, serve)
			if w.code != tc.status {
				t.Fatalf("status %d, want %d", w.code, tc.status)
			}
			switch {
			case n > tc.pin:
				t.Errorf("%v allocations per request, the ceiling is %v: find the new one (go test -bench, -memprofile), or raise the ceiling with a reason", n, tc.pin)
			case n < tc.pin:
				t.Errorf("%v allocations per request, fewer than the ceiling %v: lower the ceiling to %v", n, tc.pin, n)
			}
		})
	}
}

// cannedUpstream serves HTTP/1.1 on a loopback port, answering each
// request head (no body: the test sends none) with the same 200 "ok",
// out of one buffer per connection, so that it allocates nothing per
// request. It returns the address.
func cannedUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
	end := []byte("\r\n\r\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				n := 0
				for {
					i := bytes.Index(buf[:n], end)
					if i < 0 {
						if n == len(buf) {
							return
						}
						m, err := c.Read(buf[n:])
						if err != nil {
							return
						}
						n += m
						continue
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
					n = copy(buf, buf[i+len(end):n])
				}
			}()
		}
	}()
	return ln.Addr().String()
}
