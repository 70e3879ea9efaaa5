package gateway

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const flashSale = `
admin: {listen: ""}
responses:
  system_busy: "Too busy, try again later"
global_limits:
  - name: global
    key: [global]
    rate: 2000/s
routes:
  - id: lucky-meal
    match: {path: /api/activities/lucky-meal/receive, methods: [POST]}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: api
        key: [route]
        algorithm: token_bucket
        rate: 800/s
        reject: {status: 429, code: system_busy}
      - name: user
        key: [header:X-User-Id, path]
        fallback: [ip]
        rate: 1/10s
        reject: {status: 429, code: repeat_apply, message: "You have already taken part"}
      - name: ip
        key: [ip]
        algorithm: sliding_window
        rate: 100/min
`

func TestRateLimitAnswers(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, flashSale, up)
	const path = "/api/activities/lucky-meal/receive"
	user := map[string]string{"X-User-Id": "42"}

	resp := h.do("POST", path, user, nil)
	drain(resp)
	if resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	// The user limit has the smallest share left (0 of 1).
	if got := resp.Header.Get("RateLimit-Policy"); got != `"user";q=1;w=10` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"user";r=0;t=`) {
		t.Errorf("RateLimit %q", got)
	}
	if resp.Header.Get("X-RateLimit-Limit") != "1" || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("X-RateLimit-* %v", resp.Header)
	}
	reset, _ := strconv.Atoi(resp.Header.Get("X-RateLimit-Reset"))
	if reset < 1 || reset > 10 {
		t.Errorf("X-RateLimit-Reset %d: seconds from now, not an epoch", reset)
	}

	m := answerOf(t, h.do("POST", path, user, nil), 429, "repeat_apply")
	if m["message"] != "You have already taken part" {
		t.Errorf("message %v", m["message"])
	}
	resp = h.do("POST", path, user, nil)
	drain(resp)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if ra < 1 || ra > 10 {
		t.Errorf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	if resp.Header.Get("RateLimit-Policy") != `"user";q=1;w=10` {
		t.Errorf("a rejection reports the limit that rejected: %q", resp.Header.Get("RateLimit-Policy"))
	}
	if up.hits.Load() != 1 {
		t.Fatalf("the upstream saw %d requests; rejected ones must never reach it", up.hits.Load())
	}

	// Another user, same IP: admitted. The user key holds the path too.
	resp = h.do("POST", path, map[string]string{"X-User-Id": "43"}, nil)
	drain(resp)
	if resp.StatusCode != 200 {
		t.Fatalf("another user: %d", resp.StatusCode)
	}
	// No user id: the fallback key is the IP, which no user id can share.
	resp = h.do("POST", path, map[string]string{"X-User-Id": "   "}, nil)
	drain(resp)
	if resp.StatusCode != 200 {
		t.Fatalf("first request keyed by IP: %d", resp.StatusCode)
	}
	answerOf(t, h.do("POST", path, nil, nil), 429, "repeat_apply")
	resp = h.do("POST", path, map[string]string{"X-User-Id": "127.0.0.1"}, nil)
	drain(resp)
	if resp.StatusCode != 200 {
		t.Fatalf("user id 127.0.0.1 shares a counter with IP 127.0.0.1: %d", resp.StatusCode)
	}
	// Metrics and the log line.
	if n := counterValue(t, h, "gateway_rate_limited_total", map[string]string{"route": "lucky-meal", "limit": "user"}); n != 3 {
		t.Errorf("gateway_rate_limited_total = %v, want 3", n)
	}
	if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "lucky-meal", "code": "429"}); n != 3 {
		t.Errorf("gateway_http_requests_total{code=429} = %v, want 3", n)
	}
	if !strings.Contains(h.log.String(), `"msg":"rate limited"`) || !strings.Contains(h.log.String(), `"limit":"user"`) {
		t.Errorf("no rejection log line: %s", h.log.String())
	}
}

func TestKeyRequired(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: strict
    match: {path: /strict}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 5/s}
  - id: lax
    match: {path: /lax}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["query:uid", "cookie:sid"], rate: 1/min, on_missing: allow}
`, up)
	answerOf(t, h.do("GET", "/strict", nil, nil), 403, "key_required")
	answerOf(t, h.do("GET", "/strict", map[string]string{"X-User-Id": " \t"}, nil), 403, "key_required")
	if up.hits.Load() != 0 {
		t.Fatal("a request without its key reached the upstream")
	}
	for range 3 { // not limited: a part is missing and on_missing is allow
		if resp := h.do("GET", "/lax?uid=1", nil, nil); drain(resp) == "" || resp.StatusCode != 200 {
			t.Fatalf("on_missing allow: %d", resp.StatusCode)
		}
	}
	cookie := map[string]string{"Cookie": "sid=a; sid=b"}
	drain(h.do("GET", "/lax?uid=1", cookie, nil))
	answerOf(t, h.do("GET", "/lax?uid=1&uid=2", cookie, nil), 429, "rate_limited")
}

func TestTokenBucketHeadersAndQueue(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: scg
    match: {path: /scg}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], algorithm: token_bucket, rate: 100/s, burst: 250}
  - id: shaped
    match: {path: /shaped}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: api, key: [route], algorithm: token_bucket, rate: 10/s, burst: 1, queue: 1s}
`, up)
	resp := h.do("GET", "/scg", map[string]string{"X-User-Id": "a"}, nil)
	drain(resp)
	if got := resp.Header.Get("RateLimit-Policy"); got != `"user";q=250;w=3` {
		t.Errorf("token bucket policy %q, want q=burst and w=ceil(burst/rate)", got)
	}
	if got := resp.Header.Get("RateLimit"); got != `"user";r=249;t=1` {
		t.Errorf("token bucket RateLimit %q", got)
	}

	// Three requests at once against 10/s with a burst of 1 and a queue:
	// all admitted, the last about 200ms late.
	start := time.Now()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 3 {
		wg.Go(func() {
			if resp := h.do("GET", "/shaped", nil, nil); drain(resp) != "" && resp.StatusCode == 200 {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 3 {
		t.Fatalf("%d of 3 queued requests admitted", ok.Load())
	}
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Fatalf("three requests through a 10/s bucket of 1 took %v: the queue did not delay them", el)
	}
}

func TestShadowAndHiddenLimits(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: hidden, key: [ip], rate: 1/min, headers: false, shadow: true}
      - {name: trial, key: [ip], rate: 2/min, shadow: true}
      - {name: real, key: [ip], rate: 100/min}
`, up)
	for i := range 5 {
		resp := h.do("GET", "/api", nil, nil)
		drain(resp)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d rejected by a shadow limit", i)
		}
		if i >= 2 && resp.Header.Get("RateLimit-Policy") != `"trial";q=2;w=60` {
			t.Fatalf("request %d reports %q; the shadow limit with the smallest share is trial, hidden never shows", i, resp.Header.Get("RateLimit-Policy"))
		}
	}
	if n := counterValue(t, h, "gateway_ratelimit_decisions_total", map[string]string{"route": "api", "limit": "trial", "result": "shadow_rejected"}); n != 3 {
		t.Errorf("shadow rejections counted %v, want 3", n)
	}
	// And logged, one WARN line each, as a shadow limit's: hidden would
	// have rejected four requests, trial three.
	log := h.log.String()
	for name, want := range map[string]int{"hidden": 4, "trial": 3, "real": 0} {
		if n := strings.Count(log, `"route":"api","limit":"`+name+`"`); n != want {
			t.Errorf("%d WARN lines for limit %s, want %d:\n%s", n, name, want, log)
		}
	}
	if n := strings.Count(log, `"msg":"rate limited (shadow: not enforced)"`); n != 7 {
		t.Errorf("%d shadow lines, want 7", n)
	}
	if strings.Contains(log, `"msg":"rate limited","request_id"`) {
		t.Error("a shadow limit's line reads as an enforced rejection's")
	}
}

func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var inside atomic.Int64
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		inside.Add(1)
		<-release
		io.WriteString(w, "done")
	})
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: inflight, key: [route], algorithm: concurrency, limit: 2}
`, up)
	// The two requests share a request id: they must not share a lease.
	same := map[string]string{"X-Request-Id": "same-id"}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { drain(h.do("GET", "/api", same, nil)) })
	}
	for inside.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	resp := h.do("GET", "/api", same, nil)
	if resp.Header.Get("RateLimit-Policy") != "" {
		t.Error("a concurrency limit appeared in rate-limit headers")
	}
	answerOf(t, resp, 429, "rate_limited")
	close(release)
	wg.Wait()
	// Both leases were released when their exchanges ended.
	for range 2 {
		if resp := h.do("GET", "/api", nil, nil); drain(resp) != "done" {
			t.Fatalf("after release: %d", resp.StatusCode)
		}
	}
}

func TestOverrides(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: user
        key: ["header:X-User-Id"]
        rate: 1/min
        overrides:
          - {values: ["boss"], rate: 3/min}
          - {header: {name: X-Tier, value: vip}, rate: 2/min}
`, up)
	count := func(hdr map[string]string) int {
		n := 0
		for range 5 {
			if resp := h.do("GET", "/api", hdr, nil); drain(resp) != "" && resp.StatusCode == 200 {
				n++
			}
		}
		return n
	}
	if n := count(map[string]string{"X-User-Id": "boss"}); n != 3 {
		t.Errorf("override by value admitted %d, want 3", n)
	}
	if n := count(map[string]string{"X-User-Id": "v", "X-Tier": "vip"}); n != 2 {
		t.Errorf("override by header admitted %d, want 2", n)
	}
	// The vip override has its own counters: the same user without the
	// header still has the base limit's one request.
	if n := count(map[string]string{"X-User-Id": "v"}); n != 1 {
		t.Errorf("base limit admitted %d, want 1", n)
	}
}

func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
server: {trusted_proxies: [127.0.0.0/8]}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: ip, key: [ip], rate: 1/min}
`, up)
	for _, ip := range []string{"203.0.113.1", "203.0.113.2"} {
		if resp := h.do("GET", "/api", map[string]string{"X-Forwarded-For": ip}, nil); drain(resp) == "" || resp.StatusCode != 200 {
			t.Fatalf("client %s: %d", ip, resp.StatusCode)
		}
	}
	answerOf(t, h.do("GET", "/api", map[string]string{"X-Forwarded-For": "203.0.113.1"}, nil), 429, "rate_limited")
	if xff := up.lastRequest().Header.Get("X-Forwarded-For"); xff != "203.0.113.2, 127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For %q: a trusted peer is appended", xff)
	}
}

func TestXFFSpoofing(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: ip, key: [ip], rate: 1/min}
`, up)
	drain(h.do("GET", "/api", map[string]string{"X-Forwarded-For": "1.1.1.1"}, nil))
	spoof := strings.TrimSuffix(strings.Repeat("9.9.9.9, garbage, ", 10000), ", ")
	answerOf(t, h.do("GET", "/api", map[string]string{"X-Forwarded-For": spoof}, nil), 429, "rate_limited")
}

func TestHeaderValueNewline(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, basic, up)
	// net/http refuses to send a newline in a header value, so use a raw
	// request: the server must answer 400 and nothing reaches upstream.
	conn, err := netDial(h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /api/x HTTP/1.1\r\nHost: a\r\nX-User-Id: a\nb\r\n\r\n")
	buf := make([]byte, 256)
	n, _ := conn.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 400") {
		t.Fatalf("answer %q", buf[:n])
	}
	if up.hits.Load() != 0 {
		t.Fatal("a malformed header reached the upstream")
	}
}

// TestRejectionLogSampling: at most 20 WARN lines a second per route and
// limit, then one line with the count of those not logged. The gateway's
// clock stands still, so that the 50 rejections fall in one of its
// seconds however long the machine takes to send them.
func TestRejectionLogSampling(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [route], rate: 1/1h}]
`, up)
	drain(h.do("GET", "/api", nil, nil))
	h.clock.Freeze()
	for range 50 {
		drain(h.do("GET", "/api", nil, nil))
	}
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(h.log.String(), "rate limited requests not logged") {
		if time.Now().After(deadline) {
			t.Fatalf("no summary line: %s", h.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if logged := strings.Count(h.log.String(), `"msg":"rate limited"`); logged != 20 {
		t.Fatalf("%d rejection lines for 50 rejections in one second, want 20", logged)
	}
	if n := counterValue(t, h, "gateway_rejection_logs_suppressed_total", nil); n != 30 {
		t.Fatalf("suppressed %v of 50 rejections in one second, want 30", n)
	}
}

// Requests net/http refuses before the gateway sees them get the
// gateway's JSON answers through its listener, with a request id and a
// date, and count under no route; so does one that comes after a request
// the gateway answered on the same connection. An upstream's own
// plain-text error passes as it is.
func TestProtocolErrorsAnswered(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream says no", http.StatusBadRequest) // plain text, as net/http's own
	})
	h := newHarness(t, basic, up)
	srv := httptest.NewUnstartedServer(h.gw)
	srv.Listener = h.gw.Listener(srv.Config, srv.Listener)
	srv.Config.MaxHeaderBytes = 1024 // serve sets it from server.max_header_bytes
	srv.Start()
	defer srv.Close()

	req, _ := http.NewRequest("GET", srv.URL+"/api/x", nil)
	req.Header.Set("X-Request-Id", strings.Repeat("a", 1<<20))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answerOf(t, resp, http.StatusRequestHeaderFieldsTooLarge, "headers_too_large")

	for _, tc := range []struct {
		name, request string
		status        int
	}{
		{"a header line without a colon", "GET /api/x HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400},
		{"no Host", "GET /api/x HTTP/1.1\r\n\r\n", 400},
		{"an unknown transfer coding", "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: rot13, chunked\r\n\r\n", 501},
		{"a transfer coding but not chunked", "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: rot13\r\n\r\n", 400},
		{"an unknown version", "GET /api/x HTTP/2.5\r\nHost: x\r\n\r\n", 505},
		{"an unknown expectation", "GET /api/x HTTP/1.1\r\nHost: x\r\nExpect: something\r\n\r\n", 417},
		{"after an answered request", "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\nGET /api/x HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400},
	} {
		conn, err := netDial(srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, tc.request)
		br := bufio.NewReader(conn)
		if strings.HasPrefix(tc.request, "GET /nowhere") {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			answerOf(t, resp, http.StatusNotFound, "route_not_found")
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
			t.Errorf("%s: Date %q: %v", tc.name, resp.Header.Get("Date"), err)
		}
		answerOf(t, resp, tc.status, "bad_request")
		if !resp.Close {
			t.Errorf("%s: the connection is not closed", tc.name)
		}
		conn.Close()
	}
	if up.hits.Load() != 0 {
		t.Fatalf("the upstream saw %d of the refused requests", up.hits.Load())
	}
	for status, want := range map[string]float64{"431": 1, "400": 4, "501": 1, "505": 1, "417": 1, "404": 1} {
		if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "", "code": status}); n != want {
			t.Errorf("requests of no route with status %s: %v, want %v", status, n, want)
		}
	}

	// An upstream's plain-text 400 is the upstream's answer, passed on.
	resp, err = srv.Client().Get(srv.URL + "/api/x")
	if err != nil {
		t.Fatal(err)
	}
	if body := drain(resp); resp.StatusCode != 400 || body != "upstream says no\n" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("the upstream's 400: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// The admin view of a key reads it as a request would: an override by key
// value has its own counters, an IPv6 address is grouped by its prefix,
// and a host is lowercased without its port.
func TestLimitStateAsRequestsSeeIt(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
server: {trusted_proxies: [127.0.0.1]}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: ip
        key: [ip]
        rate: 100/min
        overrides: [{values: ["10.0.0.1"], rate: 2/min}]
      - {name: host, key: [host], rate: 100/min}
`, up)
	ctx := context.Background()
	for range 2 {
		drain(h.do("GET", "/api", map[string]string{"X-Forwarded-For": "10.0.0.1", "Host": "Shop.Example:8080"}, nil))
	}
	answerOf(t, h.do("GET", "/api", map[string]string{"X-Forwarded-For": "10.0.0.1"}, nil), 429, "rate_limited")
	st, err := h.gw.LimitState(ctx, "api", "ip", []string{"10.0.0.1"}, false)
	if err != nil || st.Limit != 2 || st.Remaining != 0 {
		t.Errorf("the overridden key: %+v %v, want limit 2, remaining 0", st, err)
	}
	if st, _ := h.gw.LimitState(ctx, "api", "host", []string{"SHOP.example:9999"}, false); st.Remaining != 98 {
		t.Errorf("the host key: %+v, want remaining 98", st)
	}
	if err := h.gw.ResetLimit(ctx, "api", "ip", []string{"10.0.0.1"}, false); err != nil {
		t.Fatal(err)
	}
	if resp := h.do("GET", "/api", map[string]string{"X-Forwarded-For": "10.0.0.1"}, nil); drain(resp) == "" || resp.StatusCode != 200 {
		t.Errorf("after the reset: %d", resp.StatusCode)
	}

	drain(h.do("GET", "/api", map[string]string{"X-Forwarded-For": "2001:db8:1:2::5"}, nil))
	if st, _ := h.gw.LimitState(ctx, "api", "ip", []string{"2001:db8:1:2::9"}, false); st.Limit != 100 || st.Remaining != 99 {
		t.Errorf("an address of the same /64: %+v, want remaining 99", st)
	}
	if st, _ := h.gw.LimitState(ctx, "api", "ip", []string{"2001:db8:1:2::/64"}, false); st.Remaining != 99 {
		t.Errorf("the /64 as the key holds it: %+v, want remaining 99", st)
	}
}

// An upstream's own rate-limit headers give way to the gateway's whole
// family, not only to the names the gateway sets.
func TestUpstreamRateLimitHeadersReplaced(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "999")
		w.Header().Set("X-RateLimit-Used", "5")
		w.Header()["ratelimit-reset"] = []string{"77"}
		w.Header().Set("Retry-After", "30")
		io.WriteString(w, "ok")
	})
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: ip, key: [ip], rate: 10/min}]
`, up)
	resp := h.do("GET", "/api", nil, nil)
	drain(resp)
	if got := resp.Header.Get("X-RateLimit-Limit"); got != "10" {
		t.Errorf("X-RateLimit-Limit %q, want the gateway's 10", got)
	}
	for _, name := range []string{"X-RateLimit-Used", "Ratelimit-Reset"} {
		if got := resp.Header.Values(name); len(got) != 0 {
			t.Errorf("the upstream's %s %q reached the client beside the gateway's headers", name, got)
		}
	}
	if got := resp.Header.Get("Retry-After"); got != "30" {
		t.Errorf("Retry-After %q: the upstream's, on an admitted response, is its own business", got)
	}
}
