package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// A edgeFixture is a fixture with a TLS listener and the files of its
// certificates.
type edgeFixture struct {
	*fixture
	listenTLS string
	ca        *testcerts.CA
	roots     *x509.CertPool
}

func newEdgeFixture(t *testing.T, handler http.Handler) *edgeFixture {
	t.Helper()
	ca := testcerts.NewCA(t, "test CA")
	return &edgeFixture{fixture: newFixture(t, handler), listenTLS: freeAddr(t), ca: ca, roots: ca.Pool()}
}

// file writes data to a file of the config's directory, by a rename, and
// returns its path.
func (f *edgeFixture) file(name string, data []byte) string {
	return testcerts.Write(f.t, f.dir, name, data)
}

// write writes the config, with {{LISTEN_TLS}} expanded besides what
// fixture.write expands.
func (f *edgeFixture) write(text string) {
	f.fixture.write(strings.ReplaceAll(text, "{{LISTEN_TLS}}", f.listenTLS))
}

// serverCN dials the TLS listener asking for name by SNI and returns the
// common name of the certificate it presents.
func (f *edgeFixture) serverCN(name string) string {
	f.t.Helper()
	c, err := tls.Dial("tcp", f.listenTLS, &tls.Config{ServerName: name, InsecureSkipVerify: true})
	if err != nil {
		f.t.Fatalf("dialing %s for %q: %v", f.listenTLS, name, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// tlsRoutes is a route whose requests count by X-User-Id, one per 10s from
// a user's first (as baseConfig's), and that echoes to the client what the
// upstream saw.
const tlsRoutes = `
admin:
  listen: "{{ADMIN}}"
  token: {{TOKEN}}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - name: user
        key: [header:X-User-Id]
        rate: 1/10s
        align: first
`

// The certificate served is the one whose names match the client's SNI,
// wildcards included; an unknown name, and none, get the first.
func TestServeTLSCertificateBySNI(t *testing.T) {
	t.Parallel()
	f := newEdgeFixture(t, nil)
	a := f.ca.ServerFor(t, "a", "a.example")
	b := f.ca.ServerFor(t, "b", "b.example")
	w := f.ca.ServerFor(t, "w", "*.w.example")
	f.write(fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  tls:
    certs:
      - {cert: %q, key: %q}
      - {cert: %q, key: %q}
      - {cert: %q, key: %q}
`, f.file("a.crt", a.CertPEM), f.file("a.key", a.KeyPEM), f.file("b.crt", b.CertPEM), f.file("b.key", b.KeyPEM),
		f.file("w.crt", w.CertPEM), f.file("w.key", w.KeyPEM)) + tlsRoutes)
	p := f.serve()
	line := p.waitLog(`"msg":"floodgate serving"[^\n]*`)
	if !strings.Contains(line, `"listen_tls":"`+f.listenTLS+`"`) {
		t.Errorf("serving line %s does not name listen_tls %s", line, f.listenTLS)
	}
	for name, want := range map[string]string{
		"a.example": "a", "b.example": "b", "x.w.example": "w", "B.EXAMPLE": "b",
		"unknown.example": "a", "w.example": "a", "": "a",
	} {
		if got := f.serverCN(name); got != want {
			t.Errorf("SNI %q: certificate %q, want %q", name, got, want)
		}
	}
}

// tlsClient is an HTTP/1.1 client of the TLS listener that trusts the
// fixture's CA, presenting certs when asked for a certificate, whoever
// signed them.
func (f *edgeFixture) tlsClient(serverName string, certs ...tls.Certificate) *http.Client {
	conf := &tls.Config{RootCAs: f.roots, ServerName: serverName}
	if len(certs) > 0 {
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
	}
	return &http.Client{Timeout: waitTimeout, Transport: &http.Transport{TLSClientConfig: conf}}
}

// get sends a GET to the TLS listener with c.
func getWith(t *testing.T, c *http.Client, url string, header ...string) (reply, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return reply{resp.StatusCode, resp.Header, string(body)}, resp
}

// Rewritten files serve new connections without a restart, while an open
// keep-alive connection goes on with the certificate it has; files that
// do not load leave the running certificate, and say so; a config that
// names other files takes them.
func TestServeTLSCertificateRotation(t *testing.T) {
	t.Parallel()
	f := newEdgeFixture(t, nil)
	one := f.ca.ServerFor(t, "one", "api.example")
	certPath, keyPath := f.file("tls.crt", one.CertPEM), f.file("tls.key", one.KeyPEM)
	conf := fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  tls:
    certs: [{cert: %q, key: %q}]
`, certPath, keyPath) + tlsRoutes
	f.write(conf)
	p := f.serve()

	kept := f.tlsClient("api.example")
	url := "https://" + f.listenTLS + "/api/x"
	r, resp := getWith(t, kept, url, "X-User-Id", "u1")
	if r.code != http.StatusOK || resp.TLS.PeerCertificates[0].Subject.CommonName != "one" {
		t.Fatalf("first request: %d %s over %s, certificate %q", r.code, r.body, resp.Proto, resp.TLS.PeerCertificates[0].Subject.CommonName)
	}

	// The key first, then its certificate: in between, the pair does not
	// match and the old one serves.
	two := f.ca.ServerFor(t, "two", "api.example")
	f.file("tls.key", two.KeyPEM)
	f.file("tls.crt", two.CertPEM)
	p.waitFor("the new certificate to serve", func() bool { return f.serverCN("api.example") == "two" })
	r, resp = getWith(t, kept, url, "X-User-Id", "u2")
	if r.code != http.StatusOK || resp.TLS.PeerCertificates[0].Subject.CommonName != "one" {
		t.Errorf("the kept connection: %d, certificate %q, want 200 on the old connection (one)", r.code, resp.TLS.PeerCertificates[0].Subject.CommonName)
	}
	if !strings.Contains(p.stderr.String(), `"msg":"server certificates reloaded"`) {
		t.Errorf("no reload line in the log:\n%s", p.stderr)
	}

	f.file("tls.crt", []byte("not a certificate\n"))
	p.waitLog(`"msg":"server TLS files refused; the running certificates stay",[^\n]*"error":"server.tls.certs\[0\].cert: \\"` +
		strings.ReplaceAll(certPath, ".", `\.`) + `\\": holds no PEM CERTIFICATE block"`)
	if got := f.serverCN("api.example"); got != "two" {
		t.Errorf("after a bad file: certificate %q, want two", got)
	}

	// A config naming other files takes them at its reload.
	three := f.ca.ServerFor(t, "three", "api.example")
	f.file("tls.crt", two.CertPEM) // the old files are good again
	conf3 := fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  tls:
    certs: [{cert: %q, key: %q}]
`, f.file("three.crt", three.CertPEM), f.file("three.key", three.KeyPEM)) + tlsRoutes
	f.write(conf3)
	p.waitFor("the certificate of the new files", func() bool { return f.serverCN("api.example") == "three" })
	p.waitLog(`"msg":"server certificates replaced"`)
}

// With client_auth: require, a client without a certificate is refused
// at the handshake; the verified subject keys a limit, one count per
// subject. With request, a client without one is served, and its
// tls:subject is missing: the fallback counts it.
func TestServeTLSClientCertificates(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"require", "request"} {
		t.Run(mode, func(t *testing.T) {
			f := newEdgeFixture(t, nil)
			srv := f.ca.Server(t, "gateway")
			f.write(fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  tls:
    certs: [{cert: %q, key: %q}]
    client_ca: %q
    client_auth: %s
admin:
  listen: "{{ADMIN}}"
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - name: client
        key: ["tls:subject"]
        fallback: [header:X-User-Id]
        rate: 1/10s
`, f.file("tls.crt", srv.CertPEM), f.file("tls.key", srv.KeyPEM), f.file("ca.crt", f.ca.PEM), mode))
			p := f.serve()
			url := "https://" + f.listenTLS + "/api/x"

			alice := f.tlsClient("", f.ca.Client(t, "alice").TLS(t))
			bob := f.tlsClient("", f.ca.Client(t, "bob").TLS(t))
			if r, _ := getWith(t, alice, url); r.code != http.StatusOK {
				t.Fatalf("alice: %d %s", r.code, r.body)
			}
			if r, _ := getWith(t, alice, url); r.code != http.StatusTooManyRequests {
				t.Errorf("alice again: %d %s, want 429", r.code, r.body)
			}
			if r, _ := getWith(t, bob, url); r.code != http.StatusOK {
				t.Errorf("bob: %d %s, want 200: a subject of his own", r.code, r.body)
			}
			// A certificate of another CA does not verify.
			other := testcerts.NewCA(t, "other CA").Client(t, "alice")
			if _, err := f.tlsClient("", other.TLS(t)).Get(url); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
				t.Errorf("a certificate of another CA: %v, want the handshake refused", err)
			}

			anon := f.tlsClient("")
			if mode == "require" {
				_, err := anon.Get(url)
				if err == nil || !strings.Contains(err.Error(), "certificate required") {
					t.Errorf("without a certificate: %v, want the handshake refused (certificate required)", err)
				}
				// The two refused handshakes are counted: the other CA's
				// and this one.
				p.waitFor("two handshake failures on /metrics", func() bool {
					return strings.Contains(p.admin("GET", "/metrics").body, "gateway_tls_handshake_failures_total 2\n")
				})
				return
			}
			// No certificate: by X-User-Id, then 403 without it either.
			if r, _ := getWith(t, anon, url, "X-User-Id", "carol"); r.code != http.StatusOK {
				t.Errorf("carol: %d %s", r.code, r.body)
			}
			if r, _ := getWith(t, anon, url, "X-User-Id", "carol"); r.code != http.StatusTooManyRequests {
				t.Errorf("carol again: %d %s, want 429", r.code, r.body)
			}
			if r, _ := getWith(t, anon, url); r.code != http.StatusForbidden || !strings.Contains(r.body, "key_required") {
				t.Errorf("no certificate, no header: %d %s, want 403 key_required", r.code, r.body)
			}
			// Only the other CA's certificate failed a handshake.
			p.waitFor("one handshake failure on /metrics", func() bool {
				return strings.Contains(p.admin("GET", "/metrics").body, "gateway_tls_handshake_failures_total 1\n")
			})
		})
	}
}

// protoClients are clients of each protocol the gateway speaks, by name.
func (f *edgeFixture) protoClients() map[string]struct {
	client *http.Client
	url    string
	proto  string
} {
	tlsConf := &tls.Config{RootCAs: f.roots}
	h1tls := &http.Transport{TLSClientConfig: tlsConf.Clone()}
	h1tls.TLSClientConfig.NextProtos = []string{"http/1.1"}
	h2tls := &http.Transport{TLSClientConfig: tlsConf.Clone(), ForceAttemptHTTP2: true}
	// HTTP/2 with prior knowledge: nothing but the preface and frames.
	var unencrypted http.Protocols
	unencrypted.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: &unencrypted}
	type pc = struct {
		client *http.Client
		url    string
		proto  string
	}
	return map[string]pc{
		"h1":     {&http.Client{Timeout: waitTimeout}, "http://" + f.listen, "HTTP/1.1"},
		"h1+tls": {&http.Client{Timeout: waitTimeout, Transport: h1tls}, "https://" + f.listenTLS, "HTTP/1.1"},
		"h2":     {&http.Client{Timeout: waitTimeout, Transport: h2tls}, "https://" + f.listenTLS, "HTTP/2.0"},
		"h2c":    {&http.Client{Timeout: waitTimeout, Transport: h2c}, "http://" + f.listen, "HTTP/2.0"},
	}
}

// A limited route answers alike on every protocol: 200 first, then 429
// with the same JSON and rate-limit headers; the upstream is told the
// client's scheme.
func TestServeProtocols(t *testing.T) {
	t.Parallel()
	f := newEdgeFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proto=%s", r.Header.Get("X-Forwarded-Proto"))
	}))
	srv := f.ca.Server(t, "gateway")
	f.write(fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  h2c: true
  tls:
    certs: [{cert: %q, key: %q}]
`, f.file("tls.crt", srv.CertPEM), f.file("tls.key", srv.KeyPEM)) + tlsRoutes)
	f.serve()

	type answer struct {
		Status  int
		Body    map[string]any
		Headers map[string]string
	}
	var first *answer
	for name, pc := range f.protoClients() {
		t.Run(name, func(t *testing.T) {
			user := "user-" + name
			r, resp := getWith(t, pc.client, pc.url+"/api/x", "X-User-Id", user)
			if resp.Proto != pc.proto {
				t.Errorf("spoke %s, want %s", resp.Proto, pc.proto)
			}
			scheme := "http"
			if strings.HasPrefix(pc.url, "https") {
				scheme = "https"
			}
			if r.code != http.StatusOK || r.body != "proto="+scheme {
				t.Errorf("first: %d %q, want 200 %q", r.code, r.body, "proto="+scheme)
			}
			r, _ = getWith(t, pc.client, pc.url+"/api/x", "X-User-Id", user)
			if r.code != http.StatusTooManyRequests {
				t.Fatalf("second: %d %s, want 429", r.code, r.body)
			}
			a := answer{Status: r.code, Body: r.json(t), Headers: map[string]string{}}
			delete(a.Body, "request_id")
			for _, h := range []string{"Content-Type", "Retry-After", "Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining"} {
				a.Headers[h] = r.header.Get(h)
			}
			// The seconds to wait are the same but for the clock, which
			// may have turned a second between two protocols.
			wait := a.Headers["Retry-After"]
			if n, err := strconv.Atoi(wait); err != nil || n < 1 || n > 10 ||
				a.Headers["Ratelimit"] != `"user";r=0;t=`+wait || a.Headers["Ratelimit-Policy"] != `"user";q=1;w=10` {
				t.Errorf("rate-limit headers: %v", r.header)
			}
			a.Headers["Retry-After"] = "N"
			a.Headers["Ratelimit"] = strings.TrimSuffix(a.Headers["Ratelimit"], wait) + "N"
			if r.header.Get("X-Request-Id") == "" {
				t.Errorf("no X-Request-Id: %v", r.header)
			}
			if first == nil {
				first = &a
				return
			}
			got, _ := json.Marshal(a)
			want, _ := json.Marshal(*first)
			if string(got) != string(want) {
				t.Errorf("answer %s\nwant as the others %s", got, want)
			}
		})
	}
}

// Without h2c, the HTTP/2 preface on the clear listener is an HTTP/1.1
// request of a version the gateway does not speak: 505, in JSON.
func TestServePrefaceWithoutH2C(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	f.serve()
	c, err := net.Dial("tcp", f.listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(got), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 505 ") || !strings.Contains(head, "Content-Type: application/json") ||
		!strings.Contains(body, `"code":"bad_request"`) {
		t.Errorf("answer to the preface:\n%s", got)
	}
}

// A graceful shutdown lets an HTTP/2 request in flight finish, and sends
// its connection a GOAWAY.
func TestServeShutdownDrainsHTTP2(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	f := newEdgeFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/slow" {
			arrived <- struct{}{}
			<-release
		}
		io.WriteString(w, "done")
	}))
	srv := f.ca.Server(t, "gateway")
	f.write(fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  shutdown_timeout: 20s
  h2c: true
  tls:
    certs: [{cert: %q, key: %q}]
admin:
  listen: "{{ADMIN}}"
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"], timeout: 30s}
`, f.file("tls.crt", srv.CertPEM), f.file("tls.key", srv.KeyPEM)))
	p := f.serve()
	for _, name := range []string{"h2", "h2c"} {
		pc := f.protoClients()[name]
		if r, resp := getWith(t, pc.client, pc.url+"/api/fast"); r.code != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("%s: %d over %s", name, r.code, resp.Proto)
		}
	}
	pc := f.protoClients()["h2"]
	type result struct {
		r   reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := pc.client.Get(pc.url + "/api/slow")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- result{reply{resp.StatusCode, resp.Header, string(b)}, err}
	}()
	<-arrived
	p.signal(syscall.SIGTERM)
	p.waitLog(`"msg":"shutting down: draining in-flight requests"`)
	// New connections are refused once the listeners close.
	p.waitFor("the TLS listener to close", func() bool {
		c, err := net.Dial("tcp", f.listenTLS)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case r := <-done:
		t.Fatalf("the request in flight ended before its upstream answered: %+v", r)
	default:
	}
	close(release)
	r := <-done
	if r.err != nil || r.r.code != http.StatusOK || r.r.body != "done" {
		t.Errorf("the request in flight: %+v, want 200 done", r)
	}
	if code := p.wait(); code != exitOK {
		t.Errorf("exit code %d, want 0", code)
	}
}

// An expired certificate is served, with a warning from check and from
// serve; a reload that changes the TLS listener, h2c or the HTTP/2
// limits says that they take a restart.
func TestServeTLSWarnings(t *testing.T) {
	t.Parallel()
	f := newEdgeFixture(t, nil)
	expiredAt := time.Now().Add(-time.Hour).Truncate(time.Second)
	old := f.ca.ServerValid(t, "old", expiredAt.Add(-24*time.Hour), expiredAt)
	certPath := f.file("old.crt", old.CertPEM)
	conf := fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  tls:
    certs: [{cert: %q, key: %q}]
`, certPath, f.file("old.key", old.KeyPEM)) + tlsRoutes
	f.write(conf)
	want := fmt.Sprintf(`server.tls.certs[0].cert: %q expired at %s`, certPath, expiredAt.UTC().Format(time.RFC3339))
	stdout, stderr, code := floodgate(t, "check", "-c", f.fixture.file)
	if code != exitOK || !strings.Contains(stdout+stderr, want) {
		t.Errorf("check: exit %d, output\n%s%s\nwant exit 0 and %q", code, stdout, stderr, want)
	}
	p := f.serve()
	line := p.waitLog(`"msg":"config warning"[^\n]*`)
	if !strings.Contains(line, strings.ReplaceAll(want, `"`, `\"`)) {
		t.Errorf("serve: %s, want the warning %q", line, want)
	}
	if got := f.serverCN("localhost"); got != "old" {
		t.Errorf("certificate %q, want the expired one served", got)
	}

	other := freeAddr(t)
	f.write(strings.Replace(conf, "{{LISTEN_TLS}}", other, 1) + `
  - id: more
    match: {path: /more}
    upstream: {targets: ["{{UPSTREAM}}"]}
`)
	p.waitLog(`"level":"WARN","msg":"a listener setting changed; it takes effect after a restart","setting":"server.listen_tls"`)
	f.write(strings.Replace(conf, "server:\n", "server:\n  h2c: true\n  http2: {max_concurrent_streams: 5}\n", 1))
	p.waitLog(`"setting":"server.h2c"`)
	p.waitLog(`"setting":"server.http2"`)
	if got := f.serverCN("localhost"); got != "old" {
		t.Errorf("after the reloads: certificate %q", got)
	}
}
