package gateway

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// tlsUpstream is an https target: what it saw of the last request's TLS.
type tlsUpstream struct {
	*httptest.Server
	mu        sync.Mutex
	proto     string // the last request's
	sni       string
	clientCN  string // of the certificate the gateway presented; "" none
	healthHit int
}

// newTLSUpstream serves pair over TLS (and HTTP/2 if h2), asking for a
// client certificate signed by clientCA when it is not nil.
func newTLSUpstream(t *testing.T, pair testcerts.Pair, h2 bool, clientCA *testcerts.CA) *tlsUpstream {
	u := &tlsUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		defer u.mu.Unlock()
		if r.URL.Path == "/healthz" {
			u.healthHit++
			return
		}
		u.proto, u.sni, u.clientCN = r.Proto, r.TLS.ServerName, ""
		if len(r.TLS.PeerCertificates) > 0 {
			u.clientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		io.WriteString(w, "ok")
	}))
	u.TLS = &tls.Config{Certificates: []tls.Certificate{pair.TLS(t)}}
	if clientCA != nil {
		u.TLS.ClientAuth = tls.RequireAndVerifyClientCert
		u.TLS.ClientCAs = clientCA.Pool()
	}
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused
	u.EnableHTTP2 = h2
	u.StartTLS()
	t.Cleanup(u.Close)
	return u
}

func (u *tlsUpstream) seen() (proto, sni, clientCN string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.proto, u.sni, u.clientCN
}

func (u *tlsUpstream) healthHits() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.healthHit
}

// tlsRoute is a route to up over protocol proto, with the upstream.tls
// block tlsBlock (flow YAML; "" none).
func tlsRoute(up, proto, tlsBlock string) string {
	y := "admin: {listen: \"\"}\nroutes:\n  - id: r\n    match: {path: /**}\n    upstream:\n      targets: [\"" + up + "\"]\n      protocol: " + proto + "\n"
	if tlsBlock != "" {
		y += "      tls: " + tlsBlock + "\n"
	}
	return y
}

var tlsProtocols = []struct{ proto, wire string }{{"http1", "HTTP/1.1"}, {"h2", "HTTP/2.0"}}

// A target whose certificate a private CA signed fails the exchange (502,
// and a log line that says why) until upstream.tls.ca names that CA.
func TestUpstreamTLSPrivateCA(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "private CA")
	caFile := testcerts.Write(t, t.TempDir(), "ca.pem", ca.PEM)
	for _, p := range tlsProtocols {
		t.Run(p.proto, func(t *testing.T) {
			up := newTLSUpstream(t, ca.Server(t, "upstream"), p.proto == "h2", nil)

			h := newHarness(t, tlsRoute(up.URL, p.proto, ""), nil)
			answerOf(t, h.do("GET", "/x", nil, nil), 502, "upstream_unavailable")
			pollLog(t, h, `"msg":"upstream failed"`, "certificate signed by unknown authority", `"kind":"tls"`)
			if proto, _, _ := up.seen(); proto != "" {
				t.Errorf("the target got a %s request over a certificate that was not verified", proto)
			}

			h = newHarness(t, tlsRoute(up.URL, p.proto, `{ca: "`+caFile+`"}`), nil)
			resp := h.do("GET", "/x", nil, nil)
			if body := drain(resp); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("with ca: %d %q, want 200 ok; log:\n%s", resp.StatusCode, body, h.log)
			}
			if proto, sni, _ := up.seen(); proto != p.wire || sni != "" {
				t.Errorf("the target got %s with SNI %q, want %s and no SNI for an IP", proto, sni, p.wire)
			}
		})
	}
}

// server_name is what an IP target's certificate is verified for, and the
// SNI sent.
func TestUpstreamTLSServerName(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "private CA")
	caFile := testcerts.Write(t, t.TempDir(), "ca.pem", ca.PEM)
	for _, p := range tlsProtocols {
		t.Run(p.proto, func(t *testing.T) {
			// For a name alone: not for 127.0.0.1, the target's host.
			up := newTLSUpstream(t, ca.ServerFor(t, "upstream", "api.internal"), p.proto == "h2", nil)

			h := newHarness(t, tlsRoute(up.URL, p.proto, `{ca: "`+caFile+`"}`), nil)
			answerOf(t, h.do("GET", "/x", nil, nil), 502, "upstream_unavailable")
			pollLog(t, h, `"msg":"upstream failed"`, "127.0.0.1", "certificate", `"kind":"tls"`)

			h = newHarness(t, tlsRoute(up.URL, p.proto, `{ca: "`+caFile+`", server_name: api.internal}`), nil)
			resp := h.do("GET", "/x", nil, nil)
			if body := drain(resp); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("with server_name: %d %q, want 200 ok; log:\n%s", resp.StatusCode, body, h.log)
			}
			if proto, sni, _ := up.seen(); proto != p.wire || sni != "api.internal" {
				t.Errorf("the target got %s with SNI %q, want %s and SNI api.internal", proto, sni, p.wire)
			}
		})
	}
}

// A target that requires a client certificate gets upstream.tls.cert,
// and refuses the gateway without one.
func TestUpstreamTLSClientCert(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "private CA")
	clients := testcerts.NewCA(t, "clients CA")
	dir := t.TempDir()
	caFile := testcerts.Write(t, dir, "ca.pem", ca.PEM)
	pair := clients.Client(t, "gateway")
	certFile := testcerts.Write(t, dir, "gw.crt", pair.CertPEM)
	keyFile := testcerts.Write(t, dir, "gw.key", pair.KeyPEM)
	for _, p := range tlsProtocols {
		t.Run(p.proto, func(t *testing.T) {
			up := newTLSUpstream(t, ca.Server(t, "upstream"), p.proto == "h2", clients)

			h := newHarness(t, tlsRoute(up.URL, p.proto, `{ca: "`+caFile+`"}`), nil)
			answerOf(t, h.do("GET", "/x", nil, nil), 502, "upstream_unavailable")
			if p.proto == "http1" {
				// Over HTTP/2 the Transport fails the request with an
				// error of its own ("client conn could not be
				// established"): TLS 1.3 delivers the target's refusal
				// after the handshake, to its reads.
				pollLog(t, h, `"msg":"upstream failed"`, "remote error: tls: certificate required", `"kind":"tls"`)
			}
			if proto, _, _ := up.seen(); proto != "" {
				t.Errorf("the target answered a %s request without a client certificate", proto)
			}

			h = newHarness(t, tlsRoute(up.URL, p.proto, `{ca: "`+caFile+`", cert: "`+certFile+`", key: "`+keyFile+`"}`), nil)
			resp := h.do("GET", "/x", nil, nil)
			if body := drain(resp); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("with cert: %d %q, want 200 ok; log:\n%s", resp.StatusCode, body, h.log)
			}
			if proto, _, cn := up.seen(); proto != p.wire || cn != "gateway" {
				t.Errorf("the target got %s with client certificate %q, want %s and gateway", proto, cn, p.wire)
			}
		})
	}
}

// The files are read again on reload: a renewed client certificate is
// the one presented after it, under the same paths.
func TestUpstreamTLSReloadReadsFiles(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "private CA")
	dir := t.TempDir()
	caFile := testcerts.Write(t, dir, "ca.pem", ca.PEM)
	first := ca.Client(t, "gateway-1")
	certFile := testcerts.Write(t, dir, "gw.crt", first.CertPEM)
	keyFile := testcerts.Write(t, dir, "gw.key", first.KeyPEM)
	for _, p := range tlsProtocols {
		t.Run(p.proto, func(t *testing.T) {
			testcerts.Write(t, dir, "gw.crt", first.CertPEM)
			testcerts.Write(t, dir, "gw.key", first.KeyPEM)
			up := newTLSUpstream(t, ca.Server(t, "upstream"), p.proto == "h2", ca)
			yaml := tlsRoute(up.URL, p.proto, `{ca: "`+caFile+`", cert: "`+certFile+`", key: "`+keyFile+`"}`)
			h := newHarness(t, yaml, nil)
			get := func() string {
				t.Helper()
				resp := h.do("GET", "/x", nil, nil)
				if body := drain(resp); resp.StatusCode != 200 {
					t.Fatalf("%d %q; log:\n%s", resp.StatusCode, body, h.log)
				}
				_, _, cn := up.seen()
				return cn
			}
			if cn := get(); cn != "gateway-1" {
				t.Fatalf("client certificate %q, want gateway-1", cn)
			}
			second := ca.Client(t, "gateway-2")
			testcerts.Write(t, dir, "gw.crt", second.CertPEM)
			testcerts.Write(t, dir, "gw.key", second.KeyPEM)
			if err := h.gw.Reload(mustParse(t, yaml)); err != nil {
				t.Fatal(err)
			}
			if cn := get(); cn != "gateway-2" {
				t.Errorf("client certificate %q after the reload, want gateway-2", cn)
			}
		})
	}
}

// Active health checks speak the route's TLS: a private CA's target
// passes them with ca.
func TestUpstreamTLSHealthChecks(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "private CA")
	clients := testcerts.NewCA(t, "clients CA")
	dir := t.TempDir()
	caFile := testcerts.Write(t, dir, "ca.pem", ca.PEM)
	pair := clients.Client(t, "gateway")
	certFile := testcerts.Write(t, dir, "gw.crt", pair.CertPEM)
	keyFile := testcerts.Write(t, dir, "gw.key", pair.KeyPEM)
	for _, p := range tlsProtocols {
		t.Run(p.proto, func(t *testing.T) {
			up := newTLSUpstream(t, ca.ServerFor(t, "upstream", "api.internal"), p.proto == "h2", clients)
			yaml := tlsRoute(up.URL, p.proto, `{ca: "`+caFile+`", server_name: api.internal, cert: "`+certFile+`", key: "`+keyFile+`"}`) +
				// The checks' bounds are a mutual-TLS handshake's, under
				// -race, on cores that other tests keep busy: a timeout of
				// 250 ms was too short for one now and then.
				"      health: {path: /healthz, interval: 1s, timeout: 900ms, healthy_after: 1, unhealthy_after: 3}\n"
			h := newHarness(t, yaml, nil)
			waitFor(t, "two passed checks", func() bool { return up.healthHits() >= 2 })
			target := strings.TrimPrefix(up.URL, "https://")
			if st := targetStatus(t, h.gw, "r", "https://"+target); st.State != upstream.StateHealthy {
				t.Errorf("target %+v, want healthy; log:\n%s", st, h.log)
			}
		})
	}
}
