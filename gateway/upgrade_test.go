package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// echoUpgrade is an upstream that switches to the "echo" protocol, or to
// answer if set, and then sends back every byte it reads until the client
// closes; closed receives when it has.
func echoUpgrade(t *testing.T, answer string, closed chan<- struct{}) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Connection"), "upgrade") || r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade to echo expected", http.StatusUpgradeRequired)
			return
		}
		if answer == "" {
			answer = "echo"
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + answer + "\r\nX-Up: 1\r\n\r\n")
		brw.Flush()
		io.Copy(conn, brw)
		if closed != nil {
			closed <- struct{}{}
		}
	})
}

// dialUpgrade sends an upgrade request to the gateway over a raw
// connection and returns it with the response head.
func dialUpgrade(t *testing.T, h *harness, path, proto string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	u, _ := url.Parse(h.srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: "+proto+"\r\nX-User-Id: u1\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp
}

// switched dials an upgrade to "echo" on /api/ws and fails the test
// unless the gateway switched.
func switched(t *testing.T, h *harness) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, br, resp := dialUpgrade(t, h, "/api/ws", "echo")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d, want 101", resp.StatusCode)
	}
	return conn, br
}

// upgradeRoute is a config of one route, /api/**, to the test's upstream,
// with extra (its limits or breaker) added to the route.
func upgradeRoute(extra string) string {
	return `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
` + extra
}

// TestUpgrade: a request that asks to switch protocols (WebSocket's
// handshake, say) gets the upstream's 101 with the gateway's headers, and
// then the two connections are one: bytes flow both ways until the client
// closes, which closes the upstream's side too.
func TestUpgrade(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 1)
	h := newHarness(t, upgradeRoute(`
    limits: [{name: user, key: ["header:X-User-Id"], rate: 100/min}]
`), echoUpgrade(t, "", closed))
	conn, br, resp := dialUpgrade(t, h, "/api/ws", "echo")
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" || resp.Header.Get("X-Up") != "1" {
		t.Fatalf("answer %d, headers %v; want 101 with the upstream's Upgrade and X-Up", resp.StatusCode, resp.Header)
	}
	if resp.Header.Get("RateLimit") == "" || resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("the 101 lacks the gateway's headers: %v", resp.Header)
	}
	for _, msg := range []string{"hello", "and again"} {
		io.WriteString(conn, msg)
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, buf, err)
		}
	}
	conn.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's side stayed open after the client closed")
	}
	// The handler counts the exchange once both directions have ended.
	deadline := time.Now().Add(10 * time.Second)
	for counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "api", "code": "101"}) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the 101 was not counted in gateway_http_requests_total")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUpgradeHeldByConcurrency: an upgraded connection holds its
// concurrency lease until it closes, so a concurrency limit bounds the
// open connections.
func TestUpgradeHeldByConcurrency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, upgradeRoute(`
    limits: [{name: sockets, key: [route], algorithm: concurrency, limit: 1}]
`), echoUpgrade(t, "", nil))
	first, _ := switched(t, h)
	_, _, resp := dialUpgrade(t, h, "/api/ws", "echo")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second while the first is open: %d, want 429", resp.StatusCode)
	}
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, resp = dialUpgrade(t, h, "/api/ws", "echo")
		if resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the first closed: still %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUpgradeRefused: an upstream that switches to another protocol than
// the one asked for is a bad gateway; one that does not switch answers as
// usual, without the hop-by-hop Upgrade.
func TestUpgradeRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, basic, echoUpgrade(t, "other", nil))
	_, _, resp := dialUpgrade(t, h, "/api/ws", "echo")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("an upstream that switched to another protocol: %d, want 502", resp.StatusCode)
	}
	_, _, resp = dialUpgrade(t, h, "/api/ws", "nope")
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Upgrade") != "" {
		t.Fatalf("an upstream that did not switch: %d %v, want its 426 without Upgrade", resp.StatusCode, resp.Header)
	}
}

// TestUpgradeEndsOnClose: a server's graceful shutdown does not wait for
// connections it handed over, so the gateway's Close ends them, and
// returns only once their handlers have finished (their leases released,
// the exchange counted).
func TestUpgradeEndsOnClose(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 1)
	// Close twice (here and in the harness's cleanup) is harmless.
	h := newHarness(t, upgradeRoute(`
    limits: [{name: sockets, key: [route], algorithm: concurrency, limit: 1}]
`), echoUpgrade(t, "", closed))
	conn, br := switched(t, h)
	if err := h.gw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "api", "code": "101"}); got != 1 {
		t.Errorf("when Close returned the exchange was not counted (%v): its handler had not finished", got)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the client's connection is open after Close (read %q, %v)", n, err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's side stayed open after Close")
	}
}

// TestUpgradeAsBreakerTrial: a switch of protocols is judged when it
// happens, not when its connection ends: a half-open breaker whose trial
// is an upgrade closes as soon as the upstream answers 101, while the
// connection stays open.
func TestUpgradeAsBreakerTrial(t *testing.T) {
	t.Parallel()
	h := newHarness(t, upgradeRoute(`
    breaker: {enabled: true, window: 10s, min_calls: 1, failure_rate: 0.5, open_for: 100ms, half_open_calls: 1, failure_statuses: [426]}
`), echoUpgrade(t, "", nil))
	// The upstream answers 426 to a plain request, a failure here.
	resp := h.do("GET", "/api/plain", nil, nil)
	resp.Body.Close()
	state := func() string { return h.gw.Breakers()[0].State }
	if state() != "OPEN" {
		t.Fatalf("after a failure: %s, want OPEN", state())
	}
	h.clock.Step(150 * time.Millisecond) // open_for
	conn, br := switched(t, h)           // the trial
	deadline := time.Now().Add(10 * time.Second)
	for state() != "CLOSED" {
		if time.Now().After(deadline) {
			t.Fatalf("with the trial's connection open: %s, want CLOSED once it switched", state())
		}
		time.Sleep(10 * time.Millisecond)
	}
	io.WriteString(conn, "still open")
	buf := make([]byte, len("still open"))
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("the connection after the breaker closed: %v", err)
	}
}
