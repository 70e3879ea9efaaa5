package gateway

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A client that stops reading a large answer (its socket's buffers fill,
// or its HTTP/2 window shuts) has the exchange ended after
// server.send_timeout: the concurrency lease it held frees, the answer
// it was reading breaks off, and the request counts as 499.
func TestProtocolsSendTimeout(t *testing.T) {
	t.Parallel()
	chunk := []byte(strings.Repeat("x", 64<<10))
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/big" {
			io.WriteString(w, "small")
			return
		}
		// Far more than the buffers between the gateway and the client
		// hold (the HTTP/2 client's stream window is 4MB); it ends when
		// the gateway closes its connection.
		for range (1 << 30) / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	file := filepath.Join(t.TempDir(), "access.log")
	yaml := `
server: {send_timeout: 200ms, access_log: "` + file + `"}
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: inflight, key: [route], algorithm: concurrency, limit: 1}
`
	timedOut := 0 // access log lines of a send timeout, of the protocols so far
	eachProtocol(t, yaml, up, func(t *testing.T, o *overProtocol) {
		big := o.do("GET", "/api/big", nil, nil)
		defer big.Body.Close()
		if big.StatusCode != 200 {
			t.Fatalf("big: %d", big.StatusCode)
		}
		// The big answer holds the only lease until its client has
		// taken nothing for send_timeout.
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp := o.do("GET", "/api/small", nil, nil)
			body := drain(resp)
			if resp.StatusCode == 200 {
				if body != "small" {
					t.Fatalf("small: %q", body)
				}
				break
			}
			if resp.StatusCode != 429 {
				t.Fatalf("small while big is held: %d %s", resp.StatusCode, body)
			}
			if time.Now().After(deadline) {
				t.Fatal("the lease of a client that stopped reading was not released")
			}
			time.Sleep(20 * time.Millisecond)
		}
		n, err := io.Copy(io.Discard, big.Body)
		if err == nil {
			t.Errorf("the answer the client stopped reading ended whole after %d bytes", n)
		}
		if n >= 1<<30 {
			t.Errorf("read %d bytes of it", n)
		}
		if c := counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"route": "api", "code": "499"}); c != 1 {
			t.Errorf("499s counted: %v", c)
		}
		// The access log says why, once the handler is done.
		timedOut++
		deadline = time.Now().Add(5 * time.Second)
		for {
			data, _ := os.ReadFile(file)
			n := 0
			for _, l := range strings.Split(string(data), "\n") {
				if strings.Contains(l, `"path":"/api/big","route":"api","status":499,`) && strings.Contains(l, `"error":"send_timeout"`) {
					n++
				}
			}
			if n == timedOut {
				break
			}
			if n > timedOut || time.Now().After(deadline) {
				t.Fatalf("%d access log lines of a send timeout, want %d:\n%s", n, timedOut, data)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// The bound of a write is the write's alone: a later answer on the same
// connection that takes longer than send_timeout to come from the
// upstream, and so has no body write of its own to bound, goes out.
func TestProtocolsSendTimeoutPerWrite(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/late" {
			// The upstream is slow; the client reads at once.
			<-time.After(300 * time.Millisecond)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		io.WriteString(w, "answer "+r.URL.Path)
	})
	eachProtocol(t, "server: {send_timeout: 100ms}\n"+basic, up, func(t *testing.T, o *overProtocol) {
		for _, path := range []string{"/api/first", "/api/late", "/api/last"} {
			resp := o.do("GET", path, nil, nil)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			want, code := "answer "+path, 200
			if path == "/api/late" {
				want, code = "", 204
			}
			if err != nil || resp.StatusCode != code || string(b) != want {
				t.Fatalf("%s: %d %q %v", path, resp.StatusCode, b, err)
			}
		}
	})
}
