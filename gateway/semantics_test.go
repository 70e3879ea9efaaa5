package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// rawExchange sends raw bytes to the gateway, half-closes when asked, and
// returns everything it answers until it closes the connection or a
// second has passed without a byte.
func rawExchange(t *testing.T, h *harness, request string, halfClose bool) string {
	t.Helper()
	conn, err := netDial(h.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		conn.(*net.TCPConn).CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(conn)
	return string(b)
}

// A request body the client broke is the client's fault: 400, nothing the
// breaker counts against the upstream.
func TestBrokenRequestBody(t *testing.T) {
	t.Parallel()
	up := newFlaky(t)
	up.mode.Store("ok")
	h := newHarness(t, strings.Replace(breakerConfig, "min_calls: 10", "min_calls: 3", 1), up.backend)
	for range 5 {
		got := rawExchange(t, h, "POST /coupon HTTP/1.1\r\nHost: x\r\nX-User-Id: u\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhelloXX0\r\n\r\n", false)
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, `"code":"bad_request"`) {
			t.Fatalf("a malformed chunk: %q, want 400 bad_request", got)
		}
	}
	if b := h.gw.Breakers(); len(b) != 1 || b[0].State != "CLOSED" || b[0].Failures != 0 {
		t.Errorf("breakers %+v: a client's broken body counted against the upstream", b)
	}
}

// A fragment in the request target is refused: the limits' keys and an
// upstream that cuts it off would read different queries.
func TestFragmentRefused(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, basic, up)
	got := rawExchange(t, h, "GET /api/x?user=alice#1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", false)
	if !strings.HasPrefix(got, "HTTP/1.1 400 ") || up.hits.Load() != 0 {
		t.Fatalf("a fragment: %q (upstream hits %d), want 400", got, up.hits.Load())
	}
}

// A client that sends its request and half-closes gets no made-up answer
// when the gateway gives the exchange up: the connection just closes.
func TestHalfClosedClientGetsNoFakeAnswer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	h := newHarness(t, basic, up)
	got := rawExchange(t, h, "GET /api/x HTTP/1.1\r\nHost: x\r\n\r\n", true)
	if got != "" {
		t.Fatalf("a half-closed client was answered %q; want the connection closed", got)
	}
}

// The upstream's answer has no Content-Type: none is made up by sniffing
// its body. And the head of a body of unknown length reaches the client
// before the body's first bytes do.
func TestResponseAsTheUpstreamSentIt(t *testing.T) {
	t.Parallel()
	headSeen := make(chan struct{})
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // the test server would sniff too
		if r.URL.Path == "/api/stream" {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			select {
			case <-headSeen:
			case <-time.After(10 * time.Second):
			}
		}
		io.WriteString(w, "<html><script>alert(1)</script>")
	})
	h := newHarness(t, basic, up)
	resp := h.do("GET", "/api/x", nil, nil)
	if body := drain(resp); body != "<html><script>alert(1)</script>" {
		t.Fatalf("body %q", body)
	}
	if ct, ok := resp.Header["Content-Type"]; ok {
		t.Errorf("Content-Type %q made up for an answer that had none", ct)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/api/stream", nil)
	resp, err := h.srv.Client().Do(req) // returns with the head
	if err != nil {
		t.Fatalf("the head of a streamed answer did not come before its body: %v", err)
	}
	close(headSeen)
	b, _ := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if string(b) != "<html><script>alert(1)</script>" {
		t.Errorf("streamed body %q", b)
	}
}

// idle_timeout bounds the upstream's silence, not a slow client: a client
// that stops reading for longer than it gets the whole body once it reads
// on, on either of the upstream client's paths (a small request sent
// whole, or a large body streamed through http.Transport).
func TestSlowClientIsNotIdleUpstream(t *testing.T) {
	t.Parallel()
	const size = 20 << 20
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Length", "20971520")
		chunk := make([]byte, 32<<10)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"], idle_timeout: 800ms}
`, up)
	// The idle timeout is long enough that a loaded machine does not
	// starve the upstream of it; the pause is three of them.
	for _, tt := range []struct {
		name, method string
		body         io.Reader
	}{
		{"small request", "GET", nil},
		{"streamed request body", "POST", strings.NewReader(strings.Repeat("x", 64<<10))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, h.srv.URL+"/api/big", tt.body)
			resp, err := h.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
				t.Fatalf("%v; the gateway logged:\n%s", err, h.log)
			}
			time.Sleep(2400 * time.Millisecond) // three idle_timeouts, not reading
			n, err := io.Copy(io.Discard, resp.Body)
			if err != nil || n != size-1<<20 {
				t.Fatalf("after a pause the client read %d more bytes (err %v), want %d", n, err, size-1<<20)
			}
		})
	}
}

// An upstream's 103 Early Hints reach the client before the answer, on
// either client path, without the upstream's hop-by-hop fields and without
// mixing with the answer's fields; an HTTP/1.0 client gets none.
func TestEarlyHintsRelayed(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Link", "</a.css>; rel=preload")
		h.Set("Connection", "X-Hop")
		h.Set("X-Hop", "1")
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		io.WriteString(w, "ok")
	})
	h := newHarness(t, basic, up)
	for _, tc := range []struct{ name, request string }{
		{"plain", "GET /api/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
		{"streamed body", "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n"},
	} {
		got := rawExchange(t, h, tc.request, false)
		hints, final, ok := strings.Cut(got, "HTTP/1.1 200 OK\r\n")
		if !ok || !strings.HasPrefix(hints, "HTTP/1.1 103 Early Hints\r\n") {
			t.Fatalf("%s: %q, want a 103 then the 200", tc.name, got)
		}
		if !strings.Contains(hints, "Link: </a.css>; rel=preload\r\n") || strings.Contains(hints, "X-Hop") {
			t.Errorf("%s: the hints %q", tc.name, hints)
		}
		if strings.Contains(final, "Link:") || !strings.Contains(final, "X-Request-Id: ") || !strings.HasSuffix(final, "ok") {
			t.Errorf("%s: the answer %q", tc.name, final)
		}
	}
	got := rawExchange(t, h, "GET /api/x HTTP/1.0\r\nHost: x\r\n\r\n", false)
	// Not "103" alone: a request id's hex digits may hold it.
	if !strings.HasPrefix(got, "HTTP/1.0 200 OK\r\n") || strings.Contains(got, " 103 ") || strings.Contains(got, "Early Hints") {
		t.Errorf("HTTP/1.0: %q", got)
	}
}

// rawUpstream is an upstream that hands each connection to handle, which
// reads the request and writes the answer itself; it returns its URL.
func rawUpstream(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c, bufio.NewReader(c))
			})
		}
	})
	return "http://" + ln.Addr().String()
}

// answering answers a connection's first request, once its body is read,
// with answer as it is.
func answering(answer string) func(c net.Conn, br *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(c, answer)
	}
}

// routeTo is a gateway with one route, /api/**, to the upstream at url,
// with upstream added to the route's upstream settings and route (whole
// lines) to the route's.
func routeTo(t *testing.T, url, upstream, route string) *harness {
	return newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["`+url+`"]`+upstream+`}
`+route, nil)
}

// The two client paths: a request the gateway's own client sends, and
// one whose body of unknown length goes through http.Transport.
var bothPaths = []struct{ name, request string }{
	{"plain", "GET /api/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"},
	{"streamed body", "POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n"},
}

// An upstream that sends informational answers without end gets 16 of
// them passed on, then the gateway's 502, on either client path, and at
// once: http.Transport reads any number of them once they are passed on,
// and the gateway's own client would read them up to its 1 MiB head
// budget, relaying each.
func TestEndlessInterimAnswers(t *testing.T) {
	t.Parallel()
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		go io.Copy(io.Discard, r.Body)
		for {
			if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"); err != nil {
				return
			}
		}
	})
	h := routeTo(t, up, ", timeout: 10s", "")
	for _, p := range bothPaths {
		start := time.Now()
		got := rawExchange(t, h, p.request, false)
		hints, final, _ := strings.Cut(got, "HTTP/1.1 502 Bad Gateway\r\n")
		if n := strings.Count(hints, "HTTP/1.1 103 Early Hints\r\n"); n != upstream.MaxInterim || len(hints) != n*len("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n") {
			t.Errorf("%s: %d informational answers (%d bytes) before the final one, want %d", p.name, n, len(hints), upstream.MaxInterim)
		}
		if !strings.Contains(final, "X-Request-Id: ") || !strings.Contains(final, `"code":"upstream_unavailable"`) {
			t.Errorf("%s: the final answer %.300q, want 502 upstream_unavailable", p.name, final)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: took %v", p.name, took)
		}
	}
}

// blockingWriter is a ResponseWriter whose first informational answer
// waits until release is closed, as a write to a client that does not
// read would.
type blockingWriter struct {
	mu      sync.Mutex
	h       http.Header
	release chan struct{}
	blocked chan struct{} // closed when the first 1xx waits
	interim int           // 1xx answers written
	late    int           // of them, after the final answer
	status  int
	final   http.Header // the header map as the final answer went
	body    strings.Builder
}

func (w *blockingWriter) Header() http.Header { return w.h }

func (w *blockingWriter) WriteHeader(code int) {
	w.mu.Lock()
	if code < 200 {
		w.interim++
		if w.status != 0 {
			w.late++
		}
		first := w.interim == 1
		w.mu.Unlock()
		if first {
			close(w.blocked)
			<-w.release
		}
		return
	}
	defer w.mu.Unlock()
	if w.status == 0 {
		w.status, w.final = code, w.h.Clone()
	}
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(p)
}

// On http.Transport's path an informational answer is relayed on the
// Transport's goroutine, which outlives a timed-out exchange. A relay
// still writing when the upstream timeout ends the exchange finishes
// before the handler writes its 504, which has the gateway's fields and
// none of the relayed answer's; and no relay follows the 504.
func TestInterimRelayEndsWithTheExchange(t *testing.T) {
	t.Parallel()
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, r.Body)
		// Six at once: the Transport has the last five read when the
		// first one's relay waits, and goes on with them after the
		// timeout. Then nothing, until the gateway gives up and closes.
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
			strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </b.css>; rel=preload\r\n\r\n", 5))
		io.Copy(io.Discard, br)
	})
	h := routeTo(t, up, ", timeout: 100ms", "")
	w := &blockingWriter{h: http.Header{}, release: make(chan struct{}), blocked: make(chan struct{})}
	r := httptest.NewRequest("POST", "/api/x", io.NopCloser(strings.NewReader("hi")))
	r.ContentLength = -1 // through http.Transport
	served := make(chan struct{})
	go func() {
		defer close(served)
		h.gw.ServeHTTP(w, r)
	}()
	<-w.blocked
	time.Sleep(300 * time.Millisecond) // the timeout passes while the relay waits
	close(w.release)
	<-served
	time.Sleep(100 * time.Millisecond) // room for a late relay
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status != http.StatusGatewayTimeout || w.final.Get("X-Request-Id") == "" || w.final.Get("Link") != "" {
		t.Fatalf("the answer: %d %v %q, want a 504 with the request id and no Link", w.status, w.final, w.body.String())
	}
	if w.late != 0 {
		t.Errorf("%d informational answers relayed after the final one", w.late)
	}
}

// An informational answer passes on without the upstream's rate-limit
// fields, which are the gateway's alone, and with the gateway's request
// id in place of the upstream's; the hop-by-hop fields its Connection
// field names stay behind, also when it says close.
func TestInterimAnswersCarryTheGatewaysFields(t *testing.T) {
	t.Parallel()
	up := rawUpstream(t, answering("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\nX-Request-Id: upstream-made\r\n"+
		"RateLimit: \"up\";r=999\r\nRatelimit-Policy: \"up\";q=1000\r\nX-RateLimit-Remaining: 999\r\n\r\n"+
		"HTTP/1.1 103 Early Hints\r\nLink: </b>\r\nConnection: close, X-Secret\r\nX-Secret: s\r\n\r\n"+
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	h := routeTo(t, up, "", "    limits: [{name: ip, key: [ip], rate: 100/min}]\n")
	for _, p := range bothPaths {
		got := rawExchange(t, h, p.request, false)
		hints, final, ok := strings.Cut(got, "HTTP/1.1 200 OK\r\n")
		if !ok || strings.Count(hints, "HTTP/1.1 103 Early Hints\r\n") != 2 {
			t.Fatalf("%s: %q, want two 103s and the 200", p.name, got)
		}
		_, rest, _ := strings.Cut(final, "X-Request-Id: ")
		rid, _, _ := strings.Cut(rest, "\r\n")
		if rid == "" || !strings.Contains(hints, "X-Request-Id: "+rid+"\r\n") || strings.Contains(hints, "upstream-made") {
			t.Errorf("%s: the hints %q, want the gateway's request id %q in place of the upstream's", p.name, hints, rid)
		}
		if strings.Contains(strings.ToLower(hints), "ratelimit") {
			t.Errorf("%s: the upstream's rate-limit fields were relayed: %q", p.name, hints)
		}
		if !strings.Contains(hints, "Link: </a>\r\n") || !strings.Contains(hints, "Link: </b>\r\n") {
			t.Errorf("%s: the hints %q lack their Link fields", p.name, hints)
		}
		// http.Transport drops a Connection field that says close, and
		// with it the names it lists: the fields named stay behind on the
		// gateway's own client's path only.
		if p.name == "plain" && strings.Contains(hints, "X-Secret") {
			t.Errorf("%s: a field the 103's Connection field names was relayed: %q", p.name, hints)
		}
		for _, f := range []string{"X-Request-Id: ", "Ratelimit: ", "Ratelimit-Policy: ", "X-Ratelimit-Remaining: "} {
			if n := strings.Count(final, f); n != 1 {
				t.Errorf("%s: the final answer has %d %q: %q", p.name, n, f, final)
			}
		}
		if strings.Contains(final, "upstream-made") || strings.Contains(final, "Link:") {
			t.Errorf("%s: the final answer %q", p.name, final)
		}
	}
}

// A status under 100 ("099", which net/http reads as 99) is no answer:
// 502 upstream_unavailable on either client path, counted by the breaker
// as the upstream's failure.
func TestStatusUnder100(t *testing.T) {
	t.Parallel()
	up := rawUpstream(t, answering("HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok"))
	h := routeTo(t, up, "", "    breaker: {enabled: true, min_calls: 10}\n")
	for _, p := range bothPaths {
		got := rawExchange(t, h, p.request, false)
		if !strings.HasPrefix(got, "HTTP/1.1 502 ") || !strings.Contains(got, `"code":"upstream_unavailable"`) {
			t.Errorf("%s: %q, want 502 upstream_unavailable", p.name, got)
		}
	}
	if b := h.gw.Breakers(); len(b) != 1 || b[0].Failures != 2 {
		t.Errorf("breakers %+v, want two failures", b)
	}
}

// The hop-by-hop fields a Connection field that says close names stay
// with the upstream on the gateway's own client's path, wherever the
// field is: folded over two lines, after 64 KiB of interim answers, after
// 64 KiB of the head's own fields.
func TestHopFieldsNamedByAClosingConnectionField(t *testing.T) {
	t.Parallel()
	const get = "GET /api/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct{ name, answer string }{
		{"folded", "HTTP/1.1 200 OK\r\nConnection: close,\r\n X-Secret\r\nX-Secret: s\r\nContent-Length: 2\r\n\r\nok"},
		{"after 64 KiB of interim answers", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </"+strings.Repeat("l", 5000)+">\r\n\r\n", 15) +
			"HTTP/1.1 200 OK\r\nConnection: X-Secret, close\r\nX-Secret: s\r\nContent-Length: 2\r\n\r\nok"},
		{"after 64 KiB of fields", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 70<<10) + "\r\nConnection: X-Secret, close\r\nX-Secret: s\r\nContent-Length: 2\r\n\r\nok"},
	} {
		h := routeTo(t, rawUpstream(t, answering(tc.answer)), "", "")
		got := rawExchange(t, h, get, false)
		_, final, _ := strings.Cut(got, "HTTP/1.1 200 OK\r\n")
		if !strings.HasSuffix(final, "\r\n\r\nok") {
			t.Fatalf("%s: %.300q", tc.name, got)
		}
		if strings.Contains(final, "X-Secret") {
			t.Errorf("%s: the field Connection names reached the client", tc.name)
		}
	}
}

// A client that sends its body with Expect: 100-continue gets the 100 from
// the gateway's server when the body is first read, which on
// http.Transport's path happens on the Transport's writing goroutine: no
// informational answer is relayed to it meanwhile from the reading one.
func TestNoInterimAnswersBesideAContinue(t *testing.T) {
	t.Parallel()
	up := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"+
			strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </b>\r\n\r\n", 10))
		io.Copy(io.Discard, r.Body)
		// It closes the connection after one answer, so it says so: the
		// next request must not find it in the gateway's pool.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
	})
	h := routeTo(t, up, "", "")
	for range 10 {
		got := rawExchange(t, h, "POST /api/x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n", false)
		if !strings.HasPrefix(got, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n") || !strings.HasSuffix(got, "ok") {
			t.Fatalf("%q, want the 100 and the answer", got)
		}
	}
}
