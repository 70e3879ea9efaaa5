package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

const waitTimeout = 10 * time.Second

// testServer serves handler on a clear listener (h2c when asked) and a
// TLS one, and returns their addresses and the client TLS config.
type testServer struct {
	s              *Server
	clear, tlsAddr string
	clientTLS      *tls.Config
	wrapped        atomic.Int64 // connections the HTTP/1.1 listener wrapper saw
}

func start(t *testing.T, h2c bool, handler http.Handler) *testServer {
	t.Helper()
	ca := testcerts.NewCA(t, "test CA")
	cert := ca.Server(t, "edge").TLS(t)
	ts := &testServer{clientTLS: &tls.Config{RootCAs: ca.Pool()}}
	ts.s = New(Options{
		HTTP: &http.Server{Handler: handler},
		Listener: func(srv *http.Server, ln net.Listener) net.Listener {
			return countingListener{ln, &ts.wrapped}
		},
		HTTP2:            &http.Server{Handler: handler},
		HandshakeTimeout: waitTimeout,
		Log:              slog.New(slog.DiscardHandler),
	})
	clearLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.clear, ts.tlsAddr = clearLn.Addr().String(), tlsLn.Addr().String()
	errs := make(chan error, 2)
	go func() { errs <- ts.s.ServeClear(clearLn, h2c) }()
	go func() {
		errs <- ts.s.ServeTLS(tlsLn, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	}()
	t.Cleanup(func() {
		ts.s.Close()
		for range 2 {
			if err := <-errs; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("Serve: %v, want ErrServerClosed", err)
			}
		}
	})
	return ts
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// describe answers what the handler saw of the request.
var describe = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	tlsOn := r.TLS != nil && r.TLS.HandshakeComplete
	fmt.Fprintf(w, "%s tls=%v", r.Proto, tlsOn)
})

func clients(ts *testServer) map[string]struct {
	c        *http.Client
	url      string
	want     string
	wrapped1 bool // through the HTTP/1.1 listener
} {
	var unencrypted http.Protocols
	unencrypted.SetUnencryptedHTTP2(true)
	h1tls := ts.clientTLS.Clone()
	h1tls.NextProtos = []string{"http/1.1"}
	type c = struct {
		c        *http.Client
		url      string
		want     string
		wrapped1 bool
	}
	return map[string]c{
		"h1":     {&http.Client{Transport: &http.Transport{}}, "http://" + ts.clear, "HTTP/1.1 tls=false", true},
		"h1+tls": {&http.Client{Transport: &http.Transport{TLSClientConfig: h1tls}}, "https://" + ts.tlsAddr, "HTTP/1.1 tls=true", true},
		"h2":     {&http.Client{Transport: &http.Transport{TLSClientConfig: ts.clientTLS, ForceAttemptHTTP2: true}}, "https://" + ts.tlsAddr, "HTTP/2.0 tls=true", false},
		"h2c":    {&http.Client{Transport: &http.Transport{Protocols: &unencrypted}}, "http://" + ts.clear, "HTTP/2.0 tls=false", false},
	}
}

// Each protocol reaches the handler, HTTP/1.1 through the listener the
// framing wraps, with r.TLS set over TLS.
func TestProtocols(t *testing.T) {
	ts := start(t, true, describe)
	for name, c := range clients(ts) {
		t.Run(name, func(t *testing.T) {
			before := ts.wrapped.Load()
			resp, err := c.c.Get(c.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c.c.CloseIdleConnections()
			if string(body) != c.want {
				t.Errorf("got %q, want %q", body, c.want)
			}
			if wrapped := ts.wrapped.Load() > before; wrapped != c.wrapped1 {
				t.Errorf("through the HTTP/1.1 listener: %v, want %v", wrapped, c.wrapped1)
			}
		})
	}
}

// A request shorter than the preface is answered without waiting for
// more bytes that will not come.
func TestShortRequestWithH2C(t *testing.T) {
	ts := start(t, true, describe)
	c, err := net.Dial("tcp", ts.clear)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitTimeout))
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n") // 18 bytes; the preface is 24
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "HTTP/1.0 tls=false" {
		t.Errorf("got %q", body)
	}
}

// Without h2c, the preface goes to the HTTP/1.1 server as any request.
func TestPrefaceWithoutH2C(t *testing.T) {
	ts := start(t, false, describe)
	c, err := net.Dial("tcp", ts.clear)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitTimeout))
	io.WriteString(c, preface)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	// net/http hands "PRI * HTTP/2.0" to the handler; the gateway's
	// framing answers it 505 before.
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "HTTP/2.0 tls=false" || ts.wrapped.Load() != 1 {
		t.Errorf("answer %d %q, %d connections through the HTTP/1.1 listener; want the HTTP/1.1 server's, and 1",
			resp.StatusCode, body, ts.wrapped.Load())
	}
}

// Shutdown lets the requests in flight finish, on both protocols, and
// closes the connections still in their handshake.
func TestShutdownDrains(t *testing.T) {
	arrived := make(chan string, 4)
	release := make(chan struct{})
	ts := start(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Proto
		<-release
		io.WriteString(w, "done "+r.Proto)
	}))
	// A client that connects and never says hello.
	silent, err := net.Dial("tcp", ts.tlsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	type result struct {
		body string
		err  error
	}
	done := make(chan result, 4)
	cs := clients(ts)
	for _, name := range []string{"h1", "h2", "h2c"} {
		c := cs[name]
		go func() {
			resp, err := c.c.Get(c.url + "/")
			if err != nil {
				done <- result{err: err}
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			done <- result{string(b), err}
		}()
	}
	for range 3 {
		<-arrived
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		shut <- ts.s.Shutdown(ctx)
	}()
	// The silent connection is closed, and no new one is taken.
	silent.SetReadDeadline(time.Now().Add(waitTimeout))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the connection in its handshake: %v, want EOF", err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		c, err := net.Dial("tcp", ts.tlsAddr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the TLS listener still accepts")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with requests in flight", err)
	case r := <-done:
		t.Fatalf("a request ended before its handler: %+v", r)
	default:
	}
	close(release)
	got := map[string]bool{}
	for range 3 {
		r := <-done
		if r.err != nil {
			t.Errorf("request in flight: %v", r.err)
		}
		got[r.body] = true
	}
	if !got["done HTTP/1.1"] || !got["done HTTP/2.0"] || len(got) != 2 {
		t.Errorf("answers %v", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// A handshake that fails does not stop the listener.
func TestHandshakeFailure(t *testing.T) {
	ts := start(t, false, describe)
	c, err := net.Dial("tcp", ts.tlsAddr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(waitTimeout))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(c)
	c.Close()
	if strings.Contains(string(b), "tls=") {
		t.Errorf("plain HTTP on the TLS listener was served: %q", b)
	}
	resp, err := clients(ts)["h2"].c.Get("https://" + ts.tlsAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after a failed handshake: %d", resp.StatusCode)
	}
}
