package gateway

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// tls:subject is the subject of a client certificate that verified, and
// missing for one that did not (net/http hands it over when asked only
// to request one) and without one.
func TestTLSSubjectKeyPart(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "test CA")
	dir := t.TempDir()
	srvPair := ca.Server(t, "gateway")
	certFile := testcerts.Write(t, dir, "tls.crt", srvPair.CertPEM)
	keyFile := testcerts.Write(t, dir, "tls.key", srvPair.KeyPEM)
	caFile := testcerts.Write(t, dir, "ca.crt", ca.PEM)
	up := newBackend(t, nil)
	h := newHarness(t, fmt.Sprintf(`
admin: {listen: ""}
server:
  listen_tls: "127.0.0.1:0"
  tls:
    certs: [{cert: %q, key: %q}]
    client_ca: %q
    client_auth: request
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - name: per-client
        key: ["tls:subject"]
        fallback: [header:X-User-Id]
        rate: 1/min
`, certFile, keyFile, caFile), up)

	for _, tt := range []struct {
		name string
		auth tls.ClientAuthType
		want string // the counter the requests count in: "" for the fallback's
	}{
		{"verified", tls.VerifyClientCertIfGiven, "CN=alice"},
		{"not verified", tls.RequestClientCert, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(h.gw)
			srv.TLS = &tls.Config{ClientCAs: ca.Pool(), ClientAuth: tt.auth}
			srv.StartTLS()
			defer srv.Close()
			alice := ca.Client(t, "alice").TLS(t)
			if tt.auth == tls.RequestClientCert {
				alice = testcerts.NewCA(t, "other CA").Client(t, "alice").TLS(t)
			}
			tr := srv.Client().Transport.(*http.Transport).Clone()
			tr.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &alice, nil }
			c := &http.Client{Transport: tr}
			user := "user-" + tt.name
			for i, want := range []int{200, 429} {
				req, _ := http.NewRequest("GET", srv.URL+"/api", nil)
				req.Header.Set("X-User-Id", user)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Fatalf("request %d: %d, want %d", i, resp.StatusCode, want)
				}
			}
			if tt.want != "" {
				if n := h.remaining("api", "per-client", false, tt.want); n != 0 {
					t.Errorf("the counter of %s: %d remaining, want 0", tt.want, n)
				}
				if n := h.remaining("api", "per-client", true, user); n != 1 {
					t.Errorf("the fallback counter of %s: %d remaining, want 1 (unused)", user, n)
				}
			} else if n := h.remaining("api", "per-client", true, user); n != 0 {
				t.Errorf("the fallback counter of %s: %d remaining, want 0", user, n)
			}
		})
	}
}
