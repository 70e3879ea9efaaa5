package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// An answer's client that stops reading holds no more than the stream's
// window in the gateway: the target's writes stop there, and another
// stream on the same connection to the target goes on.
func TestH2StalledStreamWindow(t *testing.T) {
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
	for sent.Load() < h2StreamWindow {
		if time.Now().After(deadline) {
			t.Fatalf("the target sent %d bytes of the stalled answer, want the window's %d at least", sent.Load(), h2StreamWindow)
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
	const bound = h2StreamWindow + clientWindow + 64<<10
	watch := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(watch) {
		if got := sent.Load(); got > bound {
			t.Fatalf("the target wrote %d bytes to the stalled stream, want at most %d", got, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("the target wrote %d bytes to the stalled stream", sent.Load())
}
