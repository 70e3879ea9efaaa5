package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// lenientUpstream is an upstream that reads requests as loosely as some
// servers do: a request line of any words, whatever fields. It keeps
// each request's head as it came and answers 200 "ok", closing the
// connection.
type lenientUpstream struct {
	url   string
	mu    sync.Mutex
	heads []string
}

func newLenientUpstream(t *testing.T) *lenientUpstream {
	u := &lenientUpstream{}
	u.url = rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var head strings.Builder
		n := 0
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			head.WriteString(line)
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				break
			}
			if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "content-length") && n == 0 {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		io.CopyN(io.Discard, br, int64(n))
		u.mu.Lock()
		u.heads = append(u.heads, head.String())
		u.mu.Unlock()
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	return u
}

func (u *lenientUpstream) got() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.heads...)
}

// h2Exchange sends one request to the gateway as frames written by hand,
// over TLS (ALPN h2) or in clear as the protocol is.
func (o *overProtocol) h2Exchange(t *testing.T, fields [][2]string, body []byte) h2Answer {
	t.Helper()
	if !o.p.tls {
		return h2Exchange(t, o.hostPort(), fields, body)
	}
	c, err := tls.Dial("tcp", o.hostPort(), &tls.Config{RootCAs: o.ca.Pool(), ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		t.Fatalf("TLS negotiated %q, not h2", p)
	}
	return h2ExchangeOn(t, c, fields, body)
}

// rawHTTP1 writes raw to the gateway, over TLS or in clear as the
// protocol is, and reads one answer: its status and body.
func (o *overProtocol) rawHTTP1(t *testing.T, raw string) (int, string) {
	t.Helper()
	var c net.Conn
	var err error
	if o.p.tls {
		c, err = tls.Dial("tcp", o.hostPort(), &tls.Config{RootCAs: o.ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	} else {
		c, err = net.Dial("tcp", o.hostPort())
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// What HTTP/1.1 refuses in a request (net/http's parser, the Listener's
// framing checks) is refused over HTTP/2 too, where the fields are
// binary frames that may hold any of it: a method that is not a token,
// an authority or Host that is no host, a target with a space or a raw
// byte above 0x7e, a Content-Length that is not digits or that two
// fields give two values of. The gateway's 400 answers it before any
// route is matched, and an upstream that reads requests loosely (the
// second word of the request line as the target) sees nothing: written
// into its request line, "DELETE /admin/delete-all" would have been
// DELETE /admin/delete-all on a route and under limits made for
// /public/x.
func TestProtocolsRefuseWhatHTTP1Refuses(t *testing.T) {
	t.Parallel()
	up := newLenientUpstream(t)
	cfg := `
admin: {listen: ""}
routes:
  - id: public
    match: {path: /public/**}
    upstream: {targets: ["` + up.url + `"]}
    limits: [{name: per-path, key: [path], rate: 1000/min}]
`
	h2req := func(method, authority, path string, more ...string) [][2]string {
		f := [][2]string{{":method", method}, {":scheme", "http"}}
		if authority != "" {
			f = append(f, [2]string{":authority", authority})
		}
		f = append(f, [2]string{":path", path})
		for i := 0; i < len(more); i += 2 {
			f = append(f, [2]string{more[i], more[i+1]})
		}
		return f
	}
	refused := []struct {
		name string
		h2   [][2]string
		body []byte // nil: the head ends the stream
		// h1 is the same request over HTTP/1.1, "" where only the
		// Listener's checks refuse it (a test of their own), not
		// net/http's.
		h1 string
	}{
		{"a method with a space", h2req("DELETE /admin/delete-all", "a.test", "/public/x"), nil,
			"DELETE /admin/delete-all /public/x HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"a method with a separator", h2req("G(ET", "a.test", "/public/x"), nil,
			"G(ET /public/x HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"a method with a colon", h2req("GET:", "a.test", "/public/x"), nil,
			"GET: /public/x HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"an authority with a space", h2req("GET", "a.test evil", "/public/x"), nil,
			"GET /public/x HTTP/1.1\r\nHost: a.test evil\r\n\r\n"},
		{"an authority with a slash", h2req("GET", "a.test/x", "/public/x"), nil,
			"GET /public/x HTTP/1.1\r\nHost: a.test/x\r\n\r\n"},
		{"a Host with a space", h2req("GET", "", "/public/x", "host", "a.test evil"), nil,
			"GET /public/x HTTP/1.1\r\nHost: a.test evil\r\n\r\n"},
		{"a target with a space", h2req("GET", "a.test", "/public/ x"), nil,
			"GET /public/ x HTTP/1.1\r\nHost: a.test\r\n\r\n"},
		{"a target with a raw byte above 0x7e", h2req("GET", "a.test", "/public/\xc3\xa9"), nil, ""},
		{"a Content-Length that is not digits, no body", h2req("GET", "a.test", "/public/x", "content-length", "abc"), nil,
			"GET /public/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: abc\r\n\r\n"},
		{"a Content-Length list, no body", h2req("GET", "a.test", "/public/x", "content-length", "5,5"), nil,
			"GET /public/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5,5\r\n\r\nhello"},
		{"two Content-Lengths that differ", h2req("POST", "a.test", "/public/x", "content-length", "5", "content-length", "6"), []byte("hello"),
			"POST /public/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello"},
	}
	eachProtocol(t, cfg, nil, func(t *testing.T, o *overProtocol) {
		before := len(up.got())
		for _, tc := range refused {
			if o.p.h2() {
				a := o.h2Exchange(t, tc.h2, tc.body)
				if a.status != 400 || !strings.Contains(a.body, `"code":"bad_request"`) || a.header.Get("Content-Type") != "application/json" {
					t.Errorf("%s: %+v, want the gateway's 400", tc.name, a)
				}
				continue
			}
			if tc.h1 == "" || !o.p.framed && !o.p.edge && strings.Contains(tc.name, "raw byte") {
				continue
			}
			if status, body := o.rawHTTP1(t, tc.h1); status != 400 {
				t.Errorf("%s over HTTP/1.1: %d %q, want 400", tc.name, status, body)
			}
		}
		if got := up.got()[before:]; len(got) != 0 {
			t.Errorf("the upstream got %q", got)
		}
		if o.p.h2() {
			if n := counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"code": "400"}); n != float64(len(refused)) {
				t.Errorf("gateway_http_requests_total{code=400} = %v, want %d", n, len(refused))
			}
		}

		// What HTTP/1.1 takes, HTTP/2 takes too: a method that is a
		// token however unusual, a port, equal Content-Lengths.
		for _, tc := range []struct {
			name string
			h2   [][2]string
			body []byte
			h1   string
			line string // the request line the upstream got
		}{
			{"an unusual method", h2req("PURGE", "a.test:8080", "/public/x?q=1"), nil,
				"PURGE /public/x?q=1 HTTP/1.1\r\nHost: a.test:8080\r\n\r\n", "PURGE /public/x?q=1 HTTP/1.1"},
			{"equal Content-Lengths", h2req("POST", "a.test", "/public/y", "content-length", "5", "content-length", "5"), []byte("hello"),
				"POST /public/y HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "POST /public/y HTTP/1.1"},
		} {
			n := len(up.got())
			if o.p.h2() {
				if a := o.h2Exchange(t, tc.h2, tc.body); a.status != 200 || a.body != "ok" {
					t.Errorf("%s: %+v, want the upstream's 200", tc.name, a)
					continue
				}
			} else if status, body := o.rawHTTP1(t, tc.h1); status != 200 || body != "ok" {
				t.Errorf("%s over HTTP/1.1: %d %q", tc.name, status, body)
				continue
			}
			got := up.got()
			if len(got) != n+1 {
				t.Errorf("%s: the upstream got %d requests, want 1", tc.name, len(got)-n)
				continue
			}
			if line, _, _ := strings.Cut(got[n], "\r\n"); line != tc.line {
				t.Errorf("%s: the upstream's request line is %q, want %q", tc.name, line, tc.line)
			}
		}
	})
}

// A Content-Length that is not digits on a request with a body is
// refused by net/http's HTTP/2 server when the body's first DATA frame
// comes (it resets the stream) or by the gateway, whichever reads it
// first; the upstream never sees it.
func TestH2ContentLengthWithABody(t *testing.T) {
	t.Parallel()
	up := newLenientUpstream(t)
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: public
    match: {path: /public/**}
    upstream: {targets: ["`+up.url+`"]}
`, nil)
	var p clientProtocol
	for _, p = range clientProtocols {
		if p.name == "edge-h2c" {
			break
		}
	}
	o := serveOver(t, h, p)
	for _, cl := range []string{"abc", "-1", "5,5", "+5", " 5"} {
		a := o.h2Exchange(t, [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "a.test"},
			{":path", "/public/x"}, {"content-length", cl}}, []byte("hello"))
		gateways := a.status == 400 && strings.Contains(a.body, `"code":"bad_request"`)
		if !gateways && a.reset != http2.ErrCodeProtocol {
			t.Errorf("content-length %q: %+v, want the gateway's 400 or a reset", cl, a)
		}
	}
	if got := up.got(); len(got) != 0 {
		t.Errorf("the upstream got %q", got)
	}
}

// An HTTP/1.1 request to switch to h2c (or h2) does not go on as one: the
// gateway does not offer HTTP/2 by upgrade, and an upstream that took
// the switch would join the client to it by a tunnel that no route or
// limit sees (h2c smuggling). The protocol and HTTP2-Settings are taken
// out and the request goes upstream as a plain one; an upstream that
// answers it 101 all the same gets the client no tunnel. Another
// protocol asked for beside h2c goes on.
func TestH2CUpgradeIsNotPassedOn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var heads []http.Header
	url := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		mu.Lock()
		heads = append(heads, r.Header)
		mu.Unlock()
		// Switches to whatever was asked, and to h2c when nothing was.
		proto := r.Header.Get("Upgrade")
		if proto == "" {
			proto = "h2c"
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+proto+"\r\n\r\n")
		b := make([]byte, 4096)
		for {
			n, err := br.Read(b)
			if err != nil {
				return
			}
			io.WriteString(c, "TUNNEL:"+string(b[:n]))
		}
	})
	cfg := `
admin: {listen: ""}
routes:
  - id: public
    match: {path: /public/**}
    upstream: {targets: ["` + url + `"]}
`
	for _, p := range clientProtocols {
		if p.h2() {
			continue // HTTP/2's server refuses an Upgrade field itself (TestH2ForbiddenRequests)
		}
		t.Run(p.name, func(t *testing.T) {
			o := serveOver(t, newHarness(t, cfg, nil), p)
			for _, tc := range []struct {
				upgrade string
				status  int
				want    string // the Upgrade the upstream got
			}{
				{"h2c", 502, ""},
				{"H2C", 502, ""},
				{"h2", 502, ""},
				{"h2c, websocket", 101, "websocket"},
			} {
				mu.Lock()
				heads = nil
				mu.Unlock()
				var c net.Conn
				var err error
				if p.tls {
					c, err = tls.Dial("tcp", o.hostPort(), &tls.Config{RootCAs: o.ca.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
				} else {
					c, err = net.Dial("tcp", o.hostPort())
				}
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, "GET /public/x HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade, HTTP2-Settings\r\n"+
					"Upgrade: "+tc.upgrade+"\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
				br := bufio.NewReader(c)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("Upgrade %s: no answer: %v", tc.upgrade, err)
				}
				if resp.StatusCode != tc.status {
					t.Errorf("Upgrade %s: %d, want %d", tc.upgrade, resp.StatusCode, tc.status)
				}
				if resp.StatusCode != 101 {
					if b, _ := io.ReadAll(resp.Body); tc.status == 502 && !strings.Contains(string(b), `"code":"upstream_unavailable"`) {
						t.Errorf("Upgrade %s: %q, want the gateway's 502", tc.upgrade, b)
					}
					// What a client would send through the tunnel reaches
					// no upstream: the connection ends after the answer.
					io.WriteString(c, http2.ClientPreface)
					if rest, _ := io.ReadAll(br); strings.Contains(string(rest), "TUNNEL") {
						t.Errorf("Upgrade %s: a tunnel: %q", tc.upgrade, rest)
					}
				}
				c.Close()
				mu.Lock()
				got := heads
				mu.Unlock()
				if len(got) != 1 {
					t.Fatalf("Upgrade %s: the upstream got %d requests, want 1", tc.upgrade, len(got))
				}
				if u := strings.Join(got[0]["Upgrade"], ","); u != tc.want {
					t.Errorf("Upgrade %s: the upstream got Upgrade %q, want %q", tc.upgrade, u, tc.want)
				}
				if s := got[0]["Http2-Settings"]; s != nil {
					t.Errorf("Upgrade %s: the upstream got HTTP2-Settings %q", tc.upgrade, s)
				}
			}
		})
	}
}
