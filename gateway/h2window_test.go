package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// An answer's client that stops reading holds no more than the stream's
// window in the gateway: the target's writes stop there, and another
// stream on the same connection to the target goes on.
func TestH2StalledStreamWindow(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	var mu sync.Mutex
	peers := map[string]string{}
	chunk := make([]byte, 16<<10)
	const whole = 2 << 20
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		peers[r.URL.Path] = r.RemoteAddr
		mu.Unlock()
		rc := http.NewResponseController(w)
		w.WriteHeader(200)
		rc.Flush()
		switch r.URL.Path {
		case "/stall":
			for r.Context().Err() == nil {
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil || rc.Flush() != nil {
					return
				}
			}
		case "/flow":
			for n := 0; n < whole; n += len(chunk) {
				w.Write(chunk)
			}
		}
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	up.Config.Protocols = &p
	up.Start()
	t.Cleanup(up.Close)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["{{UP}}"], protocol: h2c}
`, up.URL, nil)

	// The client's own window is small, so that what the target sends
	// past it waits in the gateway.
	const clientWindow = 64 << 10
	var cp http.Protocols
	cp.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &cp,
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: clientWindow}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.srv.URL+"/stall", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Not read: the client stalls.

	deadline := time.Now().Add(5 * time.Second)
	for sent.Load() < upstream.H2StreamWindow {
		if time.Now().After(deadline) {
			t.Fatalf("the target sent %d bytes of the stalled answer, want the window's %d at least", sent.Load(), upstream.H2StreamWindow)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Another stream flows to its end meanwhile, on the same connection
	// to the target.
	resp2, err := client.Get(h.srv.URL + "/flow")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	if err != nil || n != whole {
		t.Fatalf("the other stream got %d bytes (%v), want %d", n, err, whole)
	}
	mu.Lock()
	if peers["/stall"] != peers["/flow"] {
		t.Errorf("the streams came over different connections: %v", peers)
	}
	mu.Unlock()

	// What the target could write to the stalled stream is the gateway's
	// window, the client's and what is on the way between them (a copy
	// buffer, a frame or so); the Transport's default window let it be
	// 4 MiB.
	const bound = upstream.H2StreamWindow + clientWindow + 64<<10
	watch := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(watch) {
		if got := sent.Load(); got > bound {
			t.Fatalf("the target wrote %d bytes to the stalled stream, want at most %d", got, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the target wrote %d bytes to the stalled stream", sent.Load())
}

// rawTarget answers whatever it is sent with answer, then closes the
// connection.
func rawTarget(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				if _, err := c.Read(buf); err != nil {
					return
				}
				io.WriteString(c, answer)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// An h2c target that answers the preface in another protocol fails the
// exchange as not_http2, with what it answered, whether or not its
// answer begins with a status line.
func TestH2CTargetNotHTTP2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, answer, says string }{
		{"status line", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			`it answered the HTTP/2 preface with \"HTTP/1.1 400 Bad Request\"`},
		// What Python's http.server sends to "PRI * HTTP/2.0": the error
		// page alone, as to an HTTP/0.9 request.
		{"bare page", "<!DOCTYPE HTML>\n<html lang=\"en\">\n<head><title>Error response</title></head></html>\n",
			`it answered the HTTP/2 preface with \"<!DOCTYPE HTML>\"`},
		{"short", "no", `it answered the HTTP/2 preface with \"no\"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newH2Harness(t, strings.ReplaceAll(grpcRoute, "PROTO", "h2c"), rawTarget(t, tc.answer), nil)
			answerOf(t, h.do("GET", "/grpc.testing.TestService/EmptyCall", nil, nil), 502, "upstream_unavailable")
			pollLog(t, h, `"msg":"upstream failed"`, "the target did not speak HTTP/2", tc.says, `"kind":"not_http2"`)
		})
	}
}
