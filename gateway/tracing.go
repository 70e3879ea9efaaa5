package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/upstream"
	"github.com/floodgate-gw/floodgate/limit"
)

// tracing is a generation's export of request traces (tracing.otlp). A
// generation without it has a nil *tracing, and a request on it makes no
// span, reads no traceparent and allocates nothing for tracing: every
// step asks x.rec, false, before anything else.
//
// The spans of a request live in its exchange, not in the request's
// context: a request the gateway sends on is the one it received
// (forward), and r.WithContext would copy it.
type tracing struct {
	cfg      config.Tracing
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	queue    *boundedQueue
}

// Spans wait for export in a queue of traceQueue; a span that finds it
// full is dropped, and counted. An export that fails (the collector is
// down or refuses the spans) drops its batch after the exporter's retries
// end, traceExportTimeout at most.
//
// A client decides much of what a span holds (its path, its method, the
// tracestate it sends) and can ask for every request to be traced: no
// attribute is longer than traceValueMax, a tracestate longer than
// traceStateMax is not followed, and a batch of traceBatch spans stays
// far under the 4 MiB a gRPC collector takes by default.
const (
	traceQueue         = 2048
	traceBatch         = 256
	traceValueMax      = 256
	traceStateMax      = 512
	traceBatchTimeout  = time.Second
	traceExportTimeout = 5 * time.Second
	// traceShutdownWait bounds how long closing the gateway, or a
	// reload's retiring of a provider, waits for the spans queued to go.
	traceShutdownWait = 2 * time.Second
)

// tracingFor is the tracing of cfg: none when cfg.OTLP is empty, prev's
// when it has the same settings (a reload that left the block alone
// keeps its queue and connection), else a new provider.
func (g *Gateway) tracingFor(cfg config.Tracing, prev *generation) (*tracing, error) {
	if cfg.OTLP == "" {
		return nil, nil
	}
	if prev != nil && prev.trace != nil && prev.trace.cfg == cfg {
		return prev.trace, nil
	}
	exp, err := newExporter(cfg.OTLP)
	if err != nil {
		return nil, fmt.Errorf("tracing.otlp: %w", err)
	}
	q := &boundedQueue{max: traceQueue, dropped: g.metrics.spansDropped}
	q.SpanProcessor = sdktrace.NewBatchSpanProcessor(countingExporter{SpanExporter: exp, q: q},
		// Never more in the batch processor's queue than it holds:
		// boundedQueue keeps count, and drops (and counts) the rest.
		sdktrace.WithMaxQueueSize(traceQueue),
		sdktrace.WithMaxExportBatchSize(traceBatch),
		sdktrace.WithBatchTimeout(traceBatchTimeout),
		sdktrace.WithExportTimeout(traceExportTimeout),
	)
	attrs := []attribute.KeyValue{semconv.ServiceName("floodgate")}
	if g.version != "" {
		attrs = append(attrs, semconv.ServiceVersion(g.version))
	}
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = traceValueMax
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(q),
		sdktrace.WithRawSpanLimits(limits),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Sample))),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
	)
	// The SDK reports a failed export through OpenTelemetry's global error
	// handler, whose default writes to the standard logger: here it goes
	// to the gateway's log, a line a second at most. The handler is the
	// process's; the last gateway to trace sets it.
	logged := logsample.New(1)
	log, now := g.log, g.now
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if logged.Allow(now().Unix()) {
			log.LogAttrs(context.Background(), slog.LevelWarn, "trace export failed; its spans are dropped",
				slog.String("error", err.Error()))
		}
	}))
	return &tracing{cfg: cfg, provider: tp, tracer: tp.Tracer("github.com/floodgate-gw/floodgate/gateway"), queue: q}, nil
}

// newExporter makes the OTLP exporter of endpoint, a URL that config
// validated: grpc:// for OTLP/gRPC without TLS, http:// and https:// for
// OTLP/HTTP. Neither connects here.
func newExporter(endpoint string) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	switch u.Scheme {
	case "grpc":
		return otlptracegrpc.New(ctx,
			otlptracegrpc.WithEndpoint(u.Host),
			otlptracegrpc.WithInsecure(),
			otlptracegrpc.WithTimeout(traceExportTimeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{
				Enabled: true, InitialInterval: 250 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: traceExportTimeout,
			}))
	case "http", "https":
		path := u.EscapedPath()
		if path == "" || path == "/" {
			path = "/v1/traces"
		}
		opts := []otlptracehttp.Option{
			otlptracehttp.WithEndpoint(u.Host),
			otlptracehttp.WithURLPath(path),
			otlptracehttp.WithTimeout(traceExportTimeout),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{
				Enabled: true, InitialInterval: 250 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: traceExportTimeout,
			}),
		}
		if u.Scheme == "http" {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("unknown scheme %q (grpc, http, https)", u.Scheme)
}

// shutdown exports what is queued, within wait, and stops the provider;
// what it could not export is counted as dropped.
func (t *tracing) shutdown(wait time.Duration) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_ = t.provider.Shutdown(ctx)
	t.queue.close()
}

// closeUnless shuts t down unless it is keep, for a build that failed
// after making it.
func (t *tracing) closeUnless(keep *tracing) {
	if t != nil && t != keep {
		t.shutdown(traceShutdownWait)
	}
}

func prevTracing(prev *generation) *tracing {
	if prev == nil {
		return nil
	}
	return prev.trace
}

// boundedQueue is the batch span processor, with a count of the spans
// handed to it and not yet exported (or failed): a span that would make
// them more than max is dropped, and counted, as one whose export failed
// is. The batch processor drops the spans its own queue cannot take
// without a word; kept below its size, it drops none.
type boundedQueue struct {
	sdktrace.SpanProcessor
	max     int64
	pending atomic.Int64
	closed  atomic.Bool
	dropped prometheus.Counter
}

func (q *boundedQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return // the batch processor exports sampled spans only
	}
	if q.pending.Add(1) > q.max {
		q.pending.Add(-1)
		q.dropped.Inc()
		return
	}
	q.SpanProcessor.OnEnd(s)
}

// close counts the spans that shutdown left unexported.
func (q *boundedQueue) close() {
	q.closed.Store(true)
	if n := q.pending.Swap(0); n > 0 {
		q.dropped.Add(float64(n))
	}
}

var errTracingClosed = errors.New("tracing: the exporter was retired; its spans were counted as dropped")

// countingExporter tells its queue of each batch exported or failed.
type countingExporter struct {
	sdktrace.SpanExporter
	q *boundedQueue
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.q.closed.Load() {
		// The wait of shutdown is over, and close counted what was
		// left: the batch processor's drain of its queue must not go on
		// trying a collector that does not answer, 5 s a batch.
		return errTracingClosed
	}
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if e.q.closed.Load() {
		return err // close counted them
	}
	e.q.pending.Add(-int64(len(spans)))
	if err != nil {
		e.q.dropped.Add(float64(len(spans)))
	}
	return err
}

// Attributes of floodgate's own, beside the HTTP semantic conventions'.
const (
	attrRoute        = attribute.Key("floodgate.route")
	attrRequestID    = attribute.Key("floodgate.request_id")
	attrResult       = attribute.Key("floodgate.result")
	attrBreakerState = attribute.Key("floodgate.breaker.state")
	attrBreakerAllow = attribute.Key("floodgate.breaker.allowed")
	attrLimitOutcome = attribute.Key("floodgate.limit.outcome")
	attrLimitLocal   = attribute.Key("floodgate.limit.local")
	attrLimitName    = attribute.Key("floodgate.limit.name")
	attrLimitShadow  = attribute.Key("floodgate.limit.shadowed")
	attrStore        = attribute.Key("floodgate.store")
)

// startTrace starts the request's server span, the child of the
// traceparent the request carries, if any (a sampled parent is followed
// whatever tracing.sample says).
func (x *exchange) startTrace() {
	t, r := x.gen.trace, x.r
	parent := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(r.Header))
	if sc := trace.SpanContextFromContext(parent); sc.TraceState().Len() > 0 && len(sc.TraceState().String()) > traceStateMax {
		// Followed, but not carried on every span and to the upstream.
		parent = trace.ContextWithRemoteSpanContext(parent, sc.WithTraceState(trace.TraceState{}))
	}
	ctx, span := t.tracer.Start(parent, spanMethod(r.Method), trace.WithSpanKind(trace.SpanKindServer))
	x.span, x.spanCtx, x.rec = span, ctx, span.IsRecording()
	if x.rec {
		span.SetAttributes(
			semconv.HTTPRequestMethodKey.String(methodAttr(r.Method)),
			semconv.NetworkProtocolVersion(protoVersion(r)),
			attrRequestID.String(x.rid),
		)
	}
}

// methodAttr is the method as the HTTP conventions name it: a method
// other than HTTP's own is "_OTHER", so that a client cannot make up as
// many span names and attribute values as it likes.
func methodAttr(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// spanMethod is the method in a span's name: "HTTP" for one not HTTP's.
func spanMethod(m string) string {
	if m = methodAttr(m); m == "_OTHER" {
		return "HTTP"
	}
	return m
}

func protoVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 2:
		return "2"
	case r.ProtoMinor == 0:
		return "1.0"
	}
	return "1.1"
}

// endTrace ends the server span of a request answered status.
func (x *exchange) endTrace(status int, result accessResult) {
	if x.rec {
		span := x.span
		if x.route != nil {
			span.SetName(spanMethod(x.r.Method) + " " + x.route.id)
			span.SetAttributes(attrRoute.String(x.route.id))
		}
		span.SetAttributes(semconv.HTTPResponseStatusCode(status), attrResult.String(accessResults[result]))
		if x.path != "" {
			span.SetAttributes(semconv.URLPath(x.path))
		}
		if x.host != "" {
			span.SetAttributes(semconv.ServerAddress(x.host))
		}
		if x.client.IsValid() {
			span.SetAttributes(semconv.ClientAddress(x.client.String()))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
	}
	x.span.End()
}

// startStep starts the span of one step of a traced request, a child of
// its server span; nil when the request is not traced.
func (x *exchange) startStep(name string, kind trace.SpanKind) trace.Span {
	if !x.rec {
		return nil
	}
	_, s := x.gen.trace.tracer.Start(x.spanCtx, name, trace.WithSpanKind(kind))
	return s
}

// endBreaker ends the breaker step's span: the state it found, and
// whether it let the request through.
func endBreaker(s trace.Span, b *breaker.Breaker, err error) {
	s.SetAttributes(attrBreakerState.String(b.State().String()), attrBreakerAllow.Bool(err == nil))
	s.End()
}

// startLimits starts the limit step's span, and makes it the parent of
// the store's.
func (x *exchange) startLimits() trace.Span {
	if !x.rec {
		return nil
	}
	ctx, s := x.gen.trace.tracer.Start(x.spanCtx, "limit", trace.WithSpanKind(trace.SpanKindInternal))
	x.limitCtx = ctx
	return s
}

// endLimits ends the limit step's span with its outcome: allowed,
// rejected, key_required or error (the store failed and on_error said
// deny, or the step failed); and local, whether the decision came from
// this instance's memory rather than a store's answer: with the memory
// store always; with Redis for local rejects (Decision.Local) and for a
// store that failed, decided by on_error.
func endLimits(s trace.Span, v *verdict, err error) {
	outcome := "allowed"
	switch {
	case err != nil:
		outcome = "error"
	case v.missing:
		outcome = "key_required"
	case v.reject != nil:
		outcome = "rejected"
	}
	s.SetAttributes(attrLimitOutcome.String(outcome), attrLimitLocal.Bool(!v.remote))
	if v.reason >= 0 {
		s.SetAttributes(attrLimitName.String(v.specs[v.reason].name))
	}
	if v.shadowed {
		s.SetAttributes(attrLimitShadow.Bool(true))
	}
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// traceStore records the store call of the limit step, made from start
// until now, if it asked a store across the network: a Redis store that
// answered from its memory (local rejects) made no call, and the memory
// store never does. The span is made once the call returned, with the
// call's times, as only then is it known whether there was one. An
// admission from a leased slice (sync: lease) cannot be told from one
// Redis made: the store does not say, and it has a span too.
func (x *exchange) traceStore(v *verdict, res *limit.Result, err error, start time.Time) {
	gen := x.gen
	if gen.store == limit.Store(gen.local) || err == nil && res.AnsweredLocally() {
		return
	}
	v.remote = err == nil
	_, s := gen.trace.tracer.Start(x.limitCtx, "store",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start))
	s.SetAttributes(attrStore.String(string(gen.cfg.Store.Type)), semconv.DBSystemNameRedis)
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// startUpstream sets the traceparent the upstream gets, that of the
// exchange's client span when the request is traced, of its (unsampled)
// server span else, in place of any the client sent; and returns the
// client span, or nil.
func (x *exchange) startUpstream(h http.Header) trace.Span {
	delete(h, "Traceparent")
	delete(h, "Tracestate")
	ctx, s := x.spanCtx, trace.Span(nil)
	if x.rec {
		ctx, s = x.gen.trace.tracer.Start(x.spanCtx, "upstream", trace.WithSpanKind(trace.SpanKindClient))
		s.SetAttributes(semconv.HTTPRequestMethodKey.String(methodAttr(x.r.Method)))
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	return s
}

// endUpstream ends the upstream exchange's span with how it went.
func endUpstream(s trace.Span, o *upstream.Result) {
	if o.Target != "" {
		if u, err := url.Parse(o.Target); err == nil {
			s.SetAttributes(semconv.ServerAddress(u.Hostname()))
			if p, err := strconv.Atoi(u.Port()); err == nil {
				s.SetAttributes(semconv.ServerPort(p))
			}
		}
	}
	if o.Exchanged() && o.Err == nil || o.Head {
		s.SetAttributes(semconv.HTTPResponseStatusCode(o.Status))
	}
	switch {
	case o.Err != nil:
		s.SetAttributes(semconv.ErrorTypeKey.String(o.Kind()))
		s.SetStatus(codes.Error, o.Err.Error())
	case o.Failed() || o.Status >= 500:
		s.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(o.Status)))
		s.SetStatus(codes.Error, strconv.Itoa(o.Status))
	}
	s.End()
}
