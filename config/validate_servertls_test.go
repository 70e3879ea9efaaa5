package config

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// server.listen_tls and server.tls are checked as serve loads them.
func TestServerTLSValidation(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	files, subst := tlsTestFiles(t, ca, ca.Server(t, "a"), ca.Server(t, "b"))

	ok := subst(`
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    min_version: 1.3
    client_ca: "{{CA}}"
    client_auth: require
  h2c: true
  http2: {max_concurrent_streams: 50, max_header_list_size: 8192}
routes:
  - id: a
    match: {path: /}
    upstream: {targets: ["http://127.0.0.1:9"]}
    limits:
      - {name: per-client, key: ["tls:subject"], rate: 10/s}
`)
	c, err := Parse("test.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := ServerTLS{Certs: []ServerCert{{Cert: files["CERT"], Key: files["KEY"]}}, MinVersion: TLS13, ClientCA: files["CA"], ClientAuth: ClientAuthRequire}
	if s := c.Server; s.ListenTLS != ":8443" || !s.H2C || len(s.TLS.Certs) != 1 || s.TLS.Certs[0] != want.Certs[0] ||
		s.TLS.MinVersion != want.MinVersion || s.TLS.ClientCA != want.ClientCA || s.TLS.ClientAuth != want.ClientAuth {
		t.Fatalf("server = %+v, want listen_tls :8443, h2c, tls %+v", s, want)
	}
	if h := c.Server.HTTP2; h != (HTTP2{MaxConcurrentStreams: 50, MaxReadFrameSize: 1 << 20, MaxHeaderListSize: 8192,
		InitialStreamWindow: 1 << 20, InitialConnWindow: 1 << 20}) {
		t.Fatalf("server.http2 = %+v", h)
	}
	if k := c.Routes[0].Limits[0].Key[0]; k != (KeyPart{Source: SourceTLS, Name: "subject"}) || k.Kind() != "tls:subject" {
		t.Fatalf("key part = %+v", k)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}

	// HTTPS only: an empty listen beside listen_tls.
	if c, err := Parse("test.yaml", []byte(subst(`
server:
  listen: ""
  listen_tls: ":8443"
  tls: {certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]}
routes:
  - {id: a, match: {path: /}, upstream: {targets: ["http://127.0.0.1:9"]}}
`))); err != nil || c.Server.Listen != "" {
		t.Fatalf("HTTPS only: %v", err)
	}

	const route = `
routes:
  - {id: a, match: {path: /}, upstream: {targets: ["http://127.0.0.1:9"]}}
`
	tests := []struct{ name, src string }{
		{"listen_tls without certs", `
server:
  listen_tls: ":8443" #want: server.listen_tls: set, but server.tls.certs is empty
` + route},
		{"certs without listen_tls", `
server:
  tls:
    certs: #want: server.tls.certs: set, but server.listen_tls is empty
      - {cert: "{{CERT}}", key: "{{KEY}}"}
` + route},
		{"a listen_tls that is not an address", `
server:
  listen_tls: "8443" #want: server.listen_tls: "8443" is not an address
  tls: {certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]}
` + route},
		{"listen_tls on the port of listen", `
server:
  listen: ":8443"
  listen_tls: ":8443" #want: server.listen_tls: ":8443" overlaps server.listen
  tls: {certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]}
` + route},
		{"a certificate without a key", `
server:
  listen_tls: ":8443"
  tls:
    certs:
      - cert: "{{CERT}}" #want: server.tls.certs[0].key: empty, but cert is set
      - key: "{{KEY}}" #want: server.tls.certs[1].cert: empty, but key is set
      - {} #want: server.tls.certs[2]: needs cert and key
` + route},
		{"not PEM", `
server:
  listen_tls: ":8443"
  tls:
    certs:
      - {cert: "{{CERT}}", key: "{{KEY}}"}
      - cert: "{{TEXT}}" #want: server.tls.certs[1].cert: "{{TEXT}}": holds no PEM CERTIFICATE block
        key: "{{KEY}}"
      - cert: "{{CERT}}"
        key: "{{CERT}}" #want: server.tls.certs[2].key: "{{CERT}}": holds no PEM PRIVATE KEY block
` + route},
		{"a file cut short or with trailing text", `
server:
  listen_tls: ":8443"
  tls:
    certs:
      - cert: "{{TRUNC}}" #want: server.tls.certs[0].cert: "{{TRUNC}}": holds a partial PEM block, or other text, after certificate 1
        key: "{{KEY}}"
      - cert: "{{CERT}}"
        key: "{{TRAILING}}" #want: server.tls.certs[1].key: "{{TRAILING}}": holds a partial PEM block, or other text, after the private key
    client_ca: "{{TRUNCCA}}" #want: server.tls.client_ca: "{{TRUNCCA}}": holds a partial PEM block, or other text, after certificate 1
    client_auth: require
` + route},
		{"no listener for the routes", `
server:
  listen: "" #want: server.listen: empty, but the config has routes to serve (for HTTPS only, set server.listen_tls)
` + route},
		{"cert and key swapped", `
server:
  listen_tls: ":8443"
  tls:
    certs:
      - cert: "{{KEY}}" #want: server.tls.certs[0].cert: "{{KEY}}" holds a private key and no certificate, and key "{{CERT}}" holds a certificate: are cert and key swapped?
        key: "{{CERT}}"
` + route},
		{"unreadable", `
server:
  listen_tls: ":8443"
  tls:
    certs:
      - cert: "{{MISSING}}" #want: server.tls.certs[0].cert: "{{MISSING}}" cannot be read: no such file or directory
        key: "{{DIR}}" #want: server.tls.certs[0].key: "{{DIR}}" cannot be read: is a directory
` + route},
		{"a key that is not the certificate's", `
server:
  listen_tls: ":8443"
  tls:
    certs:
      - cert: "{{CERT}}"
        key: "{{OTHERKEY}}" #want: server.tls.certs[0].key: "{{OTHERKEY}}": the private key does not match the certificate
` + route},
		{"client_auth without client_ca", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    client_auth: request #want: server.tls.client_auth: request needs server.tls.client_ca
` + route},
		{"client_ca without client_auth", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    client_ca: "{{CA}}" #want: server.tls.client_ca: set, but server.tls.client_auth is none
` + route},
		{"a client_ca that is not PEM", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    client_ca: "{{TEXT}}" #want: server.tls.client_ca: "{{TEXT}}": holds no PEM CERTIFICATE block
    client_auth: require
` + route},
		{"an unknown client_auth", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    client_ca: "{{CA}}"
    client_auth: optional #want: server.tls.client_auth: "optional": none, request or require
` + route},
		{"an old min_version", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    min_version: "1.0" #want: server.tls.min_version: "1.0": TLS 1.0 is not offered; write 1.2 or 1.3
` + route},
		{"a min_version that is no version", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    min_version: tls12 #want: server.tls.min_version: "tls12": write 1.2 or 1.3
` + route},
		{"h2c without listen", `
server:
  listen: ""
  h2c: true #want: server.h2c: set, but server.listen is empty
rls: {listen: ":8081"}
`},
		{"http2 limits out of range", `
server:
  http2:
    max_concurrent_streams: 0 #want: server.http2.max_concurrent_streams: 0 is outside 1..10000
    max_read_frame_size: 1024 #want: server.http2.max_read_frame_size: 1024 is outside 16384..16777215
    max_header_list_size: -1 #want: server.http2.max_header_list_size: -1 is negative
    initial_stream_window: 0 #want: server.http2.initial_stream_window: 0 is outside 1..2147483647
    initial_conn_window: 1000 #want: server.http2.initial_conn_window: 1000 is outside 65535..2147483647
` + route},
		{"an unknown key", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
    ciphers: [a] #want: unknown key
` + route},
		{"tls:subject without client certificates", `
server:
  listen_tls: ":8443"
  tls:
    certs: [{cert: "{{CERT}}", key: "{{KEY}}"}]
routes:
  - id: a
    match: {path: /}
    upstream: {targets: ["http://127.0.0.1:9"]}
    limits:
      - name: l
        key:
          - "tls:subject" #want: routes[0].limits[0].key[0]: tls:subject needs server.listen_tls with server.tls.client_auth request or require
        rate: 10/s
`},
		{"tls:issuer", `
routes:
  - id: a
    match: {path: /}
    upstream: {targets: ["http://127.0.0.1:9"]}
    limits:
      - name: l
        key:
          - "tls:issuer" #want: key source "tls:issuer": write tls:subject
        rate: 10/s
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, subst(tt.src)) })
	}
}

// A certificate expired, or not valid yet, is served, with a warning
// that names its file and when it is valid.
func TestServerTLSValidityWarnings(t *testing.T) {
	ca := testcerts.NewCA(t, "test CA")
	dir := t.TempDir()
	expiredAt := time.Now().Add(-time.Hour).Truncate(time.Second)
	expired := ca.ServerValid(t, "old", expiredAt.Add(-24*time.Hour), expiredAt)
	validFrom := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	early := ca.ServerValid(t, "new", validFrom, validFrom.Add(24*time.Hour))
	oldCert := testcerts.Write(t, dir, "old.crt", expired.CertPEM)
	oldKey := testcerts.Write(t, dir, "old.key", expired.KeyPEM)
	newCert := testcerts.Write(t, dir, "new.crt", early.CertPEM)
	newKey := testcerts.Write(t, dir, "new.key", early.KeyPEM)
	src := "server:\n  listen_tls: \":8443\"\n  tls:\n    certs:\n" +
		"      - {cert: \"" + oldCert + "\", key: \"" + oldKey + "\"}\n" +
		"      - {cert: \"" + newCert + "\", key: \"" + newKey + "\"}\n" + okRoute
	c, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line int
		msg  string
	}{
		{5, `server.tls.certs[0].cert: "` + oldCert + `" expired at ` + expiredAt.UTC().Format(time.RFC3339)},
		{6, `server.tls.certs[1].cert: "` + newCert + `" is not valid before ` + validFrom.UTC().Format(time.RFC3339)},
	}
	if len(c.Warnings) != len(want) {
		t.Fatalf("warnings: %v, want %d", c.Warnings, len(want))
	}
	for i, w := range want {
		got := c.Warnings[i]
		if got.Line != w.line || !strings.HasPrefix(got.Msg, w.msg) || !strings.Contains(got.Msg, "clients that check it will refuse it") {
			t.Errorf("warning %d = line %d %q, want line %d %q…", i, got.Line, got.Msg, w.line, w.msg)
		}
	}
}
