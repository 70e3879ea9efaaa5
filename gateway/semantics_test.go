package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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
	resp, err := http.DefaultClient.Do(req) // returns with the head
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
    upstream: {targets: ["{{UP}}"], idle_timeout: 300ms}
`, up)
	for _, tt := range []struct {
		name, method string
		body         io.Reader
	}{
		{"small request", "GET", nil},
		{"streamed request body", "POST", strings.NewReader(strings.Repeat("x", 64<<10))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, h.srv.URL+"/api/big", tt.body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond) // five idle_timeouts, not reading
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
	if !strings.HasPrefix(got, "HTTP/1.0 200 OK\r\n") || strings.Contains(got, "103") {
		t.Errorf("HTTP/1.0: %q", got)
	}
}
