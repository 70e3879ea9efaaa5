package main

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// With server.listen empty beside server.listen_tls, the gateway serves
// its routes over HTTPS alone.
func TestServeHTTPSOnly(t *testing.T) {
	t.Parallel()
	f := newEdgeFixture(t, nil)
	pair := f.ca.ServerFor(t, "api", "api.example")
	f.write(fmt.Sprintf(`
server:
  listen: ""
  listen_tls: "{{LISTEN_TLS}}"
  tls:
    certs: [{cert: %q, key: %q}]
`, f.file("tls.crt", pair.CertPEM), f.file("tls.key", pair.KeyPEM)) + tlsRoutes)
	p := f.serve()
	line := p.waitLog(`"msg":"floodgate serving"[^\n]*`)
	if !strings.Contains(line, `"listen":""`) || !strings.Contains(line, `"listen_tls":"`+f.listenTLS+`"`) {
		t.Errorf("serving line %s: want listen empty, listen_tls %s", line, f.listenTLS)
	}
	r, _ := getWith(t, f.tlsClient("api.example"), "https://"+f.listenTLS+"/api/x", "X-User-Id", "u1")
	if r.code != http.StatusOK {
		t.Fatalf("over HTTPS: %d %s", r.code, r.body)
	}
}

// A certificate chain rewritten cut short (a rotation half written) is
// refused, and the chain that served goes on serving whole.
func TestServeTLSChainCutShortKept(t *testing.T) {
	t.Parallel()
	f := newEdgeFixture(t, nil)
	one := f.ca.ServerFor(t, "one", "api.example")
	chain := append(append([]byte{}, one.CertPEM...), f.ca.PEM...)
	certPath, keyPath := f.file("tls.crt", chain), f.file("tls.key", one.KeyPEM)
	f.write(fmt.Sprintf(`
server:
  listen: "{{LISTEN}}"
  listen_tls: "{{LISTEN_TLS}}"
  tls:
    certs: [{cert: %q, key: %q}]
`, certPath, keyPath) + tlsRoutes)
	p := f.serve()
	p.waitLog(`"msg":"floodgate serving"`)

	two := f.ca.ServerFor(t, "two", "api.example")
	f.file("tls.key", two.KeyPEM)
	f.file("tls.crt", append(append([]byte{}, two.CertPEM...), f.ca.PEM[:300]...))
	p.waitLog(`"msg":"server TLS files refused; the running certificates stay",[^\n]*"error":"server.tls.certs\[0\].cert: \\"` +
		regexp.QuoteMeta(certPath) + `\\": holds a partial PEM block, or other text, after certificate 1"`)
	_, resp := getWith(t, f.tlsClient("api.example"), "https://"+f.listenTLS+"/api/x", "X-User-Id", "u1")
	if cs := resp.TLS.PeerCertificates; len(cs) != 2 || cs[0].Subject.CommonName != "one" {
		t.Errorf("served %d certificates, the first %q; want the old chain of 2", len(cs), cs[0].Subject.CommonName)
	}
}

// A config file given as an argument, not with -c, is pointed to -c.
func TestConfigFileAsArgument(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"check", "serve"} {
		_, stderr, code := floodgate(t, cmd, "t1.yaml")
		want := `floodgate ` + cmd + `: unexpected argument "t1.yaml"; the config file is given with -c FILE`
		if code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("%s t1.yaml: exit %d, stderr %q; want %d and %q", cmd, code, stderr, exitUsage, want)
		}
	}
}
