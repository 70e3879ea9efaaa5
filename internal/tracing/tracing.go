// Package tracing exports the gateway's request spans over OTLP
// (tracing.otlp): a provider per tracing block, kept across reloads that
// leave the block alone, whose queue is bounded so that a collector that
// is down or slow costs requests nothing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/logsample"
)

// Provider is the export of request traces that one tracing block
// configures (tracing.otlp): the tracer the gateway's spans start from,
// a bounded queue, and the OTLP exporter behind it.
type Provider struct {
	provider *sdktrace.TracerProvider
	queue    *boundedQueue
	// Tracer starts the gateway's spans.
	Tracer trace.Tracer
}

// Spans wait for export in a queue of QueueLen; a span that finds it
// full is dropped, and counted. An export that fails (the collector is
// down or refuses the spans) drops its batch after the exporter's retries
// end, traceExportTimeout at most.
//
// A client decides much of what a span holds (its path, its method, the
// tracestate it sends) and can ask for every request to be traced: no
// attribute is longer than ValueMax, a tracestate longer than
// StateMax is not followed, and a batch of Batch spans stays
// far under the 4 MiB a gRPC collector takes by default.
const (
	QueueLen           = 2048
	Batch              = 256
	ValueMax           = 256
	StateMax           = 512
	traceBatchTimeout  = time.Second
	traceExportTimeout = 5 * time.Second
	// ShutdownWait bounds how long closing the gateway, or a reload's
	// retiring of a provider, waits for the spans queued to go.
	ShutdownWait = 2 * time.Second
)

// Options are what New needs besides the tracing block.
type Options struct {
	// Version is floodgate's, the spans' service.version; "": none.
	Version string
	// Dropped counts the spans dropped: the queue full, an export failed.
	Dropped prometheus.Counter
	// Log receives a line a second at most of the exports that failed,
	// by the clock Now.
	Log *slog.Logger
	Now func() time.Time
}

// New is the provider of cfg, or nil when cfg.OTLP is empty.
func New(cfg config.Tracing, o Options) (*Provider, error) {
	if cfg.OTLP == "" {
		return nil, nil
	}
	exp, err := newExporter(cfg.OTLP)
	if err != nil {
		return nil, fmt.Errorf("tracing.otlp: %w", err)
	}
	q := &boundedQueue{max: QueueLen, dropped: o.Dropped}
	q.SpanProcessor = sdktrace.NewBatchSpanProcessor(countingExporter{SpanExporter: exp, q: q},
		// Never more in the batch processor's queue than it holds:
		// boundedQueue keeps count, and drops (and counts) the rest.
		sdktrace.WithMaxQueueSize(QueueLen),
		sdktrace.WithMaxExportBatchSize(Batch),
		sdktrace.WithBatchTimeout(traceBatchTimeout),
		sdktrace.WithExportTimeout(traceExportTimeout),
	)
	attrs := []attribute.KeyValue{semconv.ServiceName("floodgate")}
	if o.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.Version))
	}
	limits := sdktrace.NewSpanLimits()
	limits.AttributeValueLengthLimit = ValueMax
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
	log, now := o.Log, o.Now
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		if logged.Allow(now().Unix()) {
			log.LogAttrs(context.Background(), slog.LevelWarn, "trace export failed; its spans are dropped",
				slog.String("error", err.Error()))
		}
	}))
	return &Provider{provider: tp, Tracer: tp.Tracer("github.com/floodgate-gw/floodgate/gateway"), queue: q}, nil
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

// Shutdown exports what is queued, within wait, and stops the provider;
// what it could not export is counted as dropped. A nil provider does
// nothing.
func (t *Provider) Shutdown(wait time.Duration) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_ = t.provider.Shutdown(ctx)
	t.queue.close()
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
