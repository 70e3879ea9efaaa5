package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/testnet"
)

// backend is an httptest upstream that records what reached it.
type backend struct {
	*httptest.Server
	hits    atomic.Int64
	mu      sync.Mutex
	last    *http.Request
	handler http.HandlerFunc
}

func newBackend(t *testing.T, h http.HandlerFunc) *backend {
	b := &backend{handler: h}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		b.mu.Lock()
		b.last = r.Clone(r.Context())
		b.mu.Unlock()
		if b.handler != nil {
			b.handler(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok "+r.URL.RequestURI())
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *backend) lastRequest() *http.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// harness is a gateway in front of a backend.
type harness struct {
	t     *testing.T
	gw    *Gateway
	srv   *httptest.Server
	reg   *prometheus.Registry
	log   *syncWriter
	clock *testClock // the gateway's
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// newHarness parses yaml, with every {{UP}} replaced by the backend's URL.
func newHarness(t *testing.T, yaml string, up *backend) *harness {
	t.Helper()
	return newHarnessWith(t, yaml, up, nil)
}

// harnessRecordWait is how long a recorded request waits for its event to
// be durable in the harness, in place of a request's 100 ms: a busy
// machine's fsync may take longer, and the tests check what is recorded,
// not how fast the disk is.
const harnessRecordWait = 10 * time.Second

// newHarnessWith is newHarness with the gateway's options changed by
// options, when not nil.
func newHarnessWith(t *testing.T, yaml string, up *backend, options func(*Options)) *harness {
	t.Helper()
	if up != nil {
		yaml = strings.ReplaceAll(yaml, "{{UP}}", up.URL)
	}
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	h := &harness{t: t, reg: prometheus.NewRegistry(), log: &syncWriter{b: &strings.Builder{}}, clock: newTestClock()}
	logger := slog.New(slog.NewJSONHandler(h.log, nil))
	o := Options{Logger: logger, Registerer: h.reg, Now: h.clock.Now, RecordWait: harnessRecordWait}
	if options != nil {
		options(&o)
	}
	h.gw, err = New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(h.gw)
	t.Cleanup(func() {
		h.srv.Close()
		h.gw.Close()
	})
	return h
}

func (h *harness) do(method, path string, hdr map[string]string, body io.Reader) *http.Response {
	h.t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	// The server's own client: an httptest.Server's Close closes
	// http.DefaultTransport's idle connections, and a parallel test's
	// request that has just taken one fails with "CloseIdleConnections
	// called".
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

// answerOf reads a gateway answer, checking its shape.
func answerOf(t *testing.T, resp *http.Response, status int, code string) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q; body %s", ct, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	if m["code"] != code || m["message"] == "" || m["request_id"] == "" {
		t.Fatalf("body %s, want code %s with a message and a request id", body, code)
	}
	if m["request_id"] != resp.Header.Get("X-Request-Id") {
		t.Fatalf("request_id %v differs from the X-Request-Id header %q", m["request_id"], resp.Header.Get("X-Request-Id"))
	}
	return m
}

func drain(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

const basic = `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
  - id: exact
    match: {path: /exact, methods: [POST], host: Example.COM}
    upstream: {targets: ["{{UP}}/base"], strip_prefix: ""}
  - id: strip
    match: {path: /svc/**}
    upstream: {targets: ["{{UP}}"], strip_prefix: /svc}
`

// The scheme and host a trusted proxy passes on reach the upstream; from
// any other peer the gateway's own replace them, and a Forwarded header is
// dropped. The upstream's own request id never replaces the gateway's.
func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "upstream-id")
		io.WriteString(w, "ok")
	})
	in := map[string]string{
		"X-Forwarded-Proto": "https",
		"X-Forwarded-Host":  "shop.example",
		"Forwarded":         "for=6.6.6.6;proto=https",
		"X-Request-Id":      "client-id",
	}
	for _, tt := range []struct {
		name, trusted          string
		proto, host, forwarded string
	}{
		{"untrusted peer", "[]", "http", "", ""},
		{"trusted peer", "[127.0.0.1]", "https", "shop.example", "for=6.6.6.6;proto=https"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "server: {trusted_proxies: "+tt.trusted+"}\n"+basic, up)
			resp := h.do("GET", "/api/x", in, nil)
			drain(resp)
			got := up.lastRequest()
			host := tt.host
			if host == "" {
				host = h.srv.Listener.Addr().String() // what the client asked for
			}
			if p, hh, f := got.Header.Get("X-Forwarded-Proto"), got.Header.Get("X-Forwarded-Host"), got.Header.Get("Forwarded"); p != tt.proto || hh != host || f != tt.forwarded {
				t.Errorf("upstream got X-Forwarded-Proto %q, X-Forwarded-Host %q, Forwarded %q; want %q, %q, %q", p, hh, f, tt.proto, host, tt.forwarded)
			}
			if id := resp.Header.Get("X-Request-Id"); id != "client-id" {
				t.Errorf("client got X-Request-Id %q, want the gateway's %q", id, "client-id")
			}
		})
	}
	// What a trusted proxy says is believed only when it is plausible.
	for _, tt := range []struct{ in, want string }{
		{"HTTPS, http", "https"}, {"ftp", "http"}, {"", "http"},
	} {
		if got := forwardedProto([]string{tt.in}, "http"); got != tt.want {
			t.Errorf("forwardedProto(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"a.example:8443, b.example", "a.example:8443"}, {"evil/path", "own"}, {"a b", "own"}, {"", "own"},
	} {
		if got := forwardedHost([]string{tt.in}, "own"); got != tt.want {
			t.Errorf("forwardedHost(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// The hop-by-hop fields an upstream lists in Connection stay with the
// upstream, also when the list says close (which net/http's response
// reader takes away).
func TestProxyDropsTheUpstreamsHopFields(t *testing.T) {
	t.Parallel()
	for _, conn := range []string{"X-Secret", "X-Secret, close"} {
		up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", conn)
			w.Header().Set("X-Secret", "hop")
			w.Header().Set("X-Kept", "end")
			io.WriteString(w, "ok")
		})
		h := newHarness(t, basic, up)
		resp := h.do("GET", "/api/x", nil, nil)
		if body := drain(resp); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%q: %d %q", conn, resp.StatusCode, body)
		}
		if resp.Header.Get("X-Secret") != "" || resp.Header.Get("X-Kept") != "end" {
			t.Errorf("Connection: %s: the client got %v", conn, resp.Header)
		}
	}
}

func TestProxy(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, basic, up)

	resp := h.do("GET", "/api//v1/./items/../list/?q=1&q=2", map[string]string{
		"X-Forwarded-For": "6.6.6.6",
		"Connection":      "X-Secret",
		"X-Secret":        "hop",
		"X-Request-Id":    "abc-123",
	}, nil)
	if body := drain(resp); resp.StatusCode != 200 || body != "ok /api/v1/list?q=1&q=2" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	got := up.lastRequest()
	if xff := got.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For %q: a client that trusts nobody must be replaced, not appended", xff)
	}
	if got.Header.Get("X-Secret") != "" {
		t.Error("a header listed in Connection reached the upstream")
	}
	if got.Header.Get("X-Forwarded-Proto") != "http" || got.Header.Get("X-Forwarded-Host") == "" {
		t.Errorf("forwarded headers: %v", got.Header)
	}
	if got.Header.Get("X-Request-Id") != "abc-123" || resp.Header.Get("X-Request-Id") != "abc-123" {
		t.Errorf("a well-formed request id was not kept: upstream %q, client %q", got.Header.Get("X-Request-Id"), resp.Header.Get("X-Request-Id"))
	}

	// A hostile request id is replaced.
	resp = h.do("GET", "/api/x", map[string]string{"X-Request-Id": strings.Repeat("a", 200) + "\"}"}, nil)
	drain(resp)
	if id := resp.Header.Get("X-Request-Id"); id == "" || len(id) > 64 || strings.ContainsAny(id, "\"}") {
		t.Errorf("request id %q", id)
	}

	// Host and method matching, and the target's base path.
	resp = h.do("POST", "/exact", map[string]string{"Host": "example.com:8080"}, strings.NewReader("x"))
	if body := drain(resp); body != "ok /base/exact" {
		t.Fatalf("exact route: %d %q", resp.StatusCode, body)
	}
	answerOf(t, h.do("GET", "/exact", map[string]string{"Host": "example.com"}, nil), 404, "route_not_found")
	answerOf(t, h.do("POST", "/exact", map[string]string{"Host": "other.com"}, nil), 404, "route_not_found")

	resp = h.do("GET", "/svc/a/b", nil, nil)
	if body := drain(resp); body != "ok /a/b" {
		t.Fatalf("strip_prefix: %q", body)
	}
	resp = h.do("GET", "/svc", nil, nil)
	if body := drain(resp); body != "ok /" {
		t.Fatalf("strip_prefix of the whole path: %q", body)
	}
	// /apix is not below /api.
	answerOf(t, h.do("GET", "/apix", nil, nil), 404, "route_not_found")
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, basic, up)
	for _, p := range []string{"/api/a%2Fb", "/api/%00", "/../etc/passwd", "/api/%2e%2e/%2e%2e/x", "/api/a%5Cb"} {
		answerOf(t, h.do("GET", p, nil, nil), 400, "bad_request")
	}
	if up.hits.Load() != 0 {
		t.Fatalf("%d malformed requests reached the upstream", up.hits.Load())
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	slow := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	})
	deadURL := testnet.RefusedURL(t)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: slow
    match: {path: /slow}
    upstream: {targets: ["`+slow.URL+`"], timeout: 100ms}
  - id: dead
    match: {path: /dead}
    upstream: {targets: ["`+deadURL+`"]}
`, nil)
	answerOf(t, h.do("GET", "/slow", nil, nil), 504, "upstream_timeout")
	answerOf(t, h.do("GET", "/dead", nil, nil), 502, "upstream_unavailable")
	// Each failure has its WARN line, with the route and the cause.
	log := h.log.String()
	for _, want := range []string{`"msg":"upstream failed",`, `"route":"slow","status":504,"error":`, `"route":"dead","status":502,"error":`, `connection refused`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %s:\n%s", want, log)
		}
	}
}

// TestDeadTarget: of two targets, one refuses connections. A request
// without a body that meets it goes on to the other; one with a body
// (which may be spent) is answered 502; and round robin then passes over
// the refusing target, so what follows reaches the live one at once.
func TestDeadTarget(t *testing.T) {
	t.Parallel()
	live := newBackend(t, nil)
	deadURL := testnet.RefusedURL(t)
	cfg := `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["` + deadURL + `", "{{UP}}"]}
`
	// Round robin starts at the first target, the dead one.
	h := newHarness(t, cfg, live)
	for i := range 10 {
		resp := h.do("GET", "/api/x", nil, nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %d: %d, want 200 from the live target", i, resp.StatusCode)
		}
	}
	if n := live.hits.Load(); n != 10 {
		t.Fatalf("the live target saw %d of 10 requests", n)
	}

	h = newHarness(t, cfg, live)
	answerOf(t, h.do("POST", "/api/x", nil, strings.NewReader("body")), 502, "upstream_unavailable")
	for i := range 5 {
		resp := h.do("POST", "/api/x", nil, strings.NewReader("body"))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %d after the dead target refused: %d, want 200 (it is passed over)", i, resp.StatusCode)
		}
	}
}

func TestStreaming(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: second\n\n")
	})
	h := newHarness(t, basic, up)
	resp := h.do("GET", "/api/events", nil, nil)
	defer resp.Body.Close()
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != "data: first\n\n" {
		t.Fatalf("first event: %q %v: the body was buffered, not streamed", buf[:n], err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "data: second\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// TestTrailers: an upstream's trailers reach the client after the body, and
// a client's "TE: trailers" reaches the upstream (gRPC over HTTP/1.1
// proxies need it) while any other TE value, hop-by-hop, does not.
func TestTrailers(t *testing.T) {
	t.Parallel()
	var te atomic.Value
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		te.Store(strings.Join(r.Header["Te"], ","))
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Checksum", "sum-1")
	})
	h := newHarness(t, basic, up)
	for _, tc := range []struct{ sent, want string }{
		{"trailers", "trailers"},
		{"gzip, trailers", "trailers"},
		{"gzip", ""},
	} {
		resp := h.do("GET", "/api/x", map[string]string{"TE": tc.sent}, nil)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "body" {
			t.Fatalf("TE %q: body %q, %v", tc.sent, body, err)
		}
		if got := resp.Trailer.Get("X-Checksum"); got != "sum-1" {
			t.Errorf("TE %q: trailer X-Checksum %q, want sum-1 (trailers %v)", tc.sent, got, resp.Trailer)
		}
		if got := te.Load(); got != tc.want {
			t.Errorf("TE %q reached the upstream as %q, want %q", tc.sent, got, tc.want)
		}
	}
}

func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"], idle_timeout: 100ms}
`, up)
	resp := h.do("GET", "/api/x", nil, nil)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("a body that fell silent ended cleanly (%q): the client must see it cut", body)
	}
	if string(body) != "partial" {
		t.Fatalf("body %q", body)
	}
}

func TestMaxBody(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})
	h := newHarness(t, `
admin: {listen: ""}
server: {max_body_bytes: 10}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
`, up)
	answerOf(t, h.do("POST", "/api/x", nil, strings.NewReader(strings.Repeat("x", 11))), 413, "body_too_large")
	// Without a Content-Length the limit bites while the body streams.
	answerOf(t, h.do("POST", "/api/x", nil, io.MultiReader(strings.NewReader(strings.Repeat("x", 100)))), 413, "body_too_large")
	if resp := h.do("POST", "/api/x", nil, strings.NewReader("0123456789")); drain(resp) != "" || resp.StatusCode != 200 {
		t.Fatalf("a body of exactly the limit: %d", resp.StatusCode)
	}
}

func TestBodyOnGet(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %d", r.Method, len(b))
	})
	h := newHarness(t, basic, up)
	resp := h.do("GET", "/api/x", nil, strings.NewReader("hello"))
	if body := drain(resp); body != "GET 5" {
		t.Fatalf("GET with a body: %q", body)
	}
}

// TestConstantKeys: a key of global and route parts, made once per route
// rather than per request, counts per route where it has a route part and
// is the key the admin API reads.
func TestConstantKeys(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	h := newHarness(t, `
global_limits:
  - {name: perroute, key: [route], rate: 2/h}
routes:
  - id: a
    match: {path: /a/**}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: all, key: [global], rate: 5/h}
  - id: b
    match: {path: /b/**}
    upstream: {targets: ["{{UP}}"]}
`, up)
	for i, want := range []int{200, 200, 429} {
		for _, route := range []string{"a", "b"} {
			resp := h.do("GET", "/"+route+"/x", nil, nil)
			if drain(resp); resp.StatusCode != want {
				t.Fatalf("route %s, request %d: %d, want %d", route, i+1, resp.StatusCode, want)
			}
		}
	}
	for _, tc := range []struct {
		route, name, value string
		remaining          int64
	}{
		{"global", "perroute", "a", 0},
		{"global", "perroute", "b", 0},
		{"global", "perroute", "c", 2},
		{"a", "all", "-", 3},
	} {
		st, err := h.gw.LimitState(context.Background(), tc.route, tc.name, []string{tc.value}, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Remaining != tc.remaining {
			t.Errorf("%s/%s %s: %d remaining, want %d", tc.route, tc.name, tc.value, st.Remaining, tc.remaining)
		}
	}
}

// A burst of upstream failures writes at most the sampler's lines a
// second per route, each naming the target, the kind of failure and the
// request, and the lines not written are counted in "not logged" lines
// that add up to the rest.
func TestUpstreamFailuresSampled(t *testing.T) {
	t.Parallel()
	deadURL := testnet.RefusedURL(t)
	failing := newBackend(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: dead
    match: {path: /dead}
    upstream: {targets: ["`+deadURL+`"]}
  - id: failing
    match: {path: /failing}
    upstream: {targets: ["`+failing.URL+`"]}
`, nil)
	const burst = 500
	first := time.Now().Unix()
	for i := range burst {
		resp := h.do("GET", "/dead", map[string]string{"X-Request-Id": "burst-" + strconv.Itoa(i)}, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 502 {
			t.Fatalf("request %d: %d, want 502", i, resp.StatusCode)
		}
	}
	last := time.Now().Unix()
	resp := h.do("GET", "/failing", map[string]string{"X-Request-Id": "five-oh-three"}, nil)
	resp.Body.Close()
	h.gw.flushDropped()

	type line struct {
		Msg       string  `json:"msg"`
		Level     string  `json:"level"`
		Route     string  `json:"route"`
		RequestID string  `json:"request_id"`
		Status    int     `json:"status"`
		Kind      string  `json:"kind"`
		Target    string  `json:"target"`
		Error     string  `json:"error"`
		Duration  float64 `json:"duration"`
		Count     int     `json:"count"`
	}
	logged, notLogged := 0, 0
	var answered *line
	for _, s := range strings.Split(strings.TrimSpace(h.log.String()), "\n") {
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("not a JSON line: %s", s)
		}
		switch {
		case l.Msg == "upstream failed" && l.Route == "dead":
			logged++
			if l.Level != "WARN" || l.Status != 502 || l.Kind != "connection_refused" || l.Target != deadURL ||
				!strings.HasPrefix(l.RequestID, "burst-") || !strings.Contains(l.Error, "connection refused") || l.Duration <= 0 {
				t.Errorf("failure line %s", s)
			}
		case l.Msg == "upstream failures not logged" && l.Route == "dead":
			notLogged += l.Count
		case l.Route == "failing":
			answered = &l
		}
	}
	// The ticker may have flushed part of the count already: every
	// "not logged" line counts.
	if seconds := int(last - first + 1); logged > logsPerSecond*seconds || logged < logsPerSecond {
		t.Errorf("%d failure lines in %d s, want %d to %d", logged, seconds, logsPerSecond, logsPerSecond*seconds)
	}
	if logged+notLogged != burst {
		t.Errorf("%d failure lines and %d not logged, want %d in all", logged, notLogged, burst)
	}
	if answered == nil || answered.Msg != "upstream answered 503" || answered.Kind != "status" ||
		answered.RequestID != "five-oh-three" || answered.Target != failing.URL || answered.Status != 503 {
		t.Errorf("a 503 of the upstream logged as %+v", answered)
	}
}
