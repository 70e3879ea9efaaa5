package gateway

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/internal/tracing"
	"github.com/floodgate-gw/floodgate/internal/upstream"
	"github.com/floodgate-gw/floodgate/limit"
)

// A generation without tracing has a nil *tracing.Provider, and a request
// on it makes no span, reads no traceparent and allocates nothing for
// tracing: every step asks x.rec, false, before anything else.
//
// The spans of a request live in its exchange, not in the request's
// context: a request the gateway sends on is the one it received
// (forward), and r.WithContext would copy it.

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
	if sc := trace.SpanContextFromContext(parent); sc.TraceState().Len() > 0 && len(sc.TraceState().String()) > tracing.StateMax {
		// Followed, but not carried on every span and to the upstream.
		parent = trace.ContextWithRemoteSpanContext(parent, sc.WithTraceState(trace.TraceState{}))
	}
	ctx, span := t.Tracer.Start(parent, spanMethod(r.Method), trace.WithSpanKind(trace.SpanKindServer))
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
	_, s := x.gen.trace.Tracer.Start(x.spanCtx, name, trace.WithSpanKind(kind))
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
	ctx, s := x.gen.trace.Tracer.Start(x.spanCtx, "limit", trace.WithSpanKind(trace.SpanKindInternal))
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
		s.SetAttributes(attrLimitName.String(v.specs[v.reason].Name))
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
	_, s := gen.trace.Tracer.Start(x.limitCtx, "store",
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
		ctx, s = x.gen.trace.Tracer.Start(x.spanCtx, "upstream", trace.WithSpanKind(trace.SpanKindClient))
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
