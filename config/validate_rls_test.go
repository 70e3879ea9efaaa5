package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// rls.tls is checked as serve loads it: both files, PEM, a key that is
// the certificate's, a client CA that holds certificates.
func TestRLSTLSValidation(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	files, subst := tlsTestFiles(t, ca, ca.Server(t, "a"), ca.Server(t, "b"))

	ok := subst("rls:\n  listen: \":8081\"\n  tls: {cert: \"{{CERT}}\", key: \"{{KEY}}\", client_ca: \"{{CA}}\"}\n")
	c, err := Parse("test.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if want := (RLSTLS{Cert: files["CERT"], Key: files["KEY"], ClientCA: files["CA"]}); c.RLS.TLS == nil || *c.RLS.TLS != want {
		t.Fatalf("rls.tls = %+v, want %+v", c.RLS.TLS, want)
	}

	tests := []struct{ name, src string }{
		{"key without cert", `
rls:
  listen: ":8081"
  tls: #want: rls.tls.cert: empty, but key is set
    key: "{{KEY}}"
`},
		{"cert without key", `
rls:
  listen: ":8081"
  tls: #want: rls.tls.key: empty, but cert is set
    cert: "{{CERT}}"
`},
		{"neither", `
rls:
  listen: ":8081"
  tls: {} #want: rls.tls: needs cert and key
`},
		{"without a listener", `
server: {listen: ":8080"}
routes:
  - {id: a, match: {path: /}, upstream: {targets: ["http://127.0.0.1:9"]}}
rls:
  tls: {cert: "{{CERT}}", key: "{{KEY}}"} #want: rls.tls: set, but rls.listen is empty
`},
		{"unreadable", `
rls:
  listen: ":8081"
  tls:
    cert: "{{MISSING}}" #want: rls.tls.cert: "{{MISSING}}" cannot be read: no such file or directory
    key: "{{DIR}}" #want: rls.tls.key: "{{DIR}}" cannot be read: is a directory
    client_ca: "{{MISSING}}" #want: rls.tls.client_ca: "{{MISSING}}" cannot be read
`},
		{"not PEM", `
rls:
  listen: ":8081"
  tls:
    cert: "{{TEXT}}" #want: rls.tls.cert: "{{TEXT}}": holds no PEM CERTIFICATE block
    key: "{{KEY}}"
    client_ca: "{{TEXT}}" #want: rls.tls.client_ca: "{{TEXT}}": holds no PEM CERTIFICATE block
`},
		{"a certificate for a key", `
rls:
  listen: ":8081"
  tls:
    cert: "{{CERT}}"
    key: "{{CERT}}" #want: rls.tls.key: "{{CERT}}": holds no PEM PRIVATE KEY block
`},
		{"a key that is not the certificate's", `
rls:
  listen: ":8081"
  tls:
    cert: "{{CERT}}"
    key: "{{OTHERKEY}}" #want: rls.tls.key: "{{OTHERKEY}}": the private key does not match the certificate
`},
		{"an empty client_ca", `
rls:
  listen: ":8081"
  tls:
    cert: "{{CERT}}"
    key: "{{KEY}}"
    client_ca: "" #want: rls.tls.client_ca: empty: leave it out
`},
		{"an unknown key", `
rls:
  listen: ":8081"
  tls:
    cert: "{{CERT}}"
    key: "{{KEY}}"
    ca: "{{CA}}" #want: unknown key
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErrors(t, subst(tt.src))
		})
	}
}

// rls.xds needs an address and a node id, and is refused beside rule
// files.
func TestRLSXDSValidation(t *testing.T) {
	c, err := Parse("test.yaml", []byte("rls:\n  listen: \":8081\"\n  xds: {addr: \"cp.example:18000\", node_id: floodgate}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (RLSXDS{Addr: "cp.example:18000", NodeID: "floodgate"}); c.RLS.XDS == nil || *c.RLS.XDS != want {
		t.Fatalf("rls.xds = %+v, want %+v", c.RLS.XDS, want)
	}
	for _, tt := range []struct{ name, src string }{
		{"empty", `
rls:
  listen: ":8081"
  xds:
    addr: "" #want: rls.xds.addr: missing
    node_id: "" #want: rls.xds.node_id: missing
`},
		{"not an address", `
rls:
  listen: ":8081"
  xds:
    addr: "http://cp:18000" #want: rls.xds.addr: "http://cp:18000" is not an address
    node_id: floodgate
`},
		{"no host", `
rls:
  listen: ":8081"
  xds:
    addr: ":18000" #want: rls.xds.addr: ":18000" has no host
    node_id: floodgate
`},
		{"beside config_dir", `
rls:
  listen: ":8081"
  config_dir: rules
  xds: {addr: "cp:18000", node_id: floodgate} #want: rls.xds: set beside rls.config_dir
`},
		{"without a listener", `
server: {listen: ":8080"}
routes:
  - {id: a, match: {path: /}, upstream: {targets: ["http://127.0.0.1:9"]}}
rls:
  xds: {addr: "cp:18000", node_id: floodgate} #want: rls.xds: set, but rls.listen is empty
`},
		{"an unknown key", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    node: x #want: unknown key
`},
	} {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.src) })
	}
}

// rls.xds.tls is checked as the client loads it: a CA file of
// certificates, a client certificate and key both or neither, PEM,
// matching each other.
func TestRLSXDSTLSValidation(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	files, subst := tlsTestFiles(t, ca, ca.Client(t, "a"), ca.Client(t, "b"))

	ok := subst("rls:\n  listen: \":8081\"\n  xds:\n    addr: \"cp.example:18000\"\n    node_id: floodgate\n" +
		"    tls: {ca: \"{{CA}}\", cert: \"{{CERT}}\", key: \"{{KEY}}\", server_name: cp.internal}\n")
	c, err := Parse("test.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := RLSXDSTLS{CA: files["CA"], Cert: files["CERT"], Key: files["KEY"], ServerName: "cp.internal"}
	if x := c.RLS.XDS; x == nil || x.TLS == nil || *x.TLS != want {
		t.Fatalf("rls.xds = %+v, want tls %+v", x, want)
	}
	// Every key may be left out: the system's roots, no client certificate.
	if _, err := Parse("test.yaml", []byte("rls:\n  listen: \":8081\"\n  xds: {addr: \"cp.example:18000\", node_id: floodgate, tls: {}}\n")); err != nil {
		t.Fatalf("an empty tls: %v", err)
	}

	for _, tt := range []struct{ name, src string }{
		{"a certificate without its key", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    tls: #want: rls.xds.tls.key: empty, but cert is set
      cert: "{{CERT}}"
`},
		{"a key without its certificate", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    tls: #want: rls.xds.tls.cert: empty, but key is set
      key: "{{KEY}}"
`},
		{"unreadable", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    tls:
      ca: "{{MISSING}}" #want: rls.xds.tls.ca: "{{MISSING}}" cannot be read: no such file or directory
      cert: "{{MISSING}}" #want: rls.xds.tls.cert: "{{MISSING}}" cannot be read: no such file or directory
      key: "{{KEY}}"
`},
		{"not PEM", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    tls:
      ca: "{{TEXT}}" #want: rls.xds.tls.ca: "{{TEXT}}": holds no PEM CERTIFICATE block
      cert: "{{TEXT}}" #want: rls.xds.tls.cert: "{{TEXT}}": holds no PEM CERTIFICATE block
      key: "{{KEY}}"
`},
		{"a key that is not the certificate's", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    tls:
      cert: "{{CERT}}"
      key: "{{OTHERKEY}}" #want: rls.xds.tls.key: "{{OTHERKEY}}": the private key does not match the certificate
`},
		{"empty values written out", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    tls:
      ca: "" #want: rls.xds.tls.ca: empty: leave it out
      server_name: "" #want: rls.xds.tls.server_name: empty: leave it out
`},
		{"tls without an address", `
rls:
  listen: ":8081"
  xds: #want: rls.xds.addr: missing
    node_id: floodgate
    tls: {ca: "{{CA}}"}
`},
		{"an unknown key", `
rls:
  listen: ":8081"
  xds:
    addr: "cp:18000"
    node_id: floodgate
    tls:
      client_ca: "{{CA}}" #want: unknown key
`},
	} {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, subst(tt.src)) })
	}
}

// tlsTestFiles writes the files the TLS tests name: CERT and KEY of pair,
// OTHERKEY (another key), CA, TEXT (not PEM), MISSING (absent) and DIR (a
// directory); subst puts their paths in for {{NAME}}.
func tlsTestFiles(t *testing.T, ca *testcerts.CA, pair, other testcerts.Pair) (files map[string]string, subst func(string) string) {
	t.Helper()
	dir := t.TempDir()
	files = map[string]string{
		"CERT":     testcerts.Write(t, dir, "cert.pem", pair.CertPEM),
		"KEY":      testcerts.Write(t, dir, "key.pem", pair.KeyPEM),
		"OTHERKEY": testcerts.Write(t, dir, "other.key", other.KeyPEM),
		"CA":       testcerts.Write(t, dir, "ca.pem", ca.PEM),
		"TEXT":     testcerts.Write(t, dir, "text.pem", []byte("not a certificate\n")),
		"TRUNC":    testcerts.Write(t, dir, "trunc.pem", append(append([]byte{}, pair.CertPEM...), ca.PEM[:300]...)),
		"TRAILING": testcerts.Write(t, dir, "trailing.key", append(append([]byte{}, pair.KeyPEM...), "garbage\n"...)),
		"TRUNCCA":  testcerts.Write(t, dir, "trunc-ca.pem", append(append([]byte{}, ca.PEM...), ca.PEM[:300]...)),
		"MISSING":  filepath.Join(dir, "missing.pem"),
		"DIR":      filepath.Join(dir, "adir"),
	}
	if err := os.Mkdir(files["DIR"], 0o755); err != nil {
		t.Fatal(err)
	}
	subst = func(src string) string {
		for k, v := range files {
			src = strings.ReplaceAll(src, "{{"+k+"}}", v)
		}
		return src
	}
	return files, subst
}
