package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	nettextproto "net/textproto"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/edge"
	"github.com/floodgate-gw/floodgate/internal/h1"
	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// A clientProtocol is one way a client reaches the gateway: the server's
// listener and protocols, and a client that speaks the one under test.
type clientProtocol struct {
	name string
	// proto is the Proto of the requests the handler sees and of the
	// answers the client gets; scheme is the URL's.
	proto, scheme string
	// framed says the server's listener is the gateway's Listener (its
	// framing, and its own answers to what net/http refuses), as for
	// HTTP/1.1 in floodgate serve. HTTP/2 connections never pass it; nor
	// do TLS ones here, whose plaintext net/http's own TLS keeps from it:
	// what they test is the handler, with no answeringConn behind it.
	framed bool
	tls    bool
	// h2c serves HTTP/2 with prior knowledge beside HTTP/1.1.
	h2c bool
	// edge serves as floodgate serve does, through package edge.
	edge   bool
	client func(ca *testcerts.CA) http.RoundTripper
}

func (p clientProtocol) h2() bool { return p.proto == "HTTP/2.0" }

// clientProtocols are HTTP/1.1 in clear and over TLS, HTTP/2 over TLS
// (ALPN h2) and HTTP/2 in clear with prior knowledge (h2c), the last with
// net/http's client and with x/net/http2's; served by one net/http
// server, and as floodgate serve serves them.
var clientProtocols = []clientProtocol{
	{
		name: "http1", proto: "HTTP/1.1", scheme: "http", framed: true,
		client: func(*testcerts.CA) http.RoundTripper {
			return &http.Transport{DisableCompression: true, Protocols: protocolsOf((*http.Protocols).SetHTTP1)}
		},
	},
	{
		name: "http1-tls", proto: "HTTP/1.1", scheme: "https", tls: true,
		client: func(ca *testcerts.CA) http.RoundTripper {
			return &http.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
				Protocols: protocolsOf((*http.Protocols).SetHTTP1)}
		},
	},
	{
		name: "h2", proto: "HTTP/2.0", scheme: "https", tls: true,
		client: func(ca *testcerts.CA) http.RoundTripper {
			return &http.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
				Protocols: protocolsOf((*http.Protocols).SetHTTP2)}
		},
	},
	{
		name: "h2c", proto: "HTTP/2.0", scheme: "http", h2c: true,
		client: func(*testcerts.CA) http.RoundTripper {
			return &http.Transport{DisableCompression: true, Protocols: protocolsOf((*http.Protocols).SetUnencryptedHTTP2)}
		},
	},
	{
		name: "edge-http1-tls", proto: "HTTP/1.1", scheme: "https", tls: true, edge: true,
		client: func(ca *testcerts.CA) http.RoundTripper {
			return &http.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
				Protocols: protocolsOf((*http.Protocols).SetHTTP1)}
		},
	},
	{
		name: "edge-h2", proto: "HTTP/2.0", scheme: "https", tls: true, edge: true,
		client: func(ca *testcerts.CA) http.RoundTripper {
			return &http.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()},
				Protocols: protocolsOf((*http.Protocols).SetHTTP2)}
		},
	},
	{
		name: "edge-h2c", proto: "HTTP/2.0", scheme: "http", h2c: true, edge: true,
		client: func(*testcerts.CA) http.RoundTripper {
			return &http.Transport{DisableCompression: true, Protocols: protocolsOf((*http.Protocols).SetUnencryptedHTTP2)}
		},
	},
	{
		name: "h2c-x-net", proto: "HTTP/2.0", scheme: "http", h2c: true,
		client: func(*testcerts.CA) http.RoundTripper { return xnetH2C() },
	},
}

func protocolsOf(set func(*http.Protocols, bool)) *http.Protocols {
	p := new(http.Protocols)
	set(p, true)
	return p
}

// overProtocol is a harness's gateway served over one client protocol.
type overProtocol struct {
	*harness
	p      clientProtocol
	url    string // scheme://host:port
	client *http.Client
	ca     *testcerts.CA // signed the server's certificate
}

// serveOver serves h's gateway over p, with the server set up as
// floodgate serve sets up its own.
func serveOver(t *testing.T, h *harness, p clientProtocol) *overProtocol {
	t.Helper()
	ca := testcerts.NewCA(t, "floodgate test CA")
	tlsConfig := &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "gateway").TLS(t)},
		NextProtos:   []string{"h2", "http/1.1"},
	}
	maxHeader := h.gw.Config().Server.MaxHeaderBytes
	quiet := log.New(io.Discard, "", 0) // the tests see what the client sees
	tr := p.client(ca)
	o := &overProtocol{harness: h, p: p, client: &http.Client{Transport: tr}, ca: ca}
	t.Cleanup(func() {
		if c, ok := tr.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	})
	if p.edge {
		// As floodgate serve serves: HTTP/1.1, in clear or past the
		// handshake, through the gateway's Listener; HTTP/2 on a server
		// of its own.
		es := edge.New(edge.Options{
			HTTP:     &http.Server{Handler: h.gw, MaxHeaderBytes: maxHeader, ErrorLog: quiet},
			Listener: h.gw.Listener,
			HTTP2:    &http.Server{Handler: h.gw, MaxHeaderBytes: maxHeader, ErrorLog: quiet},
			Log:      discardLogger(),
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if p.tls {
			go es.ServeTLS(ln, tlsConfig)
		} else {
			go es.ServeClear(ln, p.h2c)
		}
		t.Cleanup(func() { es.Close() })
		o.url = p.scheme + "://" + ln.Addr().String()
		return o
	}
	srv := httptest.NewUnstartedServer(h.gw)
	srv.Config.MaxHeaderBytes = maxHeader
	srv.Config.ErrorLog = quiet
	protos := protocolsOf((*http.Protocols).SetHTTP1)
	if p.tls {
		protos.SetHTTP2(true)
	}
	if p.h2c {
		protos.SetUnencryptedHTTP2(true)
	}
	srv.Config.Protocols = protos
	if p.framed {
		srv.Listener = h.gw.Listener(srv.Config, srv.Listener)
	}
	if p.tls {
		srv.EnableHTTP2 = true
		srv.TLS = tlsConfig
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	o.url = srv.URL
	return o
}

// eachProtocol runs test once per client protocol, each with a gateway of
// its own for yaml in front of up.
func eachProtocol(t *testing.T, yaml string, up *backend, test func(t *testing.T, o *overProtocol)) {
	for _, p := range clientProtocols {
		t.Run(p.name, func(t *testing.T) {
			test(t, serveOver(t, newHarness(t, yaml, up), p))
		})
	}
}

func (o *overProtocol) request(method, path string, hdr map[string]string, body io.Reader) *http.Request {
	o.t.Helper()
	req, err := http.NewRequest(method, o.url+path, body)
	if err != nil {
		o.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return req
}

func (o *overProtocol) do(method, path string, hdr map[string]string, body io.Reader) *http.Response {
	o.t.Helper()
	return o.send(o.request(method, path, hdr, body))
}

// send sends req and checks that it went over the protocol under test.
func (o *overProtocol) send(req *http.Request) *http.Response {
	o.t.Helper()
	resp, err := o.client.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	if resp.Proto != o.p.proto {
		o.t.Fatalf("the answer came over %s, want %s", resp.Proto, o.p.proto)
	}
	return resp
}

// hostPort is the gateway's address, as the client names it in Host.
func (o *overProtocol) hostPort() string { return strings.TrimPrefix(o.url, o.p.scheme+"://") }

// withoutID is an answer's body with its request id taken out, for
// comparing answers across protocols.
func withoutID(body, rid string) string {
	if rid == "" {
		return body
	}
	return strings.ReplaceAll(body, rid, "RID")
}

// A limit's rejection is the same answer, to the byte but for its request
// id, with the same rate-limit fields, whichever protocol the client
// speaks; and it counts in the same metrics.
func TestProtocolsRateLimitAnswers(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	const path = "/api/activities/lucky-meal/receive"
	user := map[string]string{"X-User-Id": "42"}
	bodies := map[string]string{}
	fields := []string{"Content-Type", "Content-Length", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining"}
	heads := map[string]string{}
	for _, p := range clientProtocols {
		t.Run(p.name, func(t *testing.T) {
			o := serveOver(t, newHarness(t, flashSale, up), p)
			resp := o.do("POST", path, user, nil)
			if drain(resp); resp.StatusCode != 200 {
				t.Fatalf("first request: %d", resp.StatusCode)
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != `"user";q=1;w=10` {
				t.Errorf("RateLimit-Policy %q", got)
			}
			if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"user";r=0;t=`) {
				t.Errorf("RateLimit %q", got)
			}
			resp = o.do("POST", path, user, nil)
			rid := resp.Header.Get("X-Request-Id")
			body := drain(resp)
			if resp.StatusCode != 429 || rid == "" || !strings.Contains(body, `"code":"repeat_apply"`) {
				t.Fatalf("second request: %d %q, id %q", resp.StatusCode, body, rid)
			}
			bodies[p.name] = withoutID(body, rid)
			var head []string
			for _, f := range fields {
				head = append(head, f+": "+strings.Join(resp.Header[f], ","))
			}
			if ra := resp.Header.Get("Retry-After"); ra == "" {
				t.Errorf("no Retry-After: %v", resp.Header)
			}
			heads[p.name] = strings.Join(head, "\n")
			if n := counterValue(t, o.harness, "gateway_rate_limited_total", map[string]string{"route": "lucky-meal", "limit": "user"}); n != 1 {
				t.Errorf("gateway_rate_limited_total = %v, want 1", n)
			}
			if n := counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"route": "lucky-meal", "code": "429"}); n != 1 {
				t.Errorf("gateway_http_requests_total{code=429} = %v, want 1", n)
			}
			if n := counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"route": "lucky-meal", "code": "200"}); n != 1 {
				t.Errorf("gateway_http_requests_total{code=200} = %v, want 1", n)
			}
		})
	}
	for _, p := range clientProtocols[1:] {
		if bodies[p.name] != bodies["http1"] {
			t.Errorf("%s: the 429's body is\n%s\nover http1:\n%s", p.name, bodies[p.name], bodies["http1"])
		}
		if heads[p.name] != heads["http1"] {
			t.Errorf("%s: the 429's fields are\n%s\nover http1:\n%s", p.name, heads[p.name], heads["http1"])
		}
	}
}

// What the upstream receives of an admitted request: the gateway's
// X-Forwarded-* fields (https for a request that came over TLS), the
// request id, its own Host, an HTTP/1.1 request line, no
// hop-by-hop fields; TE: trailers goes on.
func TestProtocolsUpstreamRequest(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	eachProtocol(t, basic, up, func(t *testing.T, o *overProtocol) {
		resp := o.do("GET", "/api//v1/./list?q=1", map[string]string{
			"X-Forwarded-For": "6.6.6.6",
			"X-Request-Id":    "abc-123",
			"Forwarded":       "for=6.6.6.6",
			"Te":              "trailers",
			"X-End":           "kept",
			"Cookie":          "a=1; b=2",
		}, nil)
		if body := drain(resp); resp.StatusCode != 200 || body != "ok /api/v1/list?q=1" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if id := resp.Header.Get("X-Request-Id"); id != "abc-123" {
			t.Errorf("the client got request id %q", id)
		}
		got := up.lastRequest()
		if got.Proto != "HTTP/1.1" {
			t.Errorf("the upstream got %s", got.Proto)
		}
		want := map[string]string{
			"X-Forwarded-For":   "127.0.0.1",
			"X-Forwarded-Proto": o.p.scheme,
			"X-Forwarded-Host":  o.hostPort(),
			"X-Request-Id":      "abc-123",
			"Te":                "trailers",
			"X-End":             "kept",
			// One field, as HTTP/1.1 wants it, from the fields an
			// HTTP/2 client may split it into (RFC 9113 §8.2.3).
			"Cookie":     "a=1; b=2",
			"Forwarded":  "",
			"Connection": "",
		}
		for k, v := range want {
			if g := strings.Join(got.Header[k], ","); g != v {
				t.Errorf("the upstream got %s %q, want %q", k, g, v)
			}
		}
		if target := strings.TrimPrefix(up.URL, "http://"); got.Host != target {
			t.Errorf("the upstream got Host %q, want its own %q", got.Host, target)
		}
	})
}

// Each kind of key part reads the same over every protocol: a second
// request with the same key is limited, one with another is not, and a
// request without its key is refused.
func TestProtocolsKeys(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	const cfg = `
admin: {listen: ""}
routes:
  - id: header
    match: {path: /header}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: ["header:X-User-Id"], rate: 1/h}]
  - id: query
    match: {path: /query}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: ["query:uid"], rate: 1/h}]
  - id: cookie
    match: {path: /cookie}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: ["cookie:sid"], rate: 1/h}]
  - id: path
    match: {path: /path/**}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [path, method], rate: 1/h}]
  - id: host
    match: {path: /host}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [host, ip], rate: 1/h}]
`
	eachProtocol(t, cfg, up, func(t *testing.T, o *overProtocol) {
		for _, tc := range []struct {
			name          string
			first, second func() *http.Response // the same key, then another
		}{
			{"header",
				func() *http.Response { return o.do("GET", "/header", map[string]string{"X-User-Id": "a"}, nil) },
				func() *http.Response { return o.do("GET", "/header", map[string]string{"X-User-Id": "b"}, nil) }},
			{"query",
				func() *http.Response { return o.do("GET", "/query?uid=a", nil, nil) },
				func() *http.Response { return o.do("GET", "/query?uid=b", nil, nil) }},
			{"cookie",
				func() *http.Response { return o.do("GET", "/cookie", map[string]string{"Cookie": "x=1; sid=a"}, nil) },
				func() *http.Response { return o.do("GET", "/cookie", map[string]string{"Cookie": "sid=b; x=1"}, nil) }},
			{"path and method",
				func() *http.Response { return o.do("GET", "/path/a", nil, nil) },
				func() *http.Response { return o.do("POST", "/path/a", nil, nil) }},
			{"host",
				func() *http.Response { return o.do("GET", "/host", map[string]string{"Host": "A.example:1"}, nil) },
				func() *http.Response { return o.do("GET", "/host", map[string]string{"Host": "b.example"}, nil) }},
		} {
			if resp := tc.first(); drain(resp) == "" || resp.StatusCode != 200 {
				t.Fatalf("%s: first request %d", tc.name, resp.StatusCode)
			}
			answerOf(t, tc.first(), 429, "rate_limited")
			if resp := tc.second(); drain(resp) == "" || resp.StatusCode != 200 {
				t.Errorf("%s: another key %d, want 200", tc.name, resp.StatusCode)
			}
		}
		// The host key ignores case and port: A.example:1 is a.example.
		answerOf(t, o.do("GET", "/host", map[string]string{"Host": "a.example"}, nil), 429, "rate_limited")
		answerOf(t, o.do("GET", "/header", nil, nil), 403, "key_required")
		answerOf(t, o.do("GET", "/query?other=1", nil, nil), 403, "key_required")
		answerOf(t, o.do("GET", "/nowhere", nil, nil), 404, "route_not_found")
		answerOf(t, o.do("GET", "/path/a%2Fb", nil, nil), 400, "bad_request")
	})
}

// An open breaker's 503 is the same over every protocol.
func TestProtocolsBreakerOpen(t *testing.T) {
	t.Parallel()
	for _, p := range clientProtocols {
		t.Run(p.name, func(t *testing.T) {
			up := newFlaky(t)
			o := serveOver(t, newHarness(t, strings.Replace(breakerConfig, "timeout: 300ms", "timeout: 10s", 1), up.backend), p)
			up.mode.Store("fail")
			user := map[string]string{"X-User-Id": "u1"}
			for i := range 10 {
				if resp := o.do("GET", "/coupon", user, nil); drain(resp) != "" || resp.StatusCode != 500 {
					t.Fatalf("call %d: %d, want the upstream's 500", i, resp.StatusCode)
				}
			}
			hits := up.hits.Load()
			m := answerOf(t, o.do("GET", "/coupon", user, nil), 503, "coupon_busy")
			if m["message"] != "The coupon system is busy; your entry is recorded" || up.hits.Load() != hits {
				t.Errorf("message %v; hits %d→%d", m["message"], hits, up.hits.Load())
			}
			if n := counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"route": "coupon", "code": "503"}); n != 1 {
				t.Errorf("gateway_http_requests_total{code=503} = %v, want 1", n)
			}
		})
	}
}

// echoBody answers with what it read of the body and how it was framed.
func echoBody(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(599)
		return
	}
	sum := sha256.Sum256(b)
	fmt.Fprintf(w, "%s %d cl=%d te=%s sum=%x", r.Method, len(b), r.ContentLength, strings.Join(r.TransferEncoding, ","), sum[:4])
	if r.URL.Path == "/api/trailer" {
		fmt.Fprintf(w, " trailer=%s", r.Trailer.Get("X-Sum"))
	}
}

// A request body reaches the HTTP/1.1 upstream whole, with its length
// when the client said it and chunked when it did not (on HTTP/2 a body
// may come without a Content-Length), small or large.
func TestProtocolsRequestBodies(t *testing.T) {
	t.Parallel()
	up := newBackend(t, echoBody)
	eachProtocol(t, basic, up, func(t *testing.T, o *overProtocol) {
		for _, size := range []int{1, 100, h1.MaxInlineBody + 1, 1 << 20} {
			data := strings.Repeat("abcdefghijklmnopqrstuvwxyz", size/26+1)[:size]
			sum := sha256.Sum256([]byte(data))
			for _, known := range []bool{true, false} {
				var body io.Reader = strings.NewReader(data)
				wantCL, wantTE := strconv.Itoa(size), ""
				if !known {
					body = io.MultiReader(body) // hides the length from the client
					wantCL, wantTE = "-1", "chunked"
				}
				req := o.request("PUT", "/api/x", nil, body)
				resp := o.send(req)
				got := drain(resp)
				want := fmt.Sprintf("PUT %d cl=%s te=%s sum=%x", size, wantCL, wantTE, sum[:4])
				if resp.StatusCode != 200 || got != want {
					t.Errorf("%d bytes, length known %v: %d %q, want %q", size, known, resp.StatusCode, got, want)
				}
			}
		}
		// A GET may carry a body too.
		if got := drain(o.do("GET", "/api/x", nil, strings.NewReader("hello"))); !strings.HasPrefix(got, "GET 5 cl=5") {
			t.Errorf("GET with a body: %q", got)
		}
		// A body's trailers follow it to the upstream.
		req := o.request("POST", "/api/trailer", nil, io.MultiReader(strings.NewReader("hello")))
		req.Trailer = http.Header{"X-Sum": {"abc"}}
		if got := drain(o.send(req)); !strings.HasPrefix(got, "POST 5 cl=-1 te=chunked") || !strings.HasSuffix(got, " trailer=abc") {
			t.Errorf("a body with a trailer: %q", got)
		}
	})
}

// max_body_bytes answers 413 for a body too long, said so or not;
// body_timeout 408 for a client that falls silent mid-body.
func TestProtocolsBodyLimits(t *testing.T) {
	t.Parallel()
	up := newBackend(t, echoBody)
	eachProtocol(t, "server: {max_body_bytes: 10, body_timeout: 250ms}\n"+basic, up, func(t *testing.T, o *overProtocol) {
		answerOf(t, o.do("POST", "/api/x", nil, strings.NewReader(strings.Repeat("x", 11))), 413, "body_too_large")
		if resp := o.do("POST", "/api/x", nil, strings.NewReader("0123456789")); drain(resp) == "" || resp.StatusCode != 200 {
			t.Fatalf("a body of exactly the limit: %d", resp.StatusCode)
		}
		resp := o.do("POST", "/api/x", nil, io.MultiReader(strings.NewReader(strings.Repeat("x", 100))))
		answerOf(t, resp, 413, "body_too_large")
		o.checkConnAfter(t, "a body found too long", resp)
		pr, pw := io.Pipe()
		defer pw.Close()
		go pw.Write([]byte("abc"))
		resp = o.do("POST", "/api/x", nil, pr)
		answerOf(t, resp, 408, "request_timeout")
		o.checkConnAfter(t, "a body that fell silent", resp)
	})
}

// checkConnAfter checks that an answer to a request whose body failed
// closed an HTTP/1 connection, where the next request's start is in
// doubt, and left an HTTP/2 connection serving its other streams: the
// next request goes over it.
func (o *overProtocol) checkConnAfter(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	if h2 := o.p.h2(); resp.Close == h2 || resp.Header["Connection"] != nil && h2 {
		t.Errorf("after %s: Close %v, Connection %q", what, resp.Close, resp.Header["Connection"])
	}
	var reused bool
	req := o.request("GET", "/api/x", nil, nil)
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused },
	}))
	if resp := o.send(req); drain(resp) == "" || resp.StatusCode != 200 {
		t.Fatalf("after %s: %d", what, resp.StatusCode)
	}
	if reused != o.p.h2() {
		t.Errorf("after %s, the next request reused the connection: %v", what, reused)
	}
}

// Answers come through as the upstream sent them: streamed as they come,
// with trailers, to HEAD without a body but with the length, 204 and 304
// without a body; and a large header passes whole both ways.
func TestProtocolsAnswers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{}, 1)
	big := strings.Repeat("v", 32<<10)
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/api/events":
			h.Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			<-release
			io.WriteString(w, "data: second\n\n")
		case "/api/trailers":
			h.Set("Trailer", "X-Checksum")
			io.WriteString(w, "body")
			w.(http.Flusher).Flush()
			h.Set("X-Checksum", "sum-1")
		case "/api/head":
			h.Set("Content-Length", "1234")
			h.Set("Content-Type", "application/octet-stream")
			if r.Method != "HEAD" {
				w.Write(make([]byte, 1234))
			}
		case "/api/204":
			w.WriteHeader(204)
		case "/api/304":
			h.Set("ETag", `"v1"`)
			w.WriteHeader(304)
		case "/api/big":
			h.Set("X-Big", r.Header.Get("X-Big"))
			io.WriteString(w, "ok")
		}
	})
	eachProtocol(t, basic, up, func(t *testing.T, o *overProtocol) {
		resp := o.do("GET", "/api/events", nil, nil)
		buf := make([]byte, 64)
		n, err := resp.Body.Read(buf)
		if err != nil || string(buf[:n]) != "data: first\n\n" {
			t.Fatalf("first event: %q %v: the body was buffered, not streamed", buf[:n], err)
		}
		release <- struct{}{}
		if rest := drain(resp); rest != "data: second\n\n" {
			t.Fatalf("rest %q", rest)
		}

		resp = o.do("GET", "/api/trailers", map[string]string{"TE": "trailers"}, nil)
		if body := drain(resp); body != "body" || resp.Trailer.Get("X-Checksum") != "sum-1" {
			t.Errorf("trailers: body %q, trailer %v", body, resp.Trailer)
		}

		resp = o.do("HEAD", "/api/head", nil, nil)
		if body := drain(resp); resp.StatusCode != 200 || body != "" || resp.ContentLength != 1234 {
			t.Errorf("HEAD: %d, %q, length %d", resp.StatusCode, body, resp.ContentLength)
		}
		resp = o.do("GET", "/api/204", nil, nil)
		if body := drain(resp); resp.StatusCode != 204 || body != "" || resp.Header.Get("Content-Type") != "" {
			t.Errorf("204: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		resp = o.do("GET", "/api/304", map[string]string{"If-None-Match": `"v1"`}, nil)
		if body := drain(resp); resp.StatusCode != 304 || body != "" || resp.Header.Get("Etag") != `"v1"` {
			t.Errorf("304: %d %q %v", resp.StatusCode, body, resp.Header)
		}

		resp = o.do("GET", "/api/big", map[string]string{"X-Big": big}, nil)
		if body := drain(resp); resp.StatusCode != 200 || body != "ok" || resp.Header.Get("X-Big") != big {
			t.Errorf("a 32 KiB header: %d %q, %d bytes back", resp.StatusCode, body, len(resp.Header.Get("X-Big")))
		}
	})
}

// An upstream's 103 Early Hints reach the client before the answer; a
// client that sends its body with Expect: 100-continue gets the 100 when
// the gateway reads the body, and the answer.
func TestProtocolsInterimAnswers(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/api/hints" {
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
		}
		fmt.Fprintf(w, "got %d", len(b))
	})
	eachProtocol(t, basic, up, func(t *testing.T, o *overProtocol) {
		// Without a body, on the gateway's own upstream client; with one
		// of unknown length, on http.Transport's, whose reading goroutine
		// relays them.
		for _, body := range []io.Reader{nil, io.MultiReader(strings.NewReader("hi"))} {
			var hints []string
			req := o.request("POST", "/api/hints", nil, body)
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h nettextproto.MIMEHeader) error {
					hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
					return nil
				},
			}))
			resp := o.send(req)
			if got := drain(resp); !strings.HasPrefix(got, "got ") || resp.Header.Get("Link") != "" {
				t.Errorf("after the hints: %q, %v", got, resp.Header)
			}
			if got := strings.Join(hints, "; "); got != "103 </a.css>; rel=preload" {
				t.Errorf("informational answers %q", got)
			}
		}

		for _, size := range []int{5, h1.MaxInlineBody + 1} {
			var continued bool
			req := o.request("POST", "/api/x", map[string]string{"Expect": "100-continue"}, strings.NewReader(strings.Repeat("x", size)))
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got100Continue: func() { continued = true },
			}))
			resp := o.send(req)
			if body := drain(resp); resp.StatusCode != 200 || body != fmt.Sprintf("got %d", size) || !continued {
				t.Errorf("Expect: 100-continue, %d bytes: %d %q, continued %v", size, resp.StatusCode, body, continued)
			}
		}
	})
}

// CONNECT asks for a tunnel, which the gateway does not make: 400, over
// every protocol, and nothing reaches the upstream, even on a route that
// takes every path and method.
func TestProtocolsConnectRefused(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	const cfg = `
admin: {listen: ""}
routes:
  - id: all
    match: {path: /**}
    upstream: {targets: ["{{UP}}"]}
`
	eachProtocol(t, cfg, up, func(t *testing.T, o *overProtocol) {
		req := o.request("CONNECT", "", nil, nil)
		req.Host = "example.com:443"
		answerOf(t, o.send(req), 400, "bad_request")
		if n := up.hits.Load(); n != 0 {
			t.Errorf("%d CONNECT requests reached the upstream", n)
		}
		if n := counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"code": "400"}); n != 1 {
			t.Errorf("gateway_http_requests_total{code=400} = %v, want 1", n)
		}
	})
}

// The access log says which protocol the client spoke.
func TestProtocolsAccessLog(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	for _, p := range clientProtocols {
		t.Run(p.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "access.log")
			o := serveOver(t, newHarness(t, "server: {access_log: "+file+"}\n"+basic, up), p)
			drain(o.do("GET", "/api/x", nil, nil))
			drain(o.do("GET", "/nowhere", nil, nil))
			for i, l := range readAccess(t, file, 2) {
				if l.Protocol != p.proto || l.Method != "GET" || l.Status != []int{200, 404}[i] {
					t.Errorf("line %d: %+v, want protocol %s", i+1, l, p.proto)
				}
			}
		})
	}
}

// An answer whose upstream falls silent mid-body (upstream.idle_timeout)
// is cut, and the client sees it cut, not ended: on HTTP/1 by the
// connection closing, on HTTP/2 by the stream's reset.
func TestProtocolsBodyCut(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	const cfg = `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"], idle_timeout: 100ms}
`
	eachProtocol(t, cfg, up, func(t *testing.T, o *overProtocol) {
		resp := o.do("GET", "/api/x", nil, nil)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || string(body) != "partial" {
			t.Fatalf("a body that fell silent: %q, %v; the client must see it cut", body, err)
		}
		// The next request is answered, over a new connection or the same.
		if resp := o.do("GET", "/api/x", nil, nil); resp.StatusCode != 200 {
			t.Errorf("after the cut: %d", resp.StatusCode)
		} else {
			resp.Body.Close()
		}
	})
}

// A client that gives up before the answer (an HTTP/2 client resets its
// stream) is counted as 499, and the upstream's request is cancelled.
func TestProtocolsClientGone(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
		cancelled <- struct{}{}
	})
	eachProtocol(t, basic, up, func(t *testing.T, o *overProtocol) {
		ctx, cancel := context.WithCancel(context.Background())
		req := o.request("GET", "/api/x", nil, nil).WithContext(ctx)
		done := make(chan error, 1)
		go func() {
			resp, err := o.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		<-arrived
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the request went on after its context ended")
		}
		<-cancelled
		deadline := time.Now().Add(5 * time.Second)
		for counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"route": "api", "code": "499"}) != 1 {
			if time.Now().After(deadline) {
				t.Fatal("no 499 counted")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// A head over server.max_header_bytes: on HTTP/1.1 through the gateway's
// Listener, the gateway's 431; on HTTP/2 the client, told the bound by
// the server's SETTINGS, does not send it (what the server answers a
// client that does is TestH2ForbiddenRequests').
func TestProtocolsHeadTooLarge(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	eachProtocol(t, "server: {max_header_bytes: 4096}\n"+basic, up, func(t *testing.T, o *overProtocol) {
		if resp := o.do("GET", "/api/x", map[string]string{"X-Big": strings.Repeat("b", 3000)}, nil); drain(resp) == "" || resp.StatusCode != 200 {
			t.Fatalf("a head under the bound: %d", resp.StatusCode)
		}
		req := o.request("GET", "/api/x", map[string]string{"X-Big": strings.Repeat("b", 10000)}, nil)
		resp, err := o.client.Do(req)
		switch {
		case o.p.h2():
			if err == nil {
				resp.Body.Close()
				t.Errorf("the client sent a head over the bound the server advertised: %d", resp.StatusCode)
			}
		case o.p.framed || o.p.edge:
			if err != nil {
				t.Fatal(err)
			}
			answerOf(t, resp, 431, "headers_too_large")
		default:
			// Without the gateway's Listener, net/http's own bound
			// decides, which over TLS let a 10 KB head through to a
			// server whose MaxHeaderBytes is 4096: floodgate serve puts
			// the Listener in front of HTTP/1.1 over TLS too.
			if err == nil {
				resp.Body.Close()
			}
			up.hits.Store(0)
			return
		}
		if n := up.hits.Load(); n != 1 {
			t.Errorf("the upstream got %d requests, want 1", n)
		}
		up.hits.Store(0)
	})
}

// An answer that comes before the request's body is read — a limit's
// 429, or an upstream that answers without reading — reaches the client
// whole while its large body is still on its way, and the connection (or
// on HTTP/2, its other streams) serves on.
func TestProtocolsAnswerBeforeTheBody(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "no")
	})
	const cfg = `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: user, key: ["header:X-User-Id"], rate: 1/h}]
`
	eachProtocol(t, cfg, up, func(t *testing.T, o *overProtocol) {
		big := strings.Repeat("x", 4<<20)
		user := map[string]string{"X-User-Id": "u"}
		for i, body := range []func() io.Reader{
			func() io.Reader { return strings.NewReader(big) },
			func() io.Reader { return io.MultiReader(strings.NewReader(big)) },
		} {
			resp := o.do("POST", "/api/x", user, body())
			if got := drain(resp); resp.StatusCode != 401 || got != "no" {
				t.Errorf("body %d: the upstream's early answer came as %d %q", i, resp.StatusCode, got)
			}
			user["X-User-Id"] += "u"
		}
		drain(o.do("POST", "/api/x", map[string]string{"X-User-Id": "v"}, nil))
		answerOf(t, o.do("POST", "/api/x", map[string]string{"X-User-Id": "v"}, strings.NewReader(big)), 429, "rate_limited")
		if resp := o.do("GET", "/api/x", map[string]string{"X-User-Id": "w"}, nil); drain(resp) != "no" {
			t.Errorf("after them: %d", resp.StatusCode)
		}
		// Nothing of the bodies was read as a request: the gateway's
		// Listener would have answered it (a head too large, malformed)
		// and counted it on no route.
		if n := counterValue(t, o.harness, "gateway_http_requests_total", map[string]string{"route": ""}); n != 0 {
			t.Errorf("%v answers to requests no route took: the rest of a body was read as requests", n)
		}
	})
}
