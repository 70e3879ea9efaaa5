package gateway

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/upstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// upstream.health.grpc_service checks a grpc-go server with
// grpc.health.v1.Health/Check: a target whose service is NOT_SERVING goes
// out of rotation, and comes back when it is SERVING again. Two failed
// checks take a target out, so that one a loaded machine let time out
// does not: what is checked is what a check answers.
func TestGRPCHealthChecks(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, newTestService())
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	const svc = "grpc.testing.TestService"
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	up := "http://" + ln.Addr().String()
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream:
      targets: ["{{UP}}"]
      protocol: h2c
      health: {grpc_service: `+svc+`, interval: 300ms, timeout: 250ms, healthy_after: 1, unhealthy_after: 2}
  - id: server
    match: {path: /server/**}
    upstream:
      targets: ["{{UP}}"]
      protocol: h2c
      health: {grpc_service: "", interval: 300ms, timeout: 250ms, healthy_after: 1, unhealthy_after: 2}
  - id: unknown
    match: {path: /unknown/**}
    upstream:
      targets: ["{{UP}}"]
      protocol: h2c
      health: {grpc_service: no.such.Service, interval: 300ms, timeout: 250ms, healthy_after: 1, unhealthy_after: 2}
`, up, nil)
	checkIs := func(route, state, result string) {
		t.Helper()
		waitFor(t, route+" "+state+" after "+result, func() bool {
			ts := targetStatus(t, h.gw, route, up)
			return ts.State == state && ts.LastCheck != nil && strings.HasPrefix(ts.LastCheck.Result, result)
		})
	}
	client := h.grpcClient()
	checkIs("grpc", upstream.StateUnhealthy, "NOT_SERVING")
	_, err = client.EmptyCall(context.Background(), &testpb.Empty{})
	wantStatus(t, err, codes.Unavailable, "The upstream service is unavailable")

	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	checkIs("grpc", upstream.StateHealthy, "SERVING")
	if _, err := client.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatalf("with its target back: %v", err)
	}

	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	checkIs("grpc", upstream.StateUnhealthy, "NOT_SERVING")

	// "": the server's own health, which grpc-go's health server starts
	// as SERVING.
	checkIs("server", upstream.StateHealthy, "SERVING")
	checkIs("unknown", upstream.StateUnhealthy, "grpc-status 5: unknown service")
}
