package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservice "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/interop"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// grpc-go's interop suite (google.golang.org/grpc/interop) through the
// gateway: its test server as the upstream, its client cases as the
// client, over the listeners floodgate serve runs.

// interopLog is grpclog's logger in this package's tests. The interop
// package's cases report a failure with grpclog's Fatal, which would end
// the test binary with os.Exit(1) and no word of which case failed; here
// it fails the case that runs instead.
var interopLog = newInteropLogger()

// init, before any test uses gRPC: grpclog.SetLoggerV2 is not safe once
// gRPC runs.
func init() { grpclog.SetLoggerV2(interopLog) }

type interopLogger struct {
	grpclog.LoggerV2
	mu sync.Mutex
	// fail ends the goroutine of the case that runs with the Fatal's
	// message and does not return; nil while no case runs.
	fail func(msg string)
}

// newInteropLogger logs as grpclog's default logger does: errors to
// stderr, warnings and information too when GRPC_GO_LOG_SEVERITY_LEVEL
// asks for them, at GRPC_GO_LOG_VERBOSITY_LEVEL.
func newInteropLogger() *interopLogger {
	var info, warning io.Writer = io.Discard, io.Discard
	switch strings.ToLower(os.Getenv("GRPC_GO_LOG_SEVERITY_LEVEL")) {
	case "info":
		info, warning = os.Stderr, os.Stderr
	case "warning":
		warning = os.Stderr
	}
	v, _ := strconv.Atoi(os.Getenv("GRPC_GO_LOG_VERBOSITY_LEVEL"))
	return &interopLogger{LoggerV2: grpclog.NewLoggerV2WithVerbosity(info, warning, os.Stderr, v)}
}

func (l *interopLogger) Fatal(args ...any) { l.fatal(fmt.Sprint(args...)) }
func (l *interopLogger) Fatalf(format string, args ...any) {
	l.fatal(fmt.Sprintf(format, args...))
}
func (l *interopLogger) Fatalln(args ...any) {
	l.fatal(strings.TrimSuffix(fmt.Sprintln(args...), "\n"))
}

func (l *interopLogger) fatal(msg string) {
	// Some cases print their request whole, with a payload of up to
	// 270 KB.
	if len(msg) > 2000 {
		msg = fmt.Sprintf("%s... (%d bytes more)", msg[:2000], len(msg)-2000)
	}
	l.mu.Lock()
	fail := l.fail
	l.mu.Unlock()
	if fail == nil {
		// No case runs: gRPC itself gave up, as grpclog's logger would.
		l.LoggerV2.Fatal(msg)
	}
	fail(msg)
}

// failWith makes fail the Fatal of the case that runs, until restore
// puts back the one it replaced.
func (l *interopLogger) failWith(fail func(string)) (restore func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.fail
	l.fail = fail
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.fail = prev
	}
}

// run runs do, on t's goroutine, as t: a Fatal fails t with its message
// (t.Fatal ends the goroutine, so the os.Exit behind grpclog's Fatal is
// never reached).
func (l *interopLogger) run(t *testing.T, do func()) {
	defer l.failWith(func(msg string) { t.Fatal(msg) })()
	do()
}

// fatalOf runs do on a goroutine of its own and returns the message of
// the Fatal that ended it, or "" when it returned.
func (l *interopLogger) fatalOf(do func()) string {
	var msg string
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer l.failWith(func(m string) {
			msg = m
			runtime.Goexit()
		})()
		do()
	}()
	<-done
	return msg
}

// caseKey is the metadata that names the case a call belongs to: the
// interop client's connections add it to every call, for the upstream to
// tell the calls of one case from those of another that reach it late.
const caseKey = "x-interop-case"

// upstreamCall is a call the interop upstream took.
type upstreamCall struct {
	method   string
	testCase string // caseKey's value
	arrived  time.Time
	deadline time.Time  // zero: the call had none
	code     codes.Code // the status its handler ended it with
}

// upstreamCalls follows the calls the interop upstream takes of
// grpc.testing's services: how many are in flight, how each ended.
type upstreamCalls struct {
	mu       sync.Mutex
	inFlight int
	changed  chan struct{}  // closed, and replaced, when inFlight falls
	ended    []upstreamCall // not taken yet
}

func newUpstreamCalls() *upstreamCalls { return &upstreamCalls{changed: make(chan struct{})} }

// begin counts a call in flight; the function it returns ends it with
// the handler's error. The ORCA service's stream, which lives as long as
// the client's connection, is not followed.
func (u *upstreamCalls) begin(ctx context.Context, method string) func(error) {
	if !strings.HasPrefix(method, "/grpc.testing.") {
		return func(error) {}
	}
	c := upstreamCall{method: method, arrived: time.Now()}
	c.deadline, _ = ctx.Deadline()
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md[caseKey]) > 0 {
		c.testCase = md[caseKey][0]
	}
	u.mu.Lock()
	u.inFlight++
	u.mu.Unlock()
	return func(err error) {
		c.code = status.Code(err)
		u.mu.Lock()
		defer u.mu.Unlock()
		u.inFlight--
		u.ended = append(u.ended, c)
		close(u.changed)
		u.changed = make(chan struct{})
	}
}

func (u *upstreamCalls) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	end := u.begin(ctx, info.FullMethod)
	resp, err := handler(ctx, req)
	end(err)
	return resp, err
}

func (u *upstreamCalls) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	end := u.begin(ss.Context(), info.FullMethod)
	err := handler(srv, ss)
	end(err)
	return err
}

// settle waits until no call is in flight at the upstream and takes the
// calls of the case testCase that have ended ("": of every case). A call
// whose client gave up (cancelled it, or its deadline passed) must end at
// the upstream as well: the gateway passes the reset or the deadline on,
// or the upstream holds the call for ever.
func (u *upstreamCalls) settle(t *testing.T, testCase string) []upstreamCall {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		u.mu.Lock()
		n, changed := u.inFlight, u.changed
		if n == 0 {
			var taken []upstreamCall
			kept := u.ended[:0]
			for _, c := range u.ended {
				if testCase == "" || c.testCase == testCase {
					taken = append(taken, c)
				} else {
					kept = append(kept, c)
				}
			}
			u.ended = kept
			u.mu.Unlock()
			return taken
		}
		u.mu.Unlock()
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("%d calls still in flight at the upstream 10s after the client was done with them", n)
		}
	}
}

// orcaOOB is the interop upstream's ORCA out-of-band service
// (OpenRcaService) and the metrics recorder its test server sets.
// grpc-go's own service (orca.Register) reports at most every 30 s but
// through a hook internal to grpc-go, which its interop server uses and
// no other module can; this one reports when the stream opens, at the
// interval the client asks (the interop client's policy asks every
// second), and whenever a metric is set, before the setter returns: the
// report leaves the upstream before the answer of the call that set the
// metrics, and orca_oob's check, which sleeps a second before it looks
// again, often finds it at once. (Not always: the client's ORCA producer
// and the case race to read their messages.)
type orcaOOB struct {
	v3orcaservice.UnimplementedOpenRcaServiceServer
	orca.ServerMetricsRecorder
	mu sync.Mutex
	// streams are the open streams, each by the channel it takes a
	// report's request on (it closes the channel it is handed once the
	// report is sent), with its context.
	streams map[chan chan struct{}]context.Context
}

func newORCAOOB() *orcaOOB {
	return &orcaOOB{ServerMetricsRecorder: orca.NewServerMetricsRecorder(), streams: map[chan chan struct{}]context.Context{}}
}

// report has every open stream send the metrics, and waits until they
// have.
func (o *orcaOOB) report() {
	o.mu.Lock()
	streams := maps.Clone(o.streams)
	o.mu.Unlock()
	for due, ctx := range streams {
		sent := make(chan struct{})
		select {
		case due <- sent:
			select {
			case <-sent:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}
}

// The metrics orca_oob sets.

func (o *orcaOOB) SetCPUUtilization(v float64) {
	o.ServerMetricsRecorder.SetCPUUtilization(v)
	o.report()
}

func (o *orcaOOB) SetMemoryUtilization(v float64) {
	o.ServerMetricsRecorder.SetMemoryUtilization(v)
	o.report()
}

func (o *orcaOOB) SetNamedUtilization(name string, v float64) {
	o.ServerMetricsRecorder.SetNamedUtilization(name, v)
	o.report()
}

func (o *orcaOOB) StreamCoreMetrics(req *v3orcaservice.OrcaLoadReportRequest, stream v3orcaservice.OpenRcaService_StreamCoreMetricsServer) error {
	ctx := stream.Context()
	due := make(chan chan struct{})
	o.mu.Lock()
	o.streams[due] = ctx
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.streams, due)
		o.mu.Unlock()
	}()
	every := req.GetReportInterval().AsDuration()
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var sent chan struct{} // the request of the report sent next
	for {
		// As orca.Register's service sends them: utilizations, not the
		// per-request costs and named metrics, which are not sent out of
		// band.
		sm := o.ServerMetrics()
		r := &v3orcapb.OrcaLoadReport{Utilization: sm.Utilization}
		if sm.CPUUtilization != -1 {
			r.CpuUtilization = sm.CPUUtilization
		}
		if sm.MemUtilization != -1 {
			r.MemUtilization = sm.MemUtilization
		}
		if err := stream.Send(r); err != nil {
			return err
		}
		if sent != nil {
			close(sent)
			sent = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case sent = <-due:
		}
	}
}

// startInteropUpstream serves grpc-go's interop test server, with
// per-call ORCA metrics and the ORCA service as its interop server has
// them, on a free port: in clear, or with creds. Its calls are followed.
func startInteropUpstream(t *testing.T, creds credentials.TransportCredentials) (string, *upstreamCalls) {
	calls := newUpstreamCalls()
	oob := newORCAOOB()
	opts := []grpc.ServerOption{
		orca.CallMetricsServerOption(nil),
		grpc.ChainUnaryInterceptor(calls.unary),
		grpc.ChainStreamInterceptor(calls.stream),
	}
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	s := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(s, interop.NewTestServer(interop.NewTestServerOptions{MetricsRecorder: oob}))
	v3orcaservice.RegisterOpenRcaServiceServer(s, oob)
	addr := startServer(t, s)
	return addr, calls
}

// startServer serves s on a free port of 127.0.0.1 until the test ends.
func startServer(t *testing.T, s *grpc.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// interopConfig is the gateway in front of the interop upstream at
// target. Every route has limits: generous ones, which every case passes,
// a rate and a concurrency limit (whose leases every call, cancelled or
// not, must give back); and spent, a limit of one call an hour on the
// calls of the client that names the gateway localhost (its :authority;
// the others name it 127.0.0.1:PORT, and the certificate holds both).
func interopConfig(target, proto, caFile string) string {
	up := `{targets: ["` + target + `"], protocol: ` + proto
	if caFile != "" {
		up += `, tls: {ca: "` + caFile + `"}`
	}
	up += "}"
	return `
admin: {listen: ""}
routes:
  - id: spent
    match: {path: /grpc.testing.TestService/**, host: localhost}
    upstream: &up ` + up + `
    limits: [{name: spent, key: [route], rate: 1/h}]
  - id: interop
    match: {path: /grpc.testing.TestService/**}
    upstream: *up
    limits: &generous
      - {name: per-ip, key: [ip], rate: 1000/min}
      - {name: in-flight, key: [route], algorithm: concurrency, limit: 8}
  - id: unimplemented
    match: {path: /grpc.testing.UnimplementedService/**}
    upstream: *up
    limits: *generous
  - id: orca
    match: {path: /xds.service.orca.v3.OpenRcaService/**}
    upstream: *up
    limits: *generous
`
}

// interopClient is what the cases call the gateway with.
type interopClient struct {
	o  *overProtocol
	cc *grpc.ClientConn
	tc testpb.TestServiceClient
	// orca's connection reads ORCA load reports, per call and out of
	// band, as the interop client does when told to.
	orca testpb.TestServiceClient
	// testCase names the case that runs, in caseKey.
	testCase atomic.Pointer[string]
}

// tag adds caseKey to a call's metadata.
func (c *interopClient) tag(ctx context.Context) context.Context {
	if name := c.testCase.Load(); name != nil {
		return metadata.AppendToOutgoingContext(ctx, caseKey, *name)
	}
	return ctx
}

// dial connects to the gateway over o's protocol; the caller closes the
// connection.
func (c *interopClient) dial(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if c.o.p.tls {
		// The name verified is the :authority's host, 127.0.0.1 or
		// localhost, both in the gateway's certificate.
		creds = credentials.NewTLS(&tls.Config{RootCAs: c.o.ca.Pool()})
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(c.tag(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(c.tag(ctx), desc, cc, method, opts...)
		}),
	}, opts...)
	cc, err := grpc.NewClient("passthrough:///"+c.o.hostPort(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func (c *interopClient) dialForTest(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
	cc := c.dial(t, opts...)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// soak is the interop client's soak configuration, with its defaults: ten
// large unary calls, one at a time. The bound on one call is 5 s where
// the interop client's is 1 s, which a call through two TLS hops, with
// the race detector, on a loaded machine may overrun without anything
// being wrong; what the soak finds here is a call that fails or hangs.
func (c *interopClient) soak(t *testing.T, fresh bool) interop.SoakTestConfig {
	cfg := interop.SoakTestConfig{
		RequestSize:                      271828,
		ResponseSize:                     314159,
		PerIterationMaxAcceptableLatency: 5 * time.Second,
		OverallTimeout:                   20 * time.Second,
		ServerAddr:                       c.o.hostPort(),
		NumWorkers:                       1,
		Iterations:                       10,
		ChannelForTest:                   func() (*grpc.ClientConn, func()) { return c.cc, func() {} },
	}
	if fresh {
		cfg.ChannelForTest = func() (*grpc.ClientConn, func()) {
			cc := c.dial(t)
			return cc, func() { cc.Close() }
		}
	}
	return cfg
}

// An interopCase is one of the interop client's test cases.
type interopCase struct {
	name string
	run  func(ctx context.Context, t *testing.T, c *interopClient)
	// upstream checks what the upstream took of the case's calls, once
	// they have all ended there; nil: that they have.
	upstream func(t *testing.T, calls []upstreamCall)
}

var interopCases = []interopCase{
	{name: "empty_unary", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoEmptyUnaryCall(ctx, c.tc)
	}},
	{name: "large_unary", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoLargeUnaryCall(ctx, c.tc)
	}},
	{name: "client_streaming", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoClientStreaming(ctx, c.tc)
	}},
	{name: "server_streaming", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoServerStreaming(ctx, c.tc)
	}},
	{name: "ping_pong", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoPingPong(ctx, c.tc)
	}},
	{name: "empty_stream", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoEmptyStream(ctx, c.tc)
	}},
	// The client's deadline is 1 ms, and its own timer ends the call
	// with DEADLINE_EXCEEDED whatever the gateway does in the meantime:
	// what the gateway could answer sooner (its grpc-timeout's
	// DEADLINE_EXCEEDED, the upstream's) comes after the client's timer,
	// as the grpc-timeout the gateway counts from was sent after the
	// client's clock started. Time through the proxy cannot fail it, only
	// an answer of another status from the gateway before 1 ms.
	{name: "timeout_on_sleeping_server", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoTimeoutOnSleepingServer(ctx, c.tc)
	}, upstream: func(t *testing.T, calls []upstreamCall) {
		// The call may end at the client before it reaches the upstream;
		// if it did reach it, the deadline came with it.
		for _, call := range calls {
			if call.method != "/grpc.testing.TestService/FullDuplexCall" {
				continue
			}
			if call.deadline.IsZero() || call.deadline.Sub(call.arrived) > time.Millisecond {
				t.Errorf("the upstream's call had deadline %v, %v after it arrived; want one of 1ms at most",
					call.deadline, call.deadline.Sub(call.arrived))
			}
			if call.code != codes.DeadlineExceeded && call.code != codes.Canceled {
				t.Errorf("the upstream's call ended %v, want DEADLINE_EXCEEDED or CANCELLED", call.code)
			}
		}
	}},
	// How the upstream's call ends is not for the gateway to say: the
	// client's CloseAndRecv may half-close the stream before its
	// cancellation resets it, and an upstream that reads the end of the
	// request stream first ends the call OK. That it ends is checked.
	{name: "cancel_after_begin", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoCancelAfterBegin(ctx, c.tc)
	}},
	{name: "cancel_after_first_response", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoCancelAfterFirstResponse(ctx, c.tc)
	}, upstream: func(t *testing.T, calls []upstreamCall) {
		n := 0
		for _, call := range calls {
			if call.method != "/grpc.testing.TestService/FullDuplexCall" {
				continue
			}
			if n++; call.code != codes.Canceled {
				t.Errorf("the upstream's call ended %v, want CANCELLED", call.code)
			}
		}
		if n != 1 {
			t.Errorf("the upstream took %d calls, want 1", n)
		}
	}},
	{name: "custom_metadata", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoCustomMetadata(ctx, c.tc)
	}},
	{name: "status_code_and_message", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoStatusCodeAndMessage(ctx, c.tc)
	}},
	{name: "special_status_message", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoSpecialStatusMessage(ctx, c.tc)
	}},
	{name: "unimplemented_method", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoUnimplementedMethod(ctx, c.cc)
	}},
	{name: "unimplemented_service", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoUnimplementedService(ctx, testpb.NewUnimplementedServiceClient(c.cc))
	}},
	{name: "rpc_soak", run: func(ctx context.Context, t *testing.T, c *interopClient) {
		interop.DoSoakTest(ctx, c.soak(t, false))
	}},
	{name: "channel_soak", run: func(ctx context.Context, t *testing.T, c *interopClient) {
		interop.DoSoakTest(ctx, c.soak(t, true))
	}},
	{name: "orca_per_rpc", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoORCAPerRPCTest(ctx, c.orca)
	}},
	{name: "orca_oob", run: func(ctx context.Context, _ *testing.T, c *interopClient) {
		interop.DoORCAOOBTest(ctx, c.orca)
	}},
	// A case of the gateway's own: a route whose limit is spent answers
	// the interop client's unary calls RESOURCE_EXHAUSTED, with the
	// rate-limit fields, and the upstream sees none of them.
	{name: "resource_exhausted", run: func(ctx context.Context, t *testing.T, c *interopClient) {
		spent := testpb.NewTestServiceClient(c.dialForTest(t, grpc.WithAuthority("localhost")))
		interop.DoEmptyUnaryCall(ctx, spent) // the one call of the hour
		msg := interopLog.fatalOf(func() { interop.DoLargeUnaryCall(ctx, spent) })
		if !strings.Contains(msg, "code = ResourceExhausted") {
			t.Fatalf("large_unary on the spent route: %q, want it failed with RESOURCE_EXHAUSTED", msg)
		}
		var hdr, trl metadata.MD
		_, err := spent.UnaryCall(ctx, &testpb.SimpleRequest{
			ResponseType: testpb.PayloadType_COMPRESSABLE,
			ResponseSize: 1,
			Payload:      interop.ClientNewPayload(testpb.PayloadType_COMPRESSABLE, 1),
		}, grpc.Header(&hdr), grpc.Trailer(&trl))
		if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || st.Message() == "" {
			t.Fatalf("a unary call on the spent route: %v, want RESOURCE_EXHAUSTED with a message", err)
		}
		md := metadata.Join(hdr, trl)
		for k, want := range map[string]string{"x-ratelimit-limit": "1", "x-ratelimit-remaining": "0"} {
			if got := md.Get(k); len(got) != 1 || got[0] != want {
				t.Errorf("metadata %s = %v, want %q (all: %v)", k, got, want, md)
			}
		}
		if len(md.Get("retry-after")) != 1 {
			t.Errorf("no retry-after in the metadata: %v", md)
		}
	}, upstream: func(t *testing.T, calls []upstreamCall) {
		if len(calls) != 1 || calls[0].method != "/grpc.testing.TestService/EmptyCall" {
			t.Errorf("the upstream took %+v, want the one EmptyCall the limit let through", calls)
		}
	}},
}

// grpc-go's interop cases pass through the gateway's gRPC routes: over
// its h2c listener and its TLS one (ALPN h2), to an upstream in clear
// (h2c) and over TLS (h2); every route limited. Each case is a subtest;
// a case that fails fails its subtest with the interop package's message.
// Every call whose client gave up ends at the upstream too. The cases
// that need cloud credentials are left out, and so is pick_first_unary,
// which checks the client's own balancing over several backends (the
// interop test server does not even fill in the server id it reads).
func TestGRPCInterop(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "interop upstream CA")
	caFile := testcerts.Write(t, t.TempDir(), "ca.pem", ca.PEM)
	for _, up := range []string{"h2c", "h2"} {
		t.Run("upstream-"+up, func(t *testing.T) {
			for _, name := range []string{"edge-h2c", "edge-h2"} {
				t.Run(name, func(t *testing.T) {
					var creds credentials.TransportCredentials
					target, tlsCA := "http://", ""
					if up == "h2" {
						creds = credentials.NewServerTLSFromCert(ptr(ca.Server(t, "upstream").TLS(t)))
						target, tlsCA = "https://", caFile
					}
					addr, calls := startInteropUpstream(t, creds)
					h := newHarness(t, interopConfig(target+addr, up, tlsCA), nil)
					runInterop(t, serveOver(t, h, protocolNamed(t, name)), calls)
				})
			}
		})
	}
}

// waitLeasesBack waits until no call holds a lease of route's
// concurrency limit: the gateway gives a call's back when it is done
// with the call, which may be a moment after the client is.
func waitLeasesBack(t *testing.T, h *harness, route string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := h.gw.LimitState(context.Background(), route, "in-flight", []string{route}, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.InFlight == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("route %s: %d leases still held 5s after the calls ended", route, st.InFlight)
		}
		time.Sleep(time.Millisecond)
	}
}

func protocolNamed(t *testing.T, name string) clientProtocol {
	for _, p := range clientProtocols {
		if p.name == name {
			return p
		}
	}
	t.Fatalf("no client protocol %s", name)
	return clientProtocol{}
}

// runInterop runs every case against o's gateway, whose upstream's calls
// are calls.
func runInterop(t *testing.T, o *overProtocol, calls *upstreamCalls) {
	c := &interopClient{o: o}
	c.cc = c.dialForTest(t)
	c.tc = testpb.NewTestServiceClient(c.cc)
	c.orca = testpb.NewTestServiceClient(c.dialForTest(t,
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"test_backend_metrics_load_balancer": {}}]}`)))
	for _, tc := range interopCases {
		t.Run(tc.name, func(t *testing.T) {
			// A case that hangs fails with its call cancelled, rather
			// than the test binary with its timeout. Cancelled, not a
			// deadline: a deadline would send every call with a
			// grpc-timeout, which the interop client does not.
			ctx, cancel := context.WithCancel(context.Background())
			defer time.AfterFunc(20*time.Second, cancel).Stop()
			defer cancel()
			c.testCase.Store(&tc.name)
			interopLog.run(t, func() { tc.run(ctx, t, c) })
			ended := calls.settle(t, tc.name)
			for _, route := range []string{"interop", "unimplemented"} {
				waitLeasesBack(t, o.harness, route)
			}
			if tc.upstream != nil {
				tc.upstream(t, ended)
			}
		})
	}
	// A call the client ended before the gateway was done with it
	// (timeout_on_sleeping_server, cancel_after_begin) may reach the
	// upstream after its case: those that have by now are checked as
	// their case's calls are.
	late := calls.settle(t, "")
	for _, tc := range interopCases {
		var of []upstreamCall
		for _, call := range late {
			if call.testCase == tc.name {
				of = append(of, call)
			}
		}
		if len(of) > 0 && tc.upstream != nil {
			t.Run("late/"+tc.name, func(t *testing.T) { tc.upstream(t, of) })
		}
	}
	// Every call reached a route, the unimplemented ones too (it is the
	// upstream that does not know them), and the limits were decided on
	// every route and refused nothing but on the spent one.
	h := o.harness
	if n := counterValue(t, h, "gateway_http_requests_total", map[string]string{"route": ""}); n != 0 {
		t.Errorf("%v calls matched no route", n)
	}
	if n := counterValue(t, h, "gateway_grpc_responses_total", map[string]string{"route": "unimplemented", "grpc_status": "UNIMPLEMENTED"}); n != 1 {
		t.Errorf("%v calls of route unimplemented answered UNIMPLEMENTED, want 1", n)
	}
	for _, route := range []string{"interop", "unimplemented", "orca"} {
		for _, l := range []string{"per-ip", "in-flight"} {
			if n := counterValue(t, h, "gateway_ratelimit_decisions_total", map[string]string{"route": route, "limit": l, "result": "allowed"}); n == 0 {
				t.Errorf("route %s: limit %s decided nothing", route, l)
			}
		}
		if n := counterValue(t, h, "gateway_rate_limited_total", map[string]string{"route": route}); n != 0 {
			t.Errorf("route %s: %v calls refused by its limits", route, n)
		}
	}
	if n := counterValue(t, h, "gateway_rate_limited_total", map[string]string{"route": "spent", "limit": "spent"}); n != 2 {
		t.Errorf("route spent: %v calls refused, want 2", n)
	}
}
