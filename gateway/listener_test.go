package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// plainError is what net/http's own error answer looks like; a proxied
// body or a joined connection may carry the same bytes.
const plainError = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// behindListener serves h's gateway through Gateway.Listener, as
// `floodgate serve` does, and returns the server.
func behindListener(t *testing.T, h *harness) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h.gw)
	srv.Listener = h.gw.Listener(srv.Config, srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// exchangeWith sends request to addr and returns all it answers until the
// connection closes.
func exchangeWith(t *testing.T, addr, request string) string {
	t.Helper()
	conn, err := netDial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, request)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(conn)
	return string(b)
}

// An upstream's body that the gateway writes in pieces reaches the client
// as it was sent, though a piece begins like net/http's own error answer:
// a body streamed to an HTTP/1.0 client (each flush one write to the
// connection), and a body of known length whose pieces come apart.
func TestListenerPassesBodiesAsTheyAre(t *testing.T) {
	t.Parallel()
	t.Run("HTTP/1.0 stream", func(t *testing.T) {
		piece := plainError + "a line of the stream"
		up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			rc := http.NewResponseController(w)
			io.WriteString(w, "first\n")
			rc.Flush()
			time.Sleep(50 * time.Millisecond)
			io.WriteString(w, piece)
			rc.Flush()
			time.Sleep(50 * time.Millisecond)
			io.WriteString(w, "\nlast\n")
		})
		srv := behindListener(t, newHarness(t, basic, up))
		got := exchangeWith(t, srv.Listener.Addr().String(), "GET /api/x HTTP/1.0\r\nHost: x\r\n\r\n")
		if _, body, _ := strings.Cut(got, "\r\n\r\n"); body != "first\n"+piece+"\nlast\n" {
			t.Errorf("the body %q", body)
		}
	})
	t.Run("known length", func(t *testing.T) {
		a := strings.Repeat("a", 20000)
		b := plainError + strings.Repeat("b", 8192-len(plainError))
		up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(a)+len(b)))
			rc := http.NewResponseController(w)
			w.WriteHeader(http.StatusOK)
			rc.Flush()
			for _, p := range []string{a, b} {
				time.Sleep(50 * time.Millisecond)
				io.WriteString(w, p)
				rc.Flush()
			}
		})
		srv := behindListener(t, newHarness(t, basic, up))
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Get(srv.URL + "/api/x")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(got) != a+b {
			i := strings.Index(string(got), "HTTP/1.1")
			t.Errorf("read %d of %d bytes (%v); at %d: %.200q", len(got), len(a+b), err, i, got[max(i, 0):])
		}
	})
}

// The bytes of a connection joined to the upstream's after a switch of
// protocols are the protocol's, whatever they look like.
func TestListenerLeavesJoinedConnections(t *testing.T) {
	t.Parallel()
	h := newHarness(t, upgradeRoute(""), echoUpgrade(t, "", nil))
	srv := behindListener(t, h)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "GET /api/ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	msg := plainError + "through the tunnel"
	io.WriteString(conn, msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
		t.Errorf("the echo %q (%v), want %q", got, err, msg)
	}
	if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "", "code": "400"}); n != 0 {
		t.Errorf("the tunnel's bytes counted as %v refused requests", n)
	}
}
