package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// serveRLSWith starts floodgate serve with rls.listen and a rule
// directory of one domain; extra is added to the rls block.
func serveRLSWith(t *testing.T, extra string, args ...string) (p *proc, rlsAddr string) {
	t.Helper()
	f := newFixture(t, nil)
	rlsAddr, rules := freeAddr(t), filepath.Join(f.dir, "rules")
	if err := os.Mkdir(rules, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rules, "edge.yaml"), []byte(rlsRules(1)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.write(strings.NewReplacer("{{RLS}}", rlsAddr, "{{RULES}}", rules).Replace(rlsConfig) + extra)
	return f.serve(args...), rlsAddr
}

func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// The RLS listener answers grpc.health.v1 (SERVING once the store
// answers, overall and by the service's name; NOT_SERVING once it drains)
// and server reflection.
func TestServeRLSHealthAndReflection(t *testing.T) {
	t.Parallel()
	p, addr := serveRLSWith(t, "")
	conn := dialPlain(t, addr)
	hc := healthpb.NewHealthClient(conn)
	for _, name := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		p.waitFor("health of "+name+" to be SERVING", func() bool {
			resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			return err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING
		})
	}
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "no.such.Service"}); err == nil {
		t.Error("health of an unknown service answered")
	}

	rc, err := reflectpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, without %s", names, want)
		}
	}
	rc.CloseSend()
	if _, err := rc.Recv(); err != io.EOF {
		t.Fatalf("reflection stream ended with %v", err)
	}

	// A watcher, as a load balancer holds one, hears NOT_SERVING when
	// SIGTERM starts the drain.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := w.Recv(); err != nil || st.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch began with %v, %v", st, err)
	}
	p.signal(syscall.SIGTERM)
	st, err := w.Recv()
	if err != nil || st.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch during the drain: %v, %v", st, err)
	}
	cancel() // the drain waits for the watch to end
	if code := p.wait(); code != exitOK {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// With Redis stopped, ShouldRateLimit fails UNAVAILABLE, and health says
// NOT_SERVING until Redis answers again.
func TestServeRLSHealthFollowsTheStore(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	p, addr := serveRLSWith(t, "store: {type: redis, redis: {addrs: [\""+srv.Addr()+"\"], timeout: 200ms}}\n")
	hc := healthpb.NewHealthClient(dialPlain(t, addr))
	is := func(want healthpb.HealthCheckResponse_ServingStatus) func() bool {
		return func() bool {
			resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
			return err == nil && resp.Status == want
		}
	}
	p.waitFor("SERVING", is(healthpb.HealthCheckResponse_SERVING))
	srv.Pause()
	p.waitFor("NOT_SERVING with Redis paused", is(healthpb.HealthCheckResponse_NOT_SERVING))
	p.waitLog(`rate-limit store does not answer; health is NOT_SERVING`)
	// /readyz says so too.
	detail := p.readyzDetail
	if d := detail(); !strings.Contains(d, "rls: the store does not answer") {
		t.Errorf("/readyz detail %q with Redis paused", d)
	}
	srv.Resume()
	p.waitFor("SERVING with Redis back", is(healthpb.HealthCheckResponse_SERVING))
	p.waitFor("/readyz detail without the store", func() bool { return !strings.Contains(detail(), "rls: the store") })
}

// tlsFixture is a CA, the certificate and key of the service signed by it,
// and the rls.tls block that names their files.
type tlsFixture struct {
	ca                *testcerts.CA
	dir               string
	cert, key, cafile string
}

func newTLSFixture(t *testing.T, cn string) *tlsFixture {
	t.Helper()
	x := &tlsFixture{ca: testcerts.NewCA(t, "floodgate test CA"), dir: t.TempDir()}
	pair := x.ca.Server(t, cn)
	x.cert = testcerts.Write(t, x.dir, "rls.crt", pair.CertPEM)
	x.key = testcerts.Write(t, x.dir, "rls.key", pair.KeyPEM)
	x.cafile = testcerts.Write(t, x.dir, "clients.pem", x.ca.PEM)
	return x
}

func (x *tlsFixture) block(mtls bool) string {
	s := "  tls:\n    cert: \"" + x.cert + "\"\n    key: \"" + x.key + "\"\n"
	if mtls {
		s += "    client_ca: \"" + x.cafile + "\"\n"
	}
	return s
}

// askTLS calls ShouldRateLimit over TLS trusting x's CA, presenting
// client when it is not nil.
func askTLS(t *testing.T, addr string, roots *x509.CertPool, client *tls.Certificate) error {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
		{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "tls"}}},
	}})
	return err
}

// servedCN is the common name of the certificate the listener presents
// to a new connection.
func servedCN(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// With rls.tls the service answers over TLS only; a rotated certificate
// serves new connections without a restart, and a file that does not
// parse is refused, logged, and the running certificate stays.
func TestServeRLSTLS(t *testing.T) {
	t.Parallel()
	x := newTLSFixture(t, "first")
	p, addr := serveRLSWith(t, x.block(false))
	roots := x.ca.Pool()
	if err := askTLS(t, addr, roots, nil); err != nil {
		t.Fatalf("a call over TLS: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rlsv3.NewRateLimitServiceClient(dialPlain(t, addr)).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a plaintext call to the TLS listener: %v, want UNAVAILABLE", err)
	}
	if err := askTLS(t, addr, testcerts.NewCA(t, "another CA").Pool(), nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("a client that does not trust the certificate: %v, want UNAVAILABLE", err)
	}
	if cn := servedCN(t, addr, roots); cn != "first" {
		t.Fatalf("serving %q, want first", cn)
	}

	// Rotation: the key first, then the certificate, each by a rename.
	// In between the pair does not match and is refused.
	second := x.ca.Server(t, "second")
	testcerts.Write(t, x.dir, "rls.key", second.KeyPEM)
	testcerts.Write(t, x.dir, "rls.crt", second.CertPEM)
	p.waitLog(`rate-limit service certificate reloaded.*CN=second`)
	if cn := servedCN(t, addr, roots); cn != "second" {
		t.Fatalf("serving %q after the rotation, want second", cn)
	}
	if err := askTLS(t, addr, roots, nil); err != nil {
		t.Fatalf("a call after the rotation: %v", err)
	}

	// A certificate file that is not PEM: refused, logged, and the
	// second certificate still serves.
	testcerts.Write(t, x.dir, "rls.crt", []byte("-----BEGIN CERTIFICATE-----\ntruncated"))
	p.waitLog(`rate-limit service TLS files refused; the running certificate stays.*rls.tls.cert.*holds no PEM CERTIFICATE block`)
	if cn := servedCN(t, addr, roots); cn != "second" {
		t.Fatalf("serving %q after a broken file, want second", cn)
	}
	if err := askTLS(t, addr, roots, nil); err != nil {
		t.Fatalf("a call after a broken file: %v", err)
	}

	// Fixed again: the third certificate serves.
	third := x.ca.Server(t, "third")
	testcerts.Write(t, x.dir, "rls.key", third.KeyPEM)
	testcerts.Write(t, x.dir, "rls.crt", third.CertPEM)
	p.waitLog(`rate-limit service certificate reloaded.*CN=third`)
	if cn := servedCN(t, addr, roots); cn != "third" {
		t.Fatalf("serving %q after the fix, want third", cn)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != exitOK {
		t.Fatalf("exit %d after SIGTERM", code)
	}
}

// With rls.tls.client_ca every client needs a certificate signed by it.
func TestServeRLSMutualTLS(t *testing.T) {
	t.Parallel()
	x := newTLSFixture(t, "rls")
	p, addr := serveRLSWith(t, x.block(true))
	roots := x.ca.Pool()
	envoy := x.ca.Client(t, "envoy").TLS(t)
	if err := askTLS(t, addr, roots, &envoy); err != nil {
		t.Fatalf("a client with a certificate of client_ca: %v", err)
	}
	if err := askTLS(t, addr, roots, nil); err == nil {
		t.Fatal("a client without a certificate was answered")
	}
	stranger := testcerts.NewCA(t, "another CA").Client(t, "stranger").TLS(t)
	if err := askTLS(t, addr, roots, &stranger); err == nil {
		t.Fatal("a client with a certificate of another CA was answered")
	}

	// A new client CA applies to new connections without a restart.
	newCA := testcerts.NewCA(t, "new client CA")
	testcerts.Write(t, x.dir, "clients.pem", newCA.PEM)
	p.waitLog(`rate-limit service certificate reloaded`)
	renewed := newCA.Client(t, "envoy").TLS(t)
	if err := askTLS(t, addr, roots, &renewed); err != nil {
		t.Fatalf("a client of the new client CA: %v", err)
	}
	if err := askTLS(t, addr, roots, &envoy); err == nil {
		t.Fatal("a client of the replaced client CA was answered")
	}
}

// With --watch=false the TLS files are read again at SIGHUP.
func TestServeRLSTLSReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	x := newTLSFixture(t, "first")
	p, addr := serveRLSWith(t, x.block(false), "--watch=false")
	roots := x.ca.Pool()
	if cn := servedCN(t, addr, roots); cn != "first" {
		t.Fatalf("serving %q, want first", cn)
	}
	second := x.ca.Server(t, "second")
	testcerts.Write(t, x.dir, "rls.key", second.KeyPEM)
	testcerts.Write(t, x.dir, "rls.crt", second.CertPEM)
	p.signal(syscall.SIGHUP)
	p.waitLog(`rate-limit service certificate reloaded.*CN=second`)
	if cn := servedCN(t, addr, roots); cn != "second" {
		t.Fatalf("serving %q after SIGHUP, want second", cn)
	}
}

// check refuses a key that is not the certificate's, at its line, as a
// user runs it.
func TestCheckRLSTLS(t *testing.T) {
	t.Parallel()
	x := newTLSFixture(t, "rls")
	otherKey := testcerts.Write(t, x.dir, "other.key", x.ca.Server(t, "other").KeyPEM)
	path := writeConfig(t, "rls.yaml", "rls:\n  listen: \":8081\"\n  tls:\n    cert: \""+x.cert+"\"\n    key: \""+otherKey+"\"\n")
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitFailure || stdout != "" {
		t.Fatalf("exit %d, stdout %q; want %d and nothing", code, stdout, exitFailure)
	}
	want := path + `:5: rls.tls.key: "` + otherKey + `": the private key does not match the certificate's public key` + "\n"
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
	good := writeConfig(t, "good.yaml", "rls:\n  listen: \":8081\"\n"+x.block(true))
	if stdout, stderr, code := floodgate(t, "check", "-c", good); code != exitOK {
		t.Fatalf("check of a valid rls.tls: exit %d\n%s%s", code, stdout, stderr)
	}
}
