package gateway

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/testcerts"
	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// testService is a grpc-go upstream: UnaryCall echoes its payload with a
// header and a trailer of its own, or fails with the status it is asked
// for, or (slow) waits until its call is cancelled; FullDuplexCall answers
// each message with one of the size asked; EmptyCall answers.
type testService struct {
	testpb.UnimplementedTestServiceServer
	calls     atomic.Int64
	slow      bool
	cancelled chan error // slow calls' ends
	mu        sync.Mutex
	md        metadata.MD // the last call's
}

func newTestService() *testService { return &testService{cancelled: make(chan error, 16)} }

func (s *testService) seen(ctx context.Context) {
	s.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.md = md
	s.mu.Unlock()
}

func (s *testService) lastMD() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.md
}

func (s *testService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.seen(ctx)
	if s.slow {
		<-ctx.Done()
		s.cancelled <- ctx.Err()
		return nil, ctx.Err()
	}
	if st := req.GetResponseStatus(); st.GetCode() != 0 {
		return nil, status.Error(codes.Code(st.GetCode()), st.GetMessage())
	}
	grpc.SetHeader(ctx, metadata.Pairs("x-up-header", "from-header"))
	grpc.SetTrailer(ctx, metadata.Pairs("x-up-trailer", "from-trailer"))
	return &testpb.SimpleResponse{Payload: req.GetPayload()}, nil
}

func (s *testService) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.seen(ctx)
	return &testpb.Empty{}, nil
}

func (s *testService) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	s.seen(stream.Context())
	stream.SetTrailer(metadata.Pairs("x-stream-trailer", "done"))
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		size := req.GetResponseParameters()[0].GetSize()
		if err := stream.Send(&testpb.StreamingOutputCallResponse{
			Payload: &testpb.Payload{Body: bytes.Repeat([]byte{'x'}, int(size))},
		}); err != nil {
			return err
		}
	}
}

// startGRPC serves svc on a free port, with creds (nil: in clear).
func startGRPC(t *testing.T, svc testpb.TestServiceServer, creds credentials.TransportCredentials) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(s, svc)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// newH2Harness is newHarness with the gateway served over HTTP/1.1 and
// HTTP/2 in clear (prior knowledge), as gRPC clients reach it, and {{UP}}
// replaced by up; ca, if not nil, is the PEM upstream.tls.ca of the routes
// with https targets.
func newH2Harness(t *testing.T, yaml, up string, ca []byte) *harness {
	t.Helper()
	yaml = strings.ReplaceAll(yaml, "{{UP}}", up)
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if ca != nil {
		caFile := testcerts.Write(t, t.TempDir(), "ca.pem", ca)
		for i := range cfg.Routes {
			if u := &cfg.Routes[i].Upstream; u.Targets[0].Scheme == "https" {
				u.TLS = &config.UpstreamTLS{CA: caFile}
			}
		}
	}
	h := &harness{t: t, reg: prometheus.NewRegistry(), log: &syncWriter{b: &strings.Builder{}}, clock: newTestClock()}
	logger := slog.New(slog.NewJSONHandler(h.log, nil))
	h.gw, err = New(cfg, Options{Logger: logger, Registerer: h.reg, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewUnstartedServer(h.gw)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	h.srv.Config.Protocols = &p
	h.srv.Start()
	t.Cleanup(func() {
		h.srv.Close()
		h.gw.Close()
	})
	return h
}

// grpcClient is a TestService client of the harness's gateway.
func (h *harness) grpcClient() testpb.TestServiceClient {
	h.t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(h.srv.URL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// h2cClient is an HTTP/2 client in clear (prior knowledge), for requests
// a gRPC client would not send.
func h2cClient() *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{Protocols: &p}
}

// wantStatus checks a call's error is the gRPC status code with msg.
func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code || msg != "" && st.Message() != msg {
		t.Fatalf("error %v, want %v %q", err, code, msg)
	}
}

// pollLog waits for the gateway's log to hold all of want.
func pollLog(t *testing.T, h *harness, want ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		logs := h.log.String()
		missing := ""
		for _, w := range want {
			if !strings.Contains(logs, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log lacks %q:\n%s", missing, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const grpcRoute = `
admin: {listen: ""}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"], protocol: PROTO}
`

// Unary and bidirectional calls pass through a route of protocol h2c or
// h2, with the upstream's headers and trailers, and the upstream's own
// statuses (trailers-only) as it sent them.
func TestGRPCProxy(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "grpc CA")
	for _, tc := range []struct {
		proto string
		creds credentials.TransportCredentials
		ca    []byte
	}{
		{"h2c", nil, nil},
		{"h2", credentials.NewServerTLSFromCert(ptr(ca.Server(t, "upstream").TLS(t))), ca.PEM},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			svc := newTestService()
			addr := startGRPC(t, svc, tc.creds)
			scheme := "http://"
			if tc.proto == "h2" {
				scheme = "https://"
			}
			h := newH2Harness(t, strings.ReplaceAll(grpcRoute, "PROTO", tc.proto), scheme+addr, tc.ca)
			c := h.grpcClient()
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user-id", "alice")

			var hdr, trl metadata.MD
			resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("ping")}},
				grpc.Header(&hdr), grpc.Trailer(&trl))
			if err != nil {
				t.Fatal(err)
			}
			if string(resp.GetPayload().GetBody()) != "ping" {
				t.Fatalf("payload %q", resp.GetPayload().GetBody())
			}
			if got := hdr.Get("x-up-header"); len(got) != 1 || got[0] != "from-header" {
				t.Errorf("header metadata %v", hdr)
			}
			if len(hdr.Get("x-request-id")) != 1 {
				t.Errorf("no request id in the header metadata: %v", hdr)
			}
			if got := trl.Get("x-up-trailer"); len(got) != 1 || got[0] != "from-trailer" {
				t.Errorf("trailer metadata %v", trl)
			}
			md := svc.lastMD()
			if got := md.Get("x-user-id"); len(got) != 1 || got[0] != "alice" {
				t.Errorf("the upstream got metadata %v", md)
			}
			if len(md.Get("x-forwarded-for")) != 1 || len(md.Get("x-request-id")) != 1 {
				t.Errorf("the upstream got metadata %v", md)
			}

			// The upstream's own status, sent trailers-only, with a
			// message gRPC percent-encodes.
			_, err = c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{
				Code: int32(codes.FailedPrecondition), Message: "not yet: 100% ünready",
			}})
			wantStatus(t, err, codes.FailedPrecondition, "not yet: 100% ünready")

			// Each message is answered before the next is sent: the
			// request streams while the answer does, and each answer
			// message is passed on as it comes.
			stream, err := c.FullDuplexCall(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				if err := stream.Send(&testpb.StreamingOutputCallRequest{
					ResponseParameters: []*testpb.ResponseParameters{{Size: int32(i * 100)}},
				}); err != nil {
					t.Fatal(err)
				}
				m, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if len(m.GetPayload().GetBody()) != i*100 {
					t.Fatalf("message %d: %d bytes", i, len(m.GetPayload().GetBody()))
				}
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != io.EOF {
				t.Fatalf("after the last message: %v", err)
			}
			if got := stream.Trailer().Get("x-stream-trailer"); len(got) != 1 || got[0] != "done" {
				t.Errorf("stream trailer %v", stream.Trailer())
			}
			if n := svc.calls.Load(); n != 3 {
				t.Errorf("the upstream took %d calls, want 3", n)
			}
			if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "grpc", "code": "200"}); n != 3 {
				t.Errorf("%v requests counted with status 200, want 3", n)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// The gateway's own answers reach a gRPC client as statuses it reads: a
// limit's rejection RESOURCE_EXHAUSTED with the rate-limit fields, an
// unknown method UNIMPLEMENTED, an open breaker UNAVAILABLE. The key
// reads the call's metadata and its method (the path).
func TestGRPCAnswers(t *testing.T) {
	t.Parallel()
	svc := newTestService()
	addr := startGRPC(t, svc, nil)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: limited
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c}
    breaker: {enabled: true}
    fallback: {status: 503, code: closed_for_now}
    limits:
      - name: user
        key: [header:X-User-Id, path]
        rate: 1/min
        reject: {status: 429, code: slow_down}
responses:
  slow_down: "Slow down, 100% ünhurried"
  closed_for_now: "Closed for now"
`, "http://"+addr, nil)
	c := h.grpcClient()
	as := func(user string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-user-id", user)
	}
	if _, err := c.UnaryCall(as("a"), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	var hdr, trl metadata.MD
	_, err := c.UnaryCall(as("a"), &testpb.SimpleRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	wantStatus(t, err, codes.ResourceExhausted, "Slow down, 100% ünhurried")
	md := metadata.Join(hdr, trl)
	for k, want := range map[string]string{
		"ratelimit-policy":      `"user";q=1;w=60`,
		"x-ratelimit-limit":     "1",
		"x-ratelimit-remaining": "0",
	} {
		if got := md.Get(k); len(got) != 1 || got[0] != want {
			t.Errorf("metadata %s = %v, want %q (all: %v)", k, got, want, md)
		}
	}
	for _, k := range []string{"retry-after", "ratelimit", "x-ratelimit-reset", "x-request-id"} {
		if len(md.Get(k)) != 1 {
			t.Errorf("no %s in the metadata: %v", k, md)
		}
	}
	// Another method is another key, and so is another user.
	if _, err := c.EmptyCall(as("a"), &testpb.Empty{}); err != nil {
		t.Fatalf("another method: %v", err)
	}
	if _, err := c.UnaryCall(as("b"), &testpb.SimpleRequest{}); err != nil {
		t.Fatalf("another user: %v", err)
	}
	if n := svc.calls.Load(); n != 3 {
		t.Errorf("the upstream took %d calls, want 3", n)
	}
	// Metrics count the rejection by its HTTP status.
	if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "limited", "code": "429"}); n != 1 {
		t.Errorf("%v rejections counted as 429, want 1", n)
	}

	// Without the metadata the key needs: key_required.
	_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	wantStatus(t, err, codes.PermissionDenied, "The request lacks the value this route is limited by")

	// No route: the service's other methods are unknown to the gateway.
	err = h.grpcConn().Invoke(as("a"), "/other.Service/Call", &testpb.Empty{}, &testpb.Empty{})
	wantStatus(t, err, codes.Unimplemented, "No route matches this request")

	if err := h.gw.ForceBreaker("limited", "open", 0); err != nil {
		t.Fatal(err)
	}
	_, err = c.UnaryCall(as("c"), &testpb.SimpleRequest{})
	wantStatus(t, err, codes.Unavailable, "Closed for now")
	if n := svc.calls.Load(); n != 3 {
		t.Errorf("the upstream took %d calls, want 3", n)
	}
}

// grpcConn is a client connection to the harness's gateway.
func (h *harness) grpcConn() *grpc.ClientConn {
	h.t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(h.srv.URL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cc.Close() })
	return cc
}

// A store that fails a limit with on_error: deny answers UNAVAILABLE.
func TestGRPCLimiterUnavailable(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	svc := newTestService()
	addr := startGRPC(t, svc, nil)
	h := newH2Harness(t, `
admin: {listen: ""}
store: {type: redis, redis: {addrs: ["`+srv.Addr()+`"], timeout: 2s}}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c}
    limits: [{name: l, key: [ip], rate: 100/s, on_error: deny}]
`, "http://"+addr, nil)
	c := h.grpcClient()
	if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatalf("with Redis up: %v", err)
	}
	srv.Stop()
	_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
	wantStatus(t, err, codes.Unavailable, "The rate limiter is unavailable, try again later")
	if n := svc.calls.Load(); n != 1 {
		t.Errorf("the upstream took %d calls, want 1", n)
	}
}

// A gRPC request to a route of protocol http1 is refused with
// UNIMPLEMENTED, naming the route, before its limits and without an
// upstream call.
func TestGRPCOnHTTP1Route(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: legacy
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: l, key: [ip], rate: 1/min}]
`, up.URL, nil)
	c := h.grpcClient()
	for range 2 {
		_, err := c.EmptyCall(context.Background(), &testpb.Empty{})
		wantStatus(t, err, codes.Unimplemented,
			"route legacy proxies over HTTP/1.1 and cannot carry gRPC: it needs upstream.protocol h2c or h2")
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("the upstream took %d requests", n)
	}
	if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "legacy", "code": "501"}); n != 2 {
		t.Errorf("%v refusals counted as 501, want 2", n)
	}
	// Not gRPC, the same route proxies as ever.
	if resp := h.do("GET", "/grpc.testing.TestService/EmptyCall", nil, nil); resp.StatusCode != 200 || drain(resp) == "" {
		t.Fatalf("HTTP/1.1: %d", resp.StatusCode)
	}
}

// A client's deadline bounds the upstream exchange: the call ends
// DEADLINE_EXCEEDED and the upstream's call is cancelled.
func TestGRPCClientDeadline(t *testing.T) {
	t.Parallel()
	svc := newTestService()
	svc.slow = true
	addr := startGRPC(t, svc, nil)
	h := newH2Harness(t, strings.ReplaceAll(grpcRoute, "PROTO", "h2c"), "http://"+addr, nil)
	c := h.grpcClient()
	// Connections made first, so that the deadline is not spent before
	// the call reaches the upstream.
	if _, err := c.EmptyCall(context.Background(), &testpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
	wantStatus(t, err, codes.DeadlineExceeded, "")
	select {
	case err := <-svc.cancelled:
		if err == nil {
			t.Fatal("the upstream's call ended without its context")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's call was not cancelled")
	}
}

// slowH2C is an upstream in HTTP/2 clear that answers nothing until its
// request is cancelled, and says when it was.
func slowH2C(t *testing.T) (url string, cancelled chan struct{}, hits *atomic.Int64) {
	cancelled = make(chan struct{}, 16)
	hits = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/stream" {
			w.Write([]byte("first"))
			http.NewResponseController(w).Flush()
		}
		<-r.Context().Done()
		cancelled <- struct{}{}
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL, cancelled, hits
}

func waitCancelled(t *testing.T, cancelled chan struct{}) {
	t.Helper()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's request was not cancelled")
	}
}

// The gateway bounds a gRPC exchange by the request's grpc-timeout, or
// the route's timeout if sooner, whatever the client does: DEADLINE_EXCEEDED
// as a trailers-only answer, and the upstream's request is cancelled. A
// malformed grpc-timeout is INVALID_ARGUMENT, before any upstream call.
func TestGRPCTimeout(t *testing.T) {
	t.Parallel()
	up, cancelled, hits := slowH2C(t)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: patient
    match: {path: /patient/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, timeout: 1h}
  - id: hasty
    match: {path: /hasty/**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, timeout: 100ms}
`, up, nil)
	tr := h2cClient()
	defer tr.CloseIdleConnections()
	call := func(path, timeout string) *http.Response {
		t.Helper()
		// A bound of the test's own, so that a gateway that does not
		// keep to the grpc-timeout fails it rather than hangs it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+path, bytes.NewReader([]byte{0, 0, 0, 0, 0}))
		req.Header.Set("Content-Type", "application/grpc+proto")
		req.Header.Set("Te", "trailers")
		if timeout != "" {
			req.Header.Set("Grpc-Timeout", timeout)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(body) != 0 {
			t.Fatalf("%s: a body of %d bytes", path, len(body))
		}
		return resp
	}
	for _, tc := range []struct{ path, timeout string }{
		{"/patient/svc/M", "150m"}, // the grpc-timeout
		{"/hasty/svc/M", "1H"},     // the route's timeout
	} {
		resp := call(tc.path, tc.timeout)
		if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" || resp.Header.Get("Content-Type") != "application/grpc" {
			t.Fatalf("%s: %d %v", tc.path, resp.StatusCode, resp.Header)
		}
		if resp.Header.Get("Grpc-Message") != "The upstream service did not answer in time" {
			t.Errorf("%s: grpc-message %q", tc.path, resp.Header.Get("Grpc-Message"))
		}
		waitCancelled(t, cancelled)
	}
	if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": "patient", "code": "504"}); n != 1 {
		t.Errorf("%v timeouts counted as 504, want 1", n)
	}
	before := hits.Load()
	for _, bad := range []string{"soon", "100", "123456789S", "-1S", "1.5S"} {
		resp := call("/patient/svc/M", bad)
		if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "3" {
			t.Errorf("grpc-timeout %q: %d %v", bad, resp.StatusCode, resp.Header)
		}
	}
	if n := hits.Load(); n != before {
		t.Errorf("malformed grpc-timeouts reached the upstream %d times", n-before)
	}
	// A deadline of none left has passed already: DEADLINE_EXCEEDED at
	// once, with nothing sent upstream.
	for _, zero := range []string{"0S", "0n", "00000000H"} {
		resp := call("/patient/svc/M", zero)
		if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != "4" ||
			resp.Header.Get("Grpc-Message") != "the call's deadline had already passed (grpc-timeout 0)" {
			t.Errorf("grpc-timeout %q: %d %v", zero, resp.StatusCode, resp.Header)
		}
	}
	if n := hits.Load(); n != before {
		t.Errorf("grpc-timeouts of 0 reached the upstream %d times", n-before)
	}
}

// Protocol h2c and h2 to a target that speaks HTTP/1.1 alone: 502 (a gRPC
// client's UNAVAILABLE), and a log line that says so.
func TestH2ToHTTP1Target(t *testing.T) {
	t.Parallel()
	plain := newBackend(t, nil)
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(tlsUp.Close)
	roots := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsUp.Certificate().Raw})
	for _, tc := range []struct{ proto, up, says string }{
		{"h2c", plain.URL, `it answered the HTTP/2 preface with \"HTTP/1.1`},
		{"h2", tlsUp.URL, "TLS negotiated http/1.1, not h2"},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			h := newH2Harness(t, strings.ReplaceAll(grpcRoute, "PROTO", tc.proto), tc.up, roots)
			_, err := h.grpcClient().EmptyCall(context.Background(), &testpb.Empty{})
			wantStatus(t, err, codes.Unavailable, "The upstream service is unavailable")
			answerOf(t, h.do("GET", "/grpc.testing.TestService/EmptyCall", nil, nil), 502, "upstream_unavailable")
			pollLog(t, h, `"msg":"upstream failed"`, "the target did not speak HTTP/2", tc.says, `"kind":"not_http2"`)
		})
	}
}

// Requests other than gRPC go over HTTP/2 as well: a streamed body with
// its trailers, from an HTTP/1.1 client; upstream.timeout until the head
// and idle_timeout while the body streams, each cancelling the upstream's
// request.
func TestH2CProxyHTTP(t *testing.T) {
	t.Parallel()
	var te atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te.Store(r.Header.Values("Te"))
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("got "))
		http.NewResponseController(w).Flush()
		w.Write(body)
		w.Header().Set("X-Sum", "42")
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	slow, cancelled, _ := slowH2C(t)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: echo
    match: {path: /echo}
    upstream: {targets: ["`+srv.URL+`"], protocol: h2c}
  - id: slow
    match: {path: /**}
    upstream: {targets: ["{{UP}}"], protocol: h2c, timeout: 100ms, idle_timeout: 100ms}
`, slow, nil)
	resp := h.do("POST", "/echo", map[string]string{"Te": "trailers"}, strings.NewReader("hello"))
	if got := drain(resp); resp.StatusCode != 200 || got != "got hello" {
		t.Fatalf("%d %q", resp.StatusCode, got)
	}
	if resp.Trailer.Get("X-Sum") != "42" {
		t.Errorf("trailer %v", resp.Trailer)
	}
	// TE is hop by hop, but "trailers", which HTTP/2 allows, goes on.
	if got := te.Load().([]string); len(got) != 1 || got[0] != "trailers" {
		t.Errorf("the upstream got TE %q", got)
	}

	answerOf(t, h.do("GET", "/head", nil, nil), 504, "upstream_timeout")
	waitCancelled(t, cancelled)

	// A switch of protocols has no HTTP/2 form.
	answerOf(t, h.do("GET", "/echo", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, nil),
		502, "upstream_unavailable")

	resp = h.do("GET", "/stream", nil, nil)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "first" || err == nil {
		t.Fatalf("%d %q %v: want the first bytes, then the body broken off", resp.StatusCode, body, err)
	}
	waitCancelled(t, cancelled)
	pollLog(t, h, `"kind":"body_idle"`)
}

// The access log gives a gRPC request's status beside its HTTP one: the
// gateway's own, or the upstream's trailer.
func TestGRPCAccessLog(t *testing.T) {
	t.Parallel()
	svc := newTestService()
	addr := startGRPC(t, svc, nil)
	file := filepath.Join(t.TempDir(), "access.log")
	h := newH2Harness(t, `
admin: {listen: ""}
server: {access_log: "`+file+`"}
routes:
  - id: grpc
    match: {path: /grpc.testing.TestService/UnaryCall}
    upstream: {targets: ["{{UP}}"], protocol: h2c}
    limits: [{name: l, key: [route], rate: 2/min}]
  - id: legacy
    match: {path: /grpc.testing.TestService/**}
    upstream: {targets: ["{{UP}}"]}
`, "http://"+addr, nil)
	c := h.grpcClient()
	if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.NotFound)}})
	wantStatus(t, err, codes.NotFound, "")
	_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	wantStatus(t, err, codes.ResourceExhausted, "")
	_, err = c.EmptyCall(context.Background(), &testpb.Empty{})
	wantStatus(t, err, codes.Unimplemented, "")
	lines := readAccess(t, file, 4)
	for i, want := range []struct {
		status, grpc int
		outcome      string
	}{
		{200, 0, "admitted"},
		{200, int(codes.NotFound), "admitted"},
		{429, int(codes.ResourceExhausted), "limited"},
		{501, int(codes.Unimplemented), "grpc_refused"},
	} {
		l := lines[i]
		if l.Status != want.status || l.GRPCStatus == nil || *l.GRPCStatus != want.grpc || l.Outcome != want.outcome {
			t.Errorf("line %d: status %d, grpc_status %v, outcome %s; want %+v", i, l.Status, l.GRPCStatus, l.Outcome, want)
		}
	}
	// Not gRPC: no grpc_status.
	resp := h.do("GET", "/grpc.testing.TestService/EmptyCall", nil, nil)
	drain(resp)
	if l := readAccess(t, file, 5)[4]; l.GRPCStatus != nil {
		t.Errorf("an HTTP/1.1 request logged grpc_status %d", *l.GRPCStatus)
	}
}

// An HTTP/1.1 client's request body streams to an HTTP/2 upstream while
// the answer streams back: each piece is echoed before the next is sent.
func TestH2CFullDuplexFromHTTP1(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		w.WriteHeader(200)
		rc.Flush()
		buf := make([]byte, 64)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	h := newH2Harness(t, strings.ReplaceAll(grpcRoute, "PROTO", "h2c"), srv.URL, nil)

	// A bound of the test's own, so that a gateway that holds the answer
	// until the body ends fails the test rather than hangs it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) }) // the Transport waits on a body read
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/grpc.testing.TestService/Echo", pr)
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	for _, piece := range []string{"one", "two", "three"} {
		if _, err := io.WriteString(pw, piece); err != nil {
			t.Fatal(err)
		}
		n, err := io.ReadAtLeast(resp.Body, buf, len(piece))
		if err != nil || string(buf[:n]) != piece {
			t.Fatalf("echo of %q: %q, %v", piece, buf[:n], err)
		}
	}
	pw.Close()
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after the body: %q, %v", rest, err)
	}
}

// A route of protocol h2c checks its targets over HTTP/2 too: a target
// that speaks nothing else passes.
func TestH2CHealthChecks(t *testing.T) {
	t.Parallel()
	var checks atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checks.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	h := newH2Harness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /**}
    upstream:
      targets: ["{{UP}}"]
      protocol: h2c
      health: {path: /healthz, interval: 100ms, timeout: 90ms, healthy_after: 1, unhealthy_after: 3}
`, srv.URL, nil)
	deadline := time.Now().Add(5 * time.Second)
	for checks.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d checks reached the target", checks.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp := h.do("GET", "/x", nil, nil); resp.StatusCode != 200 || drain(resp) != "ok" {
		t.Fatalf("after its checks the target gets %d", resp.StatusCode)
	}
}

// BenchmarkRejectGRPC is BenchmarkReject's own_id for gRPC requests:
// the rejection sent as a trailers-only RESOURCE_EXHAUSTED.
func BenchmarkRejectGRPC(b *testing.B) {
	gw, err := New(mustParseB(b, `admin: {listen: ""}
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://127.0.0.1:1"], protocol: h2c}
    limits:
      - {name: user, key: ["header:X-User-Id"], algorithm: token_bucket, rate: 1/1h}
`), Options{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close()
	const users = 2000
	reqs := overLimit(gw, users)
	for _, r := range reqs {
		r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
		r.Header.Set("Content-Type", "application/grpc")
	}
	b.ReportAllocs()
	w := &rejectWriter{h: http.Header{}}
	i := 0
	for b.Loop() {
		clear(w.h)
		gw.ServeHTTP(w, reqs[i%users])
		i++
		if w.code != 200 || w.h["Grpc-Status"][0] != "8" {
			b.Fatal(w.code, w.h)
		}
	}
}
