package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// xdsTLSFixture is floodgate serve subscribed to a control plane that
// serves TLS with srvTLS, with tls as the YAML of rls.xds.tls.
type xdsTLSFixture struct {
	p    *proc
	f    *fixture
	cp   *controlPlane
	dir  string // where the certificate files are
	rpc  rlsv3.RateLimitServiceClient
	addr string // the control plane's
}

func startXDSTLS(t *testing.T, srvTLS *tls.Config, tlsYAML string, files map[string][]byte) *xdsTLSFixture {
	t.Helper()
	x := &xdsTLSFixture{f: newFixture(t, nil)}
	x.dir = x.f.dir
	var pairs []string
	for name, data := range files {
		pairs = append(pairs, "{{"+name+"}}", testcerts.Write(t, x.dir, name, data))
	}
	r := strings.NewReplacer(pairs...)
	cache := cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	x.cp = startControlPlane(t, "127.0.0.1:0", cache, grpc.Creds(credentials.NewTLS(srvTLS)))
	x.addr = x.cp.addr
	x.cp.push("1", edgeConfig(1, rlsconfv3.RateLimitUnit_HOUR))
	rlsAddr := freeAddr(t)
	x.f.write(`
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
rls:
  listen: "` + rlsAddr + `"
  xds:
    addr: "` + x.addr + `"
    node_id: floodgate
    tls: ` + r.Replace(tlsYAML) + "\n")
	x.p = x.f.serve()
	x.rpc = rlsv3.NewRateLimitServiceClient(dialPlain(t, rlsAddr))
	return x
}

func (x *xdsTLSFixture) ask(t *testing.T, addr string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	resp, err := x.rpc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
		{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: addr}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.OverallCode
}

func (x *xdsTLSFixture) detail(t *testing.T) string {
	t.Helper()
	r := request(t, "GET", "http://"+x.f.admin+"/readyz")
	if r.code != http.StatusOK {
		t.Fatalf("/readyz %d: %s", r.code, r.body)
	}
	d, _ := r.json(t)["detail"].(string)
	return d
}

// rulesHold checks that the pushed 1 an hour is the running rule.
func (x *xdsTLSFixture) rulesHold(t *testing.T, addr string) {
	t.Helper()
	if x.ask(t, addr) != rlsv3.RateLimitResponse_OK || x.ask(t, addr) != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("1 an hour did not admit one and refuse the next: the rules are not the server's")
	}
}

// rls.xds.tls dials the management server over TLS: the server is
// verified by ca (and by server_name), a client certificate is presented
// for mutual TLS, and a server signed by another CA is not trusted.
func TestServeRLSXDSTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "xds CA")
	serverPair := ca.Server(t, "cp")
	serverCert := serverPair.TLS(t)

	t.Run("TLS", func(t *testing.T) {
		x := startXDSTLS(t, &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12},
			`{ca: "{{ca.pem}}"}`, map[string][]byte{"ca.pem": ca.PEM})
		x.p.waitLog(`rate-limit rules from xDS applied.*"version":"1"`)
		x.rulesHold(t, "a")
		if d := x.detail(t); d != "" {
			t.Errorf("/readyz detail %q with the rules applied", d)
		}
	})

	t.Run("server_name", func(t *testing.T) {
		// server_name is verified in place of the address's host (the
		// next subtest shows a name the certificate lacks refused).
		x := startXDSTLS(t, &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12},
			`{ca: "{{ca.pem}}", server_name: localhost}`, map[string][]byte{"ca.pem": ca.PEM})
		x.p.waitLog(`rate-limit rules from xDS applied.*"version":"1"`)
		x.rulesHold(t, "a")
	})

	t.Run("a server_name the certificate does not hold", func(t *testing.T) {
		x := startXDSTLS(t, &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12},
			`{ca: "{{ca.pem}}", server_name: cp.elsewhere}`, map[string][]byte{"ca.pem": ca.PEM})
		x.p.waitFor("/readyz to say why the server is not trusted", func() bool {
			d := x.detail(t)
			return strings.Contains(d, "rls.xds: the stream to "+x.addr+" ended") && strings.Contains(d, "cp.elsewhere")
		})
		if strings.Contains(x.p.stderr.String(), "rate-limit rules from xDS applied") {
			t.Fatal("rules applied from a server whose certificate is not for server_name")
		}
	})

	t.Run("mutual TLS", func(t *testing.T) {
		clientCA := testcerts.NewCA(t, "xds client CA")
		client := clientCA.Client(t, "floodgate")
		x := startXDSTLS(t, &tls.Config{
			Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12,
			ClientCAs: clientCA.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
		}, `{ca: "{{ca.pem}}", cert: "{{client.crt}}", key: "{{client.key}}"}`,
			map[string][]byte{"ca.pem": ca.PEM, "client.crt": client.CertPEM, "client.key": client.KeyPEM})
		x.p.waitLog(`rate-limit rules from xDS applied.*"version":"1"`)
		x.rulesHold(t, "a")
	})

	t.Run("mutual TLS without a client certificate", func(t *testing.T) {
		clientCA := testcerts.NewCA(t, "xds client CA")
		x := startXDSTLS(t, &tls.Config{
			Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12,
			ClientCAs: clientCA.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
		}, `{ca: "{{ca.pem}}"}`, map[string][]byte{"ca.pem": ca.PEM})
		x.p.waitFor("/readyz to say the stream ended", func() bool {
			return strings.Contains(x.detail(t), "rls.xds: the stream to "+x.addr+" ended")
		})
		if strings.Contains(x.p.stderr.String(), "rate-limit rules from xDS applied") {
			t.Fatal("rules applied from a server that requires a client certificate, without one")
		}
	})

	t.Run("a server of another CA", func(t *testing.T) {
		rogue := testcerts.NewCA(t, "rogue CA")
		x := startXDSTLS(t, &tls.Config{Certificates: []tls.Certificate{rogue.Server(t, "cp").TLS(t)}, MinVersion: tls.VersionTLS12},
			`{ca: "{{ca.pem}}"}`, map[string][]byte{"ca.pem": ca.PEM})
		x.p.waitFor("/readyz to say why the server is not trusted", func() bool {
			d := x.detail(t)
			return strings.Contains(d, "rls.xds: the stream to "+x.addr+" ended") && strings.Contains(d, "certificate signed by unknown authority")
		})
		if strings.Contains(x.p.stderr.String(), "rate-limit rules from xDS applied") {
			t.Fatal("rules applied from a server the CA does not sign")
		}
		// No rules: every descriptor is allowed.
		for range 3 {
			if x.ask(t, "a") != rlsv3.RateLimitResponse_OK {
				t.Fatal("a descriptor limited with no rules received")
			}
		}

		// A CA file that does not parse is refused, the running one
		// stays; the rogue CA, once written, is trusted from the next
		// connection on.
		testcerts.Write(t, x.dir, "ca.pem", []byte("not a certificate\n"))
		x.p.waitLog(`"level":"ERROR","msg":"xDS client TLS files refused; new connections use the running ones".*rls.xds.tls.ca: .*holds no PEM CERTIFICATE block`)
		testcerts.Write(t, x.dir, "ca.pem", rogue.PEM)
		x.p.waitLog(`"msg":"xDS client TLS files reloaded"`)
		x.p.waitLog(`rate-limit rules from xDS applied.*"version":"1"`)
		x.p.waitFor("/readyz to be clear", func() bool { return x.detail(t) == "" })
		x.rulesHold(t, "b")
	})
}
