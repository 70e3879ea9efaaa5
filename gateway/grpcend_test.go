package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/upstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// streamService is a grpc-go upstream whose StreamingOutputCall sends
// one message, says so on sent, and then hangs until its call ends, or
// (fail) ends it with that status.
type streamService struct {
	*testService
	sent chan struct{}
	fail codes.Code
}

func (s *streamService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream testpb.TestService_StreamingOutputCallServer) error {
	s.seen(stream.Context())
	if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("first")}}); err != nil {
		return err
	}
	s.sent <- struct{}{}
	if s.fail != codes.OK {
		return status.Error(s.fail, "failed after a message")
	}
	<-stream.Context().Done()
	return stream.Context().Err()
}

// startStreamGRPC serves svc in clear on a free port and returns its
// address and the server.
func startStreamGRPC(t *testing.T, svc testpb.TestServiceServer) (string, *grpc.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	testpb.RegisterTestServiceServer(s, svc)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String(), s
}

// resettingH2C is an upstream in HTTP/2 clear that answers a gRPC call's
// head and one empty message, then resets the stream.
func resettingH2C(t *testing.T) string {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Write([]byte{0, 0, 0, 0, 0})
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func breakerOf(t *testing.T, h *harness, route string) BreakerStatus {
	t.Helper()
	for _, b := range h.gw.Breakers() {
		if b.Route == route {
			return b
		}
	}
	t.Fatalf("no breaker on route %s", route)
	return BreakerStatus{}
}

// A gRPC call whose upstream breaks off after the answer's head (killed,
// the stream reset, silent past idle_timeout) ends with UNAVAILABLE in
// the trailers, not with a reset the client reads as INTERNAL; the
// breaker counts it as a failure and the access log gives the status
// sent.
func TestGRPCUpstreamBrokeOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, kind, says string
	}{
		{"killed", "body_broken", ""},
		{"reset", "body_broken", "INTERNAL_ERROR"},
		{"idle", "body_idle", "response body idle for too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &streamService{testService: newTestService(), sent: make(chan struct{}, 1)}
			addr, srv := startStreamGRPC(t, svc)
			up := "http://" + addr
			if tc.name == "reset" {
				up = resettingH2C(t)
			}
			file := filepath.Join(t.TempDir(), "access.log")
			h := newH2Harness(t, `
admin: {listen: ""}
server: {access_log: "`+file+`"}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, idle_timeout: 200ms}
    breaker: {enabled: true, min_calls: 100}
`, up, nil)
			c := h.grpcClient()
			var err error
			if tc.name == "reset" {
				_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
			} else {
				stream, serr := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
				if serr != nil {
					t.Fatal(serr)
				}
				m, rerr := stream.Recv()
				if rerr != nil || string(m.GetPayload().GetBody()) != "first" {
					t.Fatalf("first message: %v, %v", m, rerr)
				}
				<-svc.sent
				if tc.name == "killed" {
					srv.Stop()
				}
				_, err = stream.Recv()
			}
			st, _ := status.FromError(err)
			if st.Code() != codes.Unavailable || !strings.HasPrefix(st.Message(), "upstream broke off: ") ||
				!strings.Contains(st.Message(), tc.says) {
				t.Fatalf("the call ended with %v; want UNAVAILABLE, upstream broke off: ...%s", err, tc.says)
			}
			if b := breakerOf(t, h, "grpc"); b.Calls != 1 || b.Failures != 1 {
				t.Errorf("the breaker counted %d calls, %d failures; want 1, 1", b.Calls, b.Failures)
			}
			l := readAccess(t, file, 1)[0]
			if l.Status != 200 || l.GRPCStatus == nil || *l.GRPCStatus != 14 || l.Error != tc.kind {
				t.Errorf("access log: status %d, grpc_status %v, error %q; want 200, 14, %s", l.Status, l.GRPCStatus, l.Error, tc.kind)
			}
			if n := counterValue(t, h, "gateway_grpc_responses_total", map[string]string{"route": "grpc", "grpc_status": "UNAVAILABLE"}); n != 1 {
				t.Errorf("%v calls counted UNAVAILABLE, want 1", n)
			}
		})
	}
}

// The same break on a request that is not gRPC still resets the stream:
// only a gRPC client reads a status from the trailers.
func TestH2BrokeOffNotGRPC(t *testing.T) {
	t.Parallel()
	h := newH2Harness(t, strings.ReplaceAll(grpcRoute, "PROTO", "h2c"), resettingH2C(t), nil)
	tr := h2cClient()
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", h.srv.URL+"/grpc.testing.TestService/UnaryCall", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("the body ended cleanly, trailers %v; want it broken off", resp.Trailer)
	}
}

// grpcCall sends a gRPC request by hand, with a grpc-timeout a grpc-go
// client would keep itself, and returns the answer with its body read.
func grpcCall(t *testing.T, h *harness, path, timeout string) (*http.Response, []byte) {
	t.Helper()
	tr := h2cClient()
	defer tr.CloseIdleConnections()
	// A bound of the test's own, so that a gateway that does not keep to
	// the grpc-timeout fails the test rather than hangs it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+path, bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", timeout)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: the body broke off after %d bytes: %v", path, len(body), err)
	}
	return resp, body
}

// A call whose grpc-timeout runs out ends DEADLINE_EXCEEDED: in the
// trailers once the answer has begun, trailers-only before. Either way it
// is the client's deadline, not the upstream's failure: the breaker and
// passive ejection count nothing.
func TestGRPCDeadlineNotAFailure(t *testing.T) {
	t.Parallel()
	// An upstream that ignores the grpc-timeout: the gateway's own timer
	// ends the call.
	mid := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Write([]byte{0, 0, 0, 0, 0})
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	mid.Config.Protocols = &p
	mid.Start()
	t.Cleanup(mid.Close)
	before, cancelled, _ := slowH2C(t)
	// And a grpc-go upstream, which keeps the grpc-timeout too.
	svc := newTestService()
	svc.slow = true
	addr := startGRPC(t, svc, nil)

	file := filepath.Join(t.TempDir(), "access.log")
	h := newH2Harness(t, `
admin: {listen: ""}
server: {access_log: "`+file+`"}
routes:
  - id: mid
    match: {path: /mid/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, eject: {consecutive_failures: 1}}
    breaker: {enabled: true, min_calls: 1}
  - id: before
    match: {path: /before/**}
    upstream: {targets: ["`+before+`"], protocol: h2c, timeout: 1h, eject: {consecutive_failures: 1}}
    breaker: {enabled: true, min_calls: 1}
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["http://`+addr+`"], protocol: h2c, timeout: 1h, eject: {consecutive_failures: 1}}
    breaker: {enabled: true, min_calls: 1}
`, mid.URL, nil)

	resp, body := grpcCall(t, h, "/mid/svc/M", "200m")
	if resp.StatusCode != 200 || len(body) != 5 {
		t.Fatalf("mid-stream: %d, %d bytes", resp.StatusCode, len(body))
	}
	if resp.Trailer.Get("Grpc-Status") != "4" || resp.Trailer.Get("Grpc-Message") != "the call's grpc-timeout ran out" {
		t.Fatalf("mid-stream: trailers %v, want grpc-status 4", resp.Trailer)
	}

	resp, _ = grpcCall(t, h, "/before/svc/M", "200m")
	if resp.Header.Get("Grpc-Status") != "4" {
		t.Fatalf("before the head: %v, want grpc-status 4", resp.Header)
	}
	waitCancelled(t, cancelled)

	resp, _ = grpcCall(t, h, "/grpc.testing.TestService/UnaryCall", "200m")
	if gs := cmpOr(resp.Trailer.Get("Grpc-Status"), resp.Header.Get("Grpc-Status")); gs != "4" {
		t.Fatalf("grpc-go upstream: %v %v, want grpc-status 4", resp.Header, resp.Trailer)
	}

	for _, route := range []string{"mid", "before", "grpc"} {
		if b := breakerOf(t, h, route); b.Failures != 0 || b.State != "CLOSED" {
			t.Errorf("%s: the breaker counted %d failures and is %s", route, b.Failures, b.State)
		}
	}
	for _, route := range []string{"before", "grpc"} {
		for _, r := range h.gw.Routes() {
			if r.Route == route && (r.Targets[0].State != upstream.StateHealthy || r.Targets[0].ConsecutiveFailures != 0) {
				t.Errorf("%s: target %+v", route, r.Targets[0])
			}
		}
	}
	for i, l := range readAccess(t, file, 3) {
		if l.GRPCStatus == nil || *l.GRPCStatus != 4 || l.Error != "grpc_deadline" && i < 2 {
			t.Errorf("line %d: grpc_status %v, error %q; want 4, grpc_deadline", i, l.GRPCStatus, l.Error)
		}
	}
	if strings.Contains(h.log.String(), `"msg":"upstream failed"`) {
		t.Errorf("a deadline was logged as the upstream's failure:\n%s", h.log.String())
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// An upstream that answers 200 with a grpc-status saying it failed
// (UNAVAILABLE, INTERNAL, UNKNOWN, DATA_LOSS, DEADLINE_EXCEEDED), in a
// trailers-only head or in the trailers after a body, fails the call for
// the breaker and counts as a 5xx for consecutive_5xx; the application's
// own statuses (NOT_FOUND, RESOURCE_EXHAUSTED) do not.
func TestGRPCStatusJudged(t *testing.T) {
	t.Parallel()
	svc := &streamService{testService: newTestService(), sent: make(chan struct{}, 1), fail: codes.DataLoss}
	addr, _ := startStreamGRPC(t, svc)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, eject: {consecutive_5xx: 3, base_time: 1h, max_time: 1h}}
    breaker: {enabled: true, min_calls: 4, failure_rate: 0.6, window: 60s}
    fallback: {status: 503, code: closed_for_now}
responses:
  closed_for_now: "Closed for now"
`, "http://"+addr, nil)
	c := h.grpcClient()
	unary := func(code codes.Code) error {
		t.Helper()
		req := &testpb.SimpleRequest{}
		if code != codes.OK {
			req.ResponseStatus = &testpb.EchoStatus{Code: int32(code), Message: "from the upstream"}
		}
		_, err := c.UnaryCall(context.Background(), req)
		return err
	}
	check := func(step string, failures int64, fives int) {
		t.Helper()
		if b := breakerOf(t, h, "grpc"); b.Failures != failures {
			t.Errorf("%s: the breaker counted %d failures in %d calls, want %d", step, b.Failures, b.Calls, failures)
		}
		if got := targetStatus(t, h.gw, "grpc", "http://"+addr).Consecutive5xx; got != fives {
			t.Errorf("%s: %d 5xx in a row, want %d", step, got, fives)
		}
	}
	for _, code := range []codes.Code{codes.NotFound, codes.ResourceExhausted} {
		wantStatus(t, unary(code), code, "from the upstream")
		check(code.String(), 0, 0)
	}
	wantStatus(t, unary(codes.Unavailable), codes.Unavailable, "from the upstream")
	check("UNAVAILABLE", 1, 1)
	if err := unary(codes.OK); err != nil {
		t.Fatal(err)
	}
	check("OK", 1, 0) // an OK ends the run of 5xx
	wantStatus(t, unary(codes.Internal), codes.Internal, "from the upstream")
	check("INTERNAL", 2, 1)
	wantStatus(t, unary(codes.Unknown), codes.Unknown, "from the upstream")
	check("UNKNOWN", 3, 2)

	// DATA_LOSS in the trailers, after a message.
	stream, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	wantStatus(t, err, codes.DataLoss, "failed after a message")
	check("DATA_LOSS", 4, 0) // the third in a row ejected the target, which resets the count
	if s := targetStatus(t, h.gw, "grpc", "http://"+addr); s.State != upstream.StateEjected {
		t.Errorf("after 3 failing statuses in a row the target is %s", s.State)
	}
	if b := breakerOf(t, h, "grpc"); b.State != "CLOSED" {
		t.Fatalf("4 failures in 7 calls opened the breaker: %+v", b)
	}

	// A DEADLINE_EXCEEDED of the upstream's own (the call had no
	// grpc-timeout) is its failure: 5 in 8 opens the breaker.
	wantStatus(t, unary(codes.DeadlineExceeded), codes.DeadlineExceeded, "from the upstream")
	if b := breakerOf(t, h, "grpc"); b.State != "OPEN" {
		t.Fatalf("after 5 failures in 8 calls: %+v", b)
	}
	calls := svc.calls.Load()
	wantStatus(t, unary(codes.OK), codes.Unavailable, "Closed for now")
	if n := svc.calls.Load(); n != calls {
		t.Errorf("the open breaker let a call through")
	}

	// The statuses sent, by name; the gateway's own answers too.
	err = h.grpcConn().Invoke(context.Background(), "/other.Service/Call", &testpb.Empty{}, &testpb.Empty{})
	wantStatus(t, err, codes.Unimplemented, "")
	for _, tc := range []struct {
		route, status string
		want          float64
	}{
		{"grpc", "OK", 1},
		{"grpc", "NOT_FOUND", 1},
		{"grpc", "RESOURCE_EXHAUSTED", 1},
		{"grpc", "UNAVAILABLE", 2}, // the upstream's, and the fallback
		{"grpc", "INTERNAL", 1},
		{"grpc", "UNKNOWN", 1},
		{"grpc", "DATA_LOSS", 1},
		{"grpc", "DEADLINE_EXCEEDED", 1},
		{"", "UNIMPLEMENTED", 1},
	} {
		if n := counterValue(t, h, "gateway_grpc_responses_total", map[string]string{"route": tc.route, "grpc_status": tc.status}); n != tc.want {
			t.Errorf("route %q, %s: %v, want %v", tc.route, tc.status, n, tc.want)
		}
	}
	if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "grpc", "code": "200"}); n != 8 {
		t.Errorf("%v proxied calls counted 200, want 8", n)
	}
}

func TestGRPCCodeIndex(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]int{
		"0": 0, "4": 4, "14": 14, "16": 16,
		"": grpcOther, "17": grpcOther, "01": grpcOther, "-1": grpcOther, "x": grpcOther, "100": grpcOther,
	} {
		if got := grpcCodeIndex(v); got != want {
			t.Errorf("grpcCodeIndex(%q) = %d, want %d", v, got, want)
		}
	}
}

// A request stream that fails on the client's side under the answer (a
// client silent past server.body_timeout, a stream over
// server.max_body_bytes) is the client's fault, not the upstream's: the
// call ends with the status the gateway answers that with (the request
// stream's, not "upstream broke off"), and the breaker, passive ejection
// and the upstream failure log count nothing.
func TestGRPCClientStreamFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, server, kind string
		code               codes.Code
		says               string
	}{
		{"silent", "body_timeout: 300ms", "request_timeout", codes.DeadlineExceeded, "the request stream was silent for server.body_timeout"},
		{"too_large", "max_body_bytes: 1000", "body_too_large", codes.ResourceExhausted, "the request stream went over server.max_body_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startGRPC(t, newTestService(), nil)
			file := filepath.Join(t.TempDir(), "access.log")
			h := newH2Harness(t, `
admin: {listen: ""}
server: {access_log: "`+file+`", `+tc.server+`}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, eject: {consecutive_5xx: 2}}
    breaker: {enabled: true, min_calls: 2}
`, "http://"+addr, nil)
			c := h.grpcClient()
			for i := 0; i < 2; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				stream, err := c.FullDuplexCall(ctx)
				if err != nil {
					t.Fatal(err)
				}
				msg := &testpb.StreamingOutputCallRequest{
					ResponseParameters: []*testpb.ResponseParameters{{Size: 3}},
					Payload:            &testpb.Payload{Body: bytes.Repeat([]byte{'p'}, 600)},
				}
				if err := stream.Send(msg); err != nil {
					t.Fatal(err)
				}
				if m, err := stream.Recv(); err != nil || len(m.GetPayload().GetBody()) != 3 {
					t.Fatalf("call %d: first reply %v, %v", i, m, err)
				}
				if tc.name == "too_large" {
					// The second message takes the stream past 1000 bytes.
					_ = stream.Send(msg)
				}
				_, err = stream.Recv()
				cancel()
				if st, _ := status.FromError(err); st.Code() != tc.code || st.Message() != tc.says {
					t.Fatalf("call %d ended with %v; want %v, %q", i, err, tc.code, tc.says)
				}
			}
			if b := breakerOf(t, h, "grpc"); b.Failures != 0 || b.State != "CLOSED" {
				t.Errorf("the breaker counted %d failures and is %s", b.Failures, b.State)
			}
			for _, r := range h.gw.Routes() {
				if r.Route == "grpc" && (r.Targets[0].State != upstream.StateHealthy || r.Targets[0].ConsecutiveFailures != 0) {
					t.Errorf("target %+v", r.Targets[0])
				}
			}
			for i, l := range readAccess(t, file, 2) {
				if l.GRPCStatus == nil || *l.GRPCStatus != int(tc.code) || l.Error != tc.kind {
					t.Errorf("line %d: grpc_status %v, error %q; want %d, %s", i, l.GRPCStatus, l.Error, tc.code, tc.kind)
				}
			}
			if strings.Contains(h.log.String(), `"msg":"upstream failed"`) {
				t.Errorf("the client's fault was logged as the upstream's:\n%s", h.log.String())
			}
		})
	}
}

// A gRPC call the client cancels is logged as HTTP requests whose
// client went away are, 499, with grpc_status 1 CANCELLED: whether it
// went before the answer's head or in the middle of a stream.
func TestGRPCClientCancelled(t *testing.T) {
	t.Parallel()
	svc := newTestService()
	svc.slow = true
	addr := startGRPC(t, svc, nil)
	file := filepath.Join(t.TempDir(), "access.log")
	h := newH2Harness(t, `
admin: {listen: ""}
server: {access_log: "`+file+`"}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, timeout: 1h}
    breaker: {enabled: true, min_calls: 1}
`, "http://"+addr, nil)
	c := h.grpcClient()

	// Before the head: the upstream holds the unary call until it is
	// cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for svc.calls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call did not reach the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("unary call: %v", err)
	}
	select {
	case <-svc.cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's call was not cancelled")
	}
	l := readAccess(t, file, 1)[0]
	if l.Status != upstream.StatusClientClosed || l.GRPCStatus == nil || *l.GRPCStatus != 1 || l.Error != "" {
		t.Errorf("before the head: status %d, grpc_status %v, error %q; want 499, 1, none", l.Status, l.GRPCStatus, l.Error)
	}

	// In the middle of a stream.
	ctx, cancel = context.WithCancel(context.Background())
	stream, err := c.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{Size: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	l = readAccess(t, file, 2)[1]
	if l.Status != upstream.StatusClientClosed || l.GRPCStatus == nil || *l.GRPCStatus != 1 || l.Error != "" {
		t.Errorf("mid-stream: status %d, grpc_status %v, error %q; want 499, 1, none", l.Status, l.GRPCStatus, l.Error)
	}
	if b := breakerOf(t, h, "grpc"); b.Failures != 0 {
		t.Errorf("the breaker counted %d failures", b.Failures)
	}
	if n := counterValue(t, h, "gateway_grpc_responses_total", map[string]string{"route": "grpc", "grpc_status": "CANCELLED"}); n != 2 {
		t.Errorf("%v calls counted CANCELLED, want 2", n)
	}
}
