package config

import (
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// upstream.tls is checked as the gateway loads it: a CA that holds
// certificates, a client certificate and its key together and matching,
// and https targets to apply to.
func TestUpstreamTLSValidation(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	files, subst := tlsTestFiles(t, ca, ca.Client(t, "a"), ca.Client(t, "b"))

	ok := subst(`
routes:
  - id: a
    match: {path: /}
    upstream:
      targets: ["https://10.0.0.1:8443", "http://10.0.0.2:8080"]
      tls: {ca: "{{CA}}", server_name: api.internal, cert: "{{CERT}}", key: "{{KEY}}"}
`)
	c, err := Parse("test.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := UpstreamTLS{CA: files["CA"], ServerName: "api.internal", Cert: files["CERT"], Key: files["KEY"]}
	if got := c.Routes[0].Upstream.TLS; got == nil || *got != want {
		t.Fatalf("upstream.tls = %+v, want %+v", got, want)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
	if c := mustParse(t, okRoute); c.Routes[0].Upstream.TLS != nil {
		t.Errorf("upstream.tls = %+v without the key, want nil", c.Routes[0].Upstream.TLS)
	}

	route := func(tls string) string {
		return subst(`
routes:
  - id: a
    match: {path: /}
    upstream:
      targets: ["https://10.0.0.1:8443"]
      tls:` + tls + "\n")
	}
	tests := []struct{ name, src string }{
		{"http targets only", `
routes:
  - id: a
    match: {path: /}
    upstream:
      targets: ["http://10.0.0.1:8080", "http://10.0.0.2:8080"]
      tls: {ca: "{{CA}}"} #want: routes[0].upstream.tls: set, but every target is http://, so no connection would use it
`},
		{"not a mapping", `
routes:
  - id: a
    match: {path: /}
    upstream:
      targets: ["http://10.0.0.1:8080"]
      tls: true #want: routes[0].upstream.tls: want a mapping
`},
		{"key without cert", route(` #want: routes[0].upstream.tls.cert: empty, but key is set
        key: "{{KEY}}"`)},
		{"cert without key", route(` #want: routes[0].upstream.tls.key: empty, but cert is set
        cert: "{{CERT}}"`)},
		{"unreadable", route(`
        ca: "{{MISSING}}" #want: routes[0].upstream.tls.ca: "{{MISSING}}" cannot be read: no such file or directory
        cert: "{{DIR}}" #want: routes[0].upstream.tls.cert: "{{DIR}}" cannot be read: is a directory
        key: "{{KEY}}"`)},
		{"a CA that is not PEM", route(`
        ca: "{{TEXT}}" #want: routes[0].upstream.tls.ca: "{{TEXT}}": holds no PEM CERTIFICATE block`)},
		{"a cut-short CA", route(`
        ca: "{{TRUNCCA}}" #want: routes[0].upstream.tls.ca: "{{TRUNCCA}}"`)},
		{"a key that is not the certificate's", route(`
        cert: "{{CERT}}"
        key: "{{OTHERKEY}}" #want: routes[0].upstream.tls.key: "{{OTHERKEY}}": the private key does not match the certificate`)},
		{"a certificate for a key", route(`
        cert: "{{CERT}}"
        key: "{{CERT}}" #want: routes[0].upstream.tls.key: "{{CERT}}": holds no PEM PRIVATE KEY block`)},
		{"an empty ca", route(`
        ca: "" #want: routes[0].upstream.tls.ca: empty: leave it out`)},
		{"a URL for a server name", route(`
        server_name: "https://api.internal" #want: routes[0].upstream.tls.server_name: "https://api.internal" is not a host name`)},
		{"an unknown key", route(`
        client_ca: "{{CA}}" #want: unknown key`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, subst(tt.src))
		})
	}
}

// insecure_skip_verify is allowed, with a warning that says what it gives
// up, and that a ca beside it goes unused.
func TestUpstreamTLSInsecureWarning(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	_, subst := tlsTestFiles(t, ca, ca.Client(t, "a"), ca.Client(t, "b"))
	for _, tt := range []struct{ tls, want string }{
		{"{insecure_skip_verify: true}", "set ca to the CA that signs the targets' certificates instead"},
		{`{ca: "{{CA}}", insecure_skip_verify: true}`, "is not used; leave insecure_skip_verify out to verify against it"},
	} {
		c := mustParse(t, subst(`
routes:
  - id: a
    match: {path: /}
    upstream:
      targets: ["https://10.0.0.1:8443"]
      tls: `+tt.tls+"\n"))
		w := c.Warnings.Error()
		if !strings.Contains(w, "test.yaml:7: routes[0].upstream.tls.insecure_skip_verify: the targets' certificates are not verified") ||
			!strings.Contains(w, tt.want) {
			t.Errorf("tls %s: warnings %q, want the one of insecure_skip_verify, saying %q", tt.tls, w, tt.want)
		}
	}
}
