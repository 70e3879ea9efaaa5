package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// serveRLSWith starts floodgate serve with rls.listen and a rule
// directory of one domain; extra is added to the rls block.
func serveRLSWith(t *testing.T, extra string) (p *proc, rlsAddr string) {
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
	return f.serve(), rlsAddr
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
	srv.Resume()
	p.waitFor("SERVING with Redis back", is(healthpb.HealthCheckResponse_SERVING))
}
