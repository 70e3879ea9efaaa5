package gateway

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/internal/tracing"
)

// spanSink holds the spans an OTLP receiver was sent.
type spanSink struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	auth  string // the Authorization of the last OTLP/HTTP export
}

func (s *spanSink) add(req *coltracepb.ExportTraceServiceRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans = append(s.spans, ss.GetSpans()...)
		}
	}
}

func (s *spanSink) all() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracepb.Span(nil), s.spans...)
}

// trace waits for the spans of the request whose server span has
// floodgate.request_id rid, n of them in all, and returns them by name.
func (s *spanSink) trace(t *testing.T, rid string, n int) map[string]*tracepb.Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans := s.all()
		var id []byte
		for _, sp := range spans {
			if str(sp, "floodgate.request_id") == rid {
				id = sp.GetTraceId()
			}
		}
		byName := map[string]*tracepb.Span{}
		if id != nil {
			for _, sp := range spans {
				if bytes.Equal(sp.GetTraceId(), id) {
					if _, dup := byName[sp.GetName()]; dup {
						t.Fatalf("two spans named %s in the trace of %s", sp.GetName(), rid)
					}
					byName[sp.GetName()] = sp
				}
			}
		}
		if len(byName) >= n {
			if len(byName) > n {
				t.Fatalf("the trace of %s has %d spans, want %d: %v", rid, len(byName), n, names(byName))
			}
			return byName
		}
		if time.Now().After(deadline) {
			t.Fatalf("the trace of %s has %d spans after 30s, want %d: %v", rid, len(byName), n, names(byName))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func names(m map[string]*tracepb.Span) []string {
	var ns []string
	for n := range m {
		ns = append(ns, n)
	}
	return ns
}

func str(sp *tracepb.Span, key string) string {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func intAttr(sp *tracepb.Span, key string) int64 {
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue()
		}
	}
	return -1
}

func boolAttr(t *testing.T, sp *tracepb.Span, key string) bool {
	t.Helper()
	for _, kv := range sp.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetBoolValue()
		}
	}
	t.Fatalf("span %s has no attribute %s", sp.GetName(), key)
	return false
}

// grpcReceiver is an OTLP/gRPC trace receiver. With hold set, Export
// waits until the test ends: a collector that accepted the connection
// and never answers.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	sink *spanSink
	hold chan struct{}
}

func (r *grpcReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	}
	r.sink.add(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// startGRPCReceiver serves OTLP/gRPC on 127.0.0.1 and returns its
// grpc:// endpoint.
func startGRPCReceiver(tb testing.TB, hold bool) (string, *spanSink) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	rcv := &grpcReceiver{sink: &spanSink{}}
	if hold {
		rcv.hold = make(chan struct{})
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, rcv)
	go srv.Serve(lis)
	tb.Cleanup(func() {
		if rcv.hold != nil {
			close(rcv.hold)
		}
		srv.Stop()
	})
	return "grpc://" + lis.Addr().String(), rcv.sink
}

// startHTTPReceiver serves OTLP/HTTP (protobuf) at /v1/traces and returns
// its endpoint.
func startHTTPReceiver(t *testing.T) (string, *spanSink) {
	sink := &spanSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP export", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err != nil || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		sink.mu.Lock()
		sink.auth = r.Header.Get("Authorization")
		sink.mu.Unlock()
		sink.add(req)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/traces", sink
}

// closedPort is an address nothing listens on.
func closedPort(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// upstreamTrace is the span context of the traceparent the backend's
// last request carried.
func upstreamTrace(t *testing.T, up *backend) trace.SpanContext {
	t.Helper()
	r := up.lastRequest()
	if r == nil {
		t.Fatal("the upstream saw no request")
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(r.Header))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		t.Fatalf("the upstream saw traceparent %q", r.Header.Get("Traceparent"))
	}
	return sc
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// A traced request through a breaker, a limit on Redis and the upstream
// makes one span per step, children of its server span, the store's of
// the limit step's; the upstream gets the trace in its traceparent. A
// request that the Redis store rejects from its memory makes no store
// span and says local.
func TestTracingSpanTree(t *testing.T) {
	t.Parallel()
	endpoint, sink := startGRPCReceiver(t, false)
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
tracing: {otlp: "`+endpoint+`", sample: 1}
store: {type: redis, redis: {addrs: ["`+srv.Addr()+`"], timeout: 2s}}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
    breaker: {enabled: true}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 1/1h}
`, up)

	resp := h.do("GET", "/api/x", map[string]string{"X-User-Id": "ann", "X-Request-Id": "first"}, nil)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc := upstreamTrace(t, up)
	spans := sink.trace(t, "first", 5)
	server, brk, lim, store, ups := spans["GET api"], spans["breaker"], spans["limit"], spans["store"], spans["upstream"]
	if server == nil || brk == nil || lim == nil || store == nil || ups == nil {
		t.Fatalf("spans %v, want GET api, breaker, limit, store, upstream", names(spans))
	}
	if len(server.GetParentSpanId()) != 0 {
		t.Errorf("the server span has parent %x, want none", server.GetParentSpanId())
	}
	for _, c := range []*tracepb.Span{brk, lim, ups} {
		if !bytes.Equal(c.GetParentSpanId(), server.GetSpanId()) {
			t.Errorf("span %s has parent %x, want the server span %x", c.GetName(), c.GetParentSpanId(), server.GetSpanId())
		}
	}
	if !bytes.Equal(store.GetParentSpanId(), lim.GetSpanId()) {
		t.Errorf("the store span has parent %x, want the limit span %x", store.GetParentSpanId(), lim.GetSpanId())
	}
	kinds := map[*tracepb.Span]tracepb.Span_SpanKind{
		server: tracepb.Span_SPAN_KIND_SERVER, brk: tracepb.Span_SPAN_KIND_INTERNAL, lim: tracepb.Span_SPAN_KIND_INTERNAL,
		store: tracepb.Span_SPAN_KIND_CLIENT, ups: tracepb.Span_SPAN_KIND_CLIENT,
	}
	for sp, k := range kinds {
		if sp.GetKind() != k {
			t.Errorf("span %s is of kind %v, want %v", sp.GetName(), sp.GetKind(), k)
		}
	}
	if sc.TraceID().String() != hexID(server.GetTraceId()) || sc.SpanID().String() != hexID(ups.GetSpanId()) || !sc.IsSampled() {
		t.Errorf("the upstream saw trace %s span %s sampled %v, want trace %x span %x (the upstream span) sampled",
			sc.TraceID(), sc.SpanID(), sc.IsSampled(), server.GetTraceId(), ups.GetSpanId())
	}
	for k, want := range map[string]string{"floodgate.route": "api", "http.request.method": "GET", "url.path": "/api/x", "floodgate.result": "admitted"} {
		if got := str(server, k); got != want {
			t.Errorf("server span %s = %q, want %q", k, got, want)
		}
	}
	if got := intAttr(server, "http.response.status_code"); got != 200 {
		t.Errorf("server span http.response.status_code = %d, want 200", got)
	}
	if got := intAttr(ups, "http.response.status_code"); got != 200 {
		t.Errorf("upstream span http.response.status_code = %d, want 200", got)
	}
	if got := str(brk, "floodgate.breaker.state"); got != "CLOSED" || !boolAttr(t, brk, "floodgate.breaker.allowed") {
		t.Errorf("breaker span: state %q, allowed %v; want CLOSED, true", got, boolAttr(t, brk, "floodgate.breaker.allowed"))
	}
	if got := str(lim, "floodgate.limit.outcome"); got != "allowed" || boolAttr(t, lim, "floodgate.limit.local") {
		t.Errorf("limit span: outcome %q, local %v; want allowed, false", got, boolAttr(t, lim, "floodgate.limit.local"))
	}
	if got, sys := str(store, "floodgate.store"), str(store, "db.system.name"); got != "redis" || sys != "redis" {
		t.Errorf("store span floodgate.store = %q, db.system.name = %q, want redis", got, sys)
	}

	// The key is spent: Redis rejects it, and the store remembers, so
	// that a request after that is rejected without asking Redis.
	for i := 2; ; i++ {
		rid := "again-" + strconv.Itoa(i)
		resp := h.do("GET", "/api/x", map[string]string{"X-User-Id": "ann", "X-Request-Id": rid}, nil)
		resp.Body.Close()
		if resp.StatusCode != 429 {
			t.Fatalf("request %d: status %d, want 429", i, resp.StatusCode)
		}
		spans := sink.trace(t, rid, 3)
		lim := spans["limit"]
		if lim == nil || spans["breaker"] == nil || spans["GET api"] == nil {
			t.Fatalf("spans %v", names(spans))
		}
		if spans["store"] != nil || spans["upstream"] != nil {
			t.Fatalf("a rejected request has spans %v", names(spans))
		}
		if got := str(lim, "floodgate.limit.outcome"); got != "rejected" || str(lim, "floodgate.limit.name") != "user" {
			t.Errorf("limit span: outcome %q, limit %q; want rejected by user", got, str(lim, "floodgate.limit.name"))
		}
		if intAttr(spans["GET api"], "http.response.status_code") != 429 || str(spans["GET api"], "floodgate.result") != "limited" {
			t.Errorf("server span: %v", spans["GET api"].GetAttributes())
		}
		if boolAttr(t, lim, "floodgate.limit.local") {
			break
		}
		if i == 4 {
			t.Fatal("no rejection was answered locally")
		}
	}
}

// An OTLP/HTTP endpoint gets the same spans, with the headers
// OTEL_EXPORTER_OTLP_HEADERS names. With the memory store no request
// makes a store call: the limit step says local, and has no store span.
func TestTracingHTTPExporter(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20collector-token")
	endpoint, sink := startHTTPReceiver(t)
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
tracing: {otlp: "`+endpoint+`", sample: 1}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 10/1h}
  - id: shut
    match: {path: /shut/**}
    upstream: {targets: ["{{UP}}"]}
    breaker: {enabled: true}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 10/1h}
  - id: down
    match: {path: /down/**}
    upstream: {targets: ["http://`+closedPort(t)+`"]}
`, up)
	resp := h.do("POST", "/api/x", map[string]string{"X-User-Id": "ann", "X-Request-Id": "posted"}, strings.NewReader("body"))
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := sink.trace(t, "posted", 3)
	server, lim, ups := spans["POST api"], spans["limit"], spans["upstream"]
	if server == nil || lim == nil || ups == nil {
		t.Fatalf("spans %v, want POST api, limit, upstream", names(spans))
	}
	if got := str(lim, "floodgate.limit.outcome"); got != "allowed" || !boolAttr(t, lim, "floodgate.limit.local") {
		t.Errorf("limit span: outcome %q, local %v; want allowed, true", got, boolAttr(t, lim, "floodgate.limit.local"))
	}
	if sc := upstreamTrace(t, up); sc.SpanID().String() != hexID(ups.GetSpanId()) {
		t.Errorf("the upstream saw span %s, want %x", sc.SpanID(), ups.GetSpanId())
	}
	if got := str(ups, "http.request.method"); got != "POST" {
		t.Errorf("upstream span http.request.method = %q", got)
	}
	sink.mu.Lock()
	auth := sink.auth
	sink.mu.Unlock()
	if auth != "Bearer collector-token" {
		t.Errorf("the export carried Authorization %q, want the one OTEL_EXPORTER_OTLP_HEADERS names", auth)
	}

	// An open breaker answers before the limits: no limit span, and none
	// upstream.
	if err := h.gw.ForceBreaker("shut", "open", 0); err != nil {
		t.Fatal(err)
	}
	resp = h.do("GET", "/shut/x", map[string]string{"X-User-Id": "ann", "X-Request-Id": "shut"}, nil)
	resp.Body.Close()
	spans = sink.trace(t, "shut", 2)
	if brk := spans["breaker"]; brk == nil || str(brk, "floodgate.breaker.state") != "OPEN" || boolAttr(t, brk, "floodgate.breaker.allowed") {
		t.Errorf("spans of a request an open breaker refused: %v", names(spans))
	}
	if sp := spans["GET shut"]; sp == nil || str(sp, "floodgate.result") != "breaker" || intAttr(sp, "http.response.status_code") != 503 {
		t.Errorf("spans of a request an open breaker refused: %v", names(spans))
	}

	// An upstream that refuses the connection fails the upstream span.
	resp = h.do("GET", "/down/x", map[string]string{"X-Request-Id": "down"}, nil)
	resp.Body.Close()
	spans = sink.trace(t, "down", 2)
	if sp := spans["upstream"]; sp == nil || sp.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || str(sp, "error.type") != "connection_refused" {
		t.Errorf("the upstream span of a refused connection: %v", sp)
	}
	if sp := spans["GET down"]; sp == nil || intAttr(sp, "http.response.status_code") != 502 || sp.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the server span of a 502: %v", sp)
	}

	// A request no route takes is traced too: its server span alone.
	resp = h.do("GET", "/nowhere", map[string]string{"X-Request-Id": "lost"}, nil)
	resp.Body.Close()
	spans = sink.trace(t, "lost", 1)
	if sp := spans["GET"]; sp == nil || intAttr(sp, "http.response.status_code") != 404 || str(sp, "floodgate.result") != "not_found" {
		t.Errorf("spans of an unrouted request: %v", spans)
	}
}

// With sample 0 a root request is not traced, though the upstream still
// gets a traceparent (unsampled); a request whose traceparent says
// sampled is traced whatever sample says, in the client's trace.
func TestTracingSampling(t *testing.T) {
	t.Parallel()
	endpoint, sink := startGRPCReceiver(t, false)
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
tracing: {otlp: "`+endpoint+`", sample: 0}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
`, up)
	for i := range 20 {
		resp := h.do("GET", "/api/x", map[string]string{"X-Request-Id": "root-" + strconv.Itoa(i)}, nil)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if sc := upstreamTrace(t, up); sc.IsSampled() {
			t.Fatalf("the upstream of a root request saw a sampled traceparent %s", up.lastRequest().Header.Get("Traceparent"))
		}
	}
	// And one that says unsampled stays so.
	const unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	resp := h.do("GET", "/api/x", map[string]string{"Traceparent": unsampled, "X-Request-Id": "unsampled"}, nil)
	resp.Body.Close()
	if sc := upstreamTrace(t, up); sc.IsSampled() || sc.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("the upstream saw %s for %s", up.lastRequest().Header.Get("Traceparent"), unsampled)
	}

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp = h.do("GET", "/api/x", map[string]string{"Traceparent": parent, "Tracestate": "vendor=x", "X-Request-Id": "followed"}, nil)
	resp.Body.Close()
	spans := sink.trace(t, "followed", 2)
	server, ups := spans["GET api"], spans["upstream"]
	if server == nil || ups == nil {
		t.Fatalf("spans %v", names(spans))
	}
	if hexID(server.GetTraceId()) != "4bf92f3577b34da6a3ce929d0e0e4736" || hexID(server.GetParentSpanId()) != "00f067aa0ba902b7" {
		t.Errorf("server span in trace %x with parent %x, want the client's", server.GetTraceId(), server.GetParentSpanId())
	}
	sc := upstreamTrace(t, up)
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != hexID(ups.GetSpanId()) || !sc.IsSampled() {
		t.Errorf("the upstream saw %s", up.lastRequest().Header.Get("Traceparent"))
	}
	if got := up.lastRequest().Header.Get("Tracestate"); got != "vendor=x" {
		t.Errorf("the upstream saw tracestate %q, want vendor=x", got)
	}
	// The spans go in the order they ended: any of the earlier requests'
	// would have come first.
	for _, sp := range sink.all() {
		if hexID(sp.GetTraceId()) != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("span %s of trace %x (request %s) was exported", sp.GetName(), sp.GetTraceId(), str(sp, "floodgate.request_id"))
		}
	}
}

// An endpoint that is down, or that never answers, costs requests
// nothing: they are answered, and the spans that could not go are
// counted as dropped.
func TestTracingEndpointDown(t *testing.T) {
	t.Parallel()
	held, _ := startGRPCReceiver(t, true)
	for _, tc := range []struct {
		name, endpoint string
		requests       int
	}{
		{"grpc closed port", "grpc://" + closedPort(t), 5},
		{"http closed port", "http://" + closedPort(t) + "/v1/traces", 5},
		// More spans than the queue holds, while the one batch taken
		// waits for an answer.
		{"grpc never answers", held, tracing.QueueLen/2 + tracing.Batch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newBackend(t, nil)
			h := newHarness(t, `
admin: {listen: ""}
tracing: {otlp: "`+tc.endpoint+`", sample: 1}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
`, up)
			for i := range tc.requests {
				resp := h.do("GET", "/api/x", nil, nil)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: status %d", i, resp.StatusCode)
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for counterValue(t, h, "gateway_trace_spans_dropped_total", nil) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("no span counted as dropped after 30s")
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// A reload that changes tracing sends the next requests' spans to the
// new endpoint, and flushes the old provider's; one that turns it off
// leaves the client's traceparent as it came.
func TestTracingReload(t *testing.T) {
	t.Parallel()
	first, sinkA := startGRPCReceiver(t, false)
	second, sinkB := startHTTPReceiver(t)
	up := newBackend(t, nil)
	yaml := func(tracing string) string {
		return `
admin: {listen: ""}
server: {shutdown_timeout: 1ms}
` + tracing + `
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["` + up.URL + `"]}
`
	}
	h := newHarness(t, yaml(`tracing: {otlp: "`+first+`", sample: 1}`), up)
	reload := func(tracing string) {
		t.Helper()
		cfg, err := config.Parse("test.yaml", []byte(yaml(tracing)))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.gw.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	get := func(rid string, hdr map[string]string) {
		t.Helper()
		if hdr == nil {
			hdr = map[string]string{}
		}
		hdr["X-Request-Id"] = rid
		resp := h.do("GET", "/api/x", hdr, nil)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	get("a", nil)
	kept := h.gw.gen.Load().trace
	reload(`tracing: {otlp: "` + first + `", sample: 1}
responses: {route_not_found: "nothing here"}`)
	if h.gw.gen.Load().trace != kept {
		t.Error("a reload that left tracing alone made a new provider")
	}
	reload(`tracing: {otlp: "` + second + `", sample: 1}`)
	get("b", nil)
	sinkA.trace(t, "a", 2)
	sinkB.trace(t, "b", 2)
	for _, sp := range sinkA.all() {
		if str(sp, "floodgate.request_id") == "b" {
			t.Error("the old endpoint got the span of a request after the reload")
		}
	}

	reload("")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	get("c", map[string]string{"Traceparent": tp})
	if got := up.lastRequest().Header.Get("Traceparent"); got != tp {
		t.Errorf("with tracing off the upstream saw traceparent %q, want the client's %q", got, tp)
	}
	get("d", nil)
	if got := up.lastRequest().Header["Traceparent"]; got != nil {
		t.Errorf("with tracing off the upstream saw traceparent %q", got)
	}
}

// BenchmarkServeHTTPTraced is BenchmarkServeHTTP's four_fixed_memory with
// tracing on, to an OTLP/gRPC receiver in the process: every request
// sampled, and none (the traceparent still made and sent).
func BenchmarkServeHTTPTraced(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	endpoint, _ := startGRPCReceiver(b, false)
	for _, sample := range []string{"1", "0"} {
		b.Run("sample_"+sample, func(b *testing.B) {
			cfg := mustParseB(b, `admin: {listen: ""}
tracing: {otlp: "`+endpoint+`", sample: `+sample+`}
global_limits: [{name: global, key: [global], rate: 100000000/s}]
routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["`+up.URL+`"]}
    limits:
      - {name: api, key: [route], rate: 100000000/s}
      - {name: user, key: ["header:X-User-Id", path], fallback: [ip], rate: 1000000/10s}
      - {name: ip, key: [ip], rate: 1000000/min}
`)
			gw, err := New(cfg, Options{Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer gw.Close()
			serveUsers(b, gw)
			b.StopTimer()
			b.ReportMetric(testutil.ToFloat64(gw.metrics.spansDropped)/float64(b.N), "dropped/op")
		})
	}
}

// What a client sends cannot make spans as big or as many-named as it
// likes: a method of its own is "_OTHER" in a span named HTTP, a long
// path is cut, and a huge tracestate is not carried, though the
// client's trace is still followed.
func TestTracingBoundsWhatClientsSend(t *testing.T) {
	t.Parallel()
	endpoint, sink := startHTTPReceiver(t)
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
tracing: {otlp: "`+endpoint+`", sample: 0}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
`, up)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	var members []string
	for i := range 30 {
		members = append(members, fmt.Sprintf("m%d=%s", i, strings.Repeat("v", 200)))
	}
	method := "PURGE" + strings.Repeat("X", 2000)
	resp := h.do(method, "/api/"+strings.Repeat("p", 4000), map[string]string{
		"X-Request-Id": "hostile", "Traceparent": parent, "Tracestate": strings.Join(members, ","),
	}, nil)
	resp.Body.Close()
	spans := sink.trace(t, "hostile", 2)
	server := spans["HTTP api"]
	if server == nil {
		t.Fatalf("spans %v, want the server span named HTTP api", names(spans))
	}
	if hexID(server.GetTraceId()) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace %x, want the client's", server.GetTraceId())
	}
	if got := str(server, "http.request.method"); got != "_OTHER" {
		t.Errorf("http.request.method = %.40q, want _OTHER", got)
	}
	if got := str(server, "url.path"); len(got) > tracing.ValueMax || !strings.HasPrefix(got, "/api/ppp") {
		t.Errorf("url.path of %d bytes, want the path cut to %d", len(got), tracing.ValueMax)
	}
	if ts := server.GetTraceState(); ts != "" {
		t.Errorf("the span carries a tracestate of %d bytes, want none", len(ts))
	}
	if r := up.lastRequest(); r.Header.Get("Tracestate") != "" {
		t.Errorf("the upstream got a tracestate of %d bytes, want none", len(r.Header.Get("Tracestate")))
	}

	// A short one goes along.
	other := "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp = h.do("GET", "/api/x", map[string]string{"X-Request-Id": "short", "Traceparent": other, "Tracestate": "vendor=abc"}, nil)
	resp.Body.Close()
	if sp := sink.trace(t, "short", 2)["GET api"]; sp == nil || sp.GetTraceState() != "vendor=abc" {
		t.Errorf("a short tracestate was not carried: %v", sp)
	}
	if got := up.lastRequest().Header.Get("Tracestate"); got != "vendor=abc" {
		t.Errorf("the upstream got tracestate %q, want vendor=abc", got)
	}
}
