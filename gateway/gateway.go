package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway/clientip"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/pathclean"
	"github.com/floodgate-gw/floodgate/internal/topk"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// Gateway is the HTTP handler that routes, limits and proxies. Its
// configuration is swapped atomically on reload: each request runs on the
// generation it started with.
type Gateway struct {
	gen         atomic.Pointer[generation]
	now         func() time.Time      // the clock: Options.Now
	forces      forces                // timers of breakers forced for a while
	fleet       fleetNonces           // fleet actions already carried out
	keptForces  keptForces            // fleet forces carried out (fleetforces.go)
	ov          overrides             // the runtime overrides in force; reloadMu guards it
	ovNotify    chan struct{}         // wakes syncOverrides
	ovVersion   atomic.Pointer[int64] // the version of the overrides in force, announced
	announceNow chan struct{}         // wakes announce
	ovWarned    atomic.Int64          // Unix seconds of the last warning that the overrides could not be read
	metrics     *Metrics
	log         *slog.Logger
	recordWait  time.Duration // Options.RecordWait
	ids         *answer.IDSource
	storeErrLog *sampler
	framingLog  *sampler    // requests refused for their framing
	storeDown   atomic.Bool // the store failed, and has not answered since
	// storeFailedAt is the Unix ns of the store's last failure.
	storeFailedAt atomic.Int64

	local     *memory.Store          // the memory store, and the local fallback of Redis
	instances atomic.Int64           // gateway instances alive in the store when it last answered
	version   string                 // Options.Version
	digest    atomic.Pointer[string] // Options.ConfigDigest, then SetConfigDigest's
	started   time.Time

	mu       sync.Mutex
	samplers map[string]*sampler     // by route and limit, kept across reloads
	tops     map[string]*topk.Sketch // rejected keys by route and limit (topkeys.go)
	failLogs map[string]*sampler     // upstream failures by route, kept across reloads
	clients  map[string]upstreamClient
	breakers map[string]*routeBreaker // by route, kept across reloads
	reg      prometheus.Registerer

	recorder      *events.Recorder // nil: no sink
	recorderCfg   config.Events
	recorderStore config.Store

	access *accessLog // the access log's queue and writer
	stdout io.Writer  // server.access_log: stdout
	stderr io.Writer  // server.access_log: stderr

	reloadMu  sync.Mutex
	stop      chan struct{}
	closeOnce sync.Once
	bg        sync.WaitGroup
	upgrades  upgrades // requests that switched protocols
	health    healthRegistry
}

// upgradeCloseWait bounds how long Close waits for the handlers of joined
// connections to release their leases.
const upgradeCloseWait = 5 * time.Second

// generation is one configuration, built and ready to serve: each request
// runs on the generation it started with, which a reload replaces for
// the requests after it.
type generation struct {
	cfg      *config.Config // file with the runtime overrides laid over it
	file     *config.Config // as the file has it
	routes   []*route
	recorder *events.Recorder // nil: events are not recorded
	store    limit.Store      // the memory store is g.local; a Redis one is closed when a reload replaces it
	bus      *fleetbus.Bus    // the Redis store's fleet bus; nil with the memory store
	local    *memory.Store    // decides on_error: local
	share    func() float64
	ips      *clientip.Resolver
	ipKeys   *ipKeys  // the ip key parts of recent clients; nil: no limit has one
	jwt      *tokens  // nil: no server.jwt
	trace    *tracing // nil: tracing.otlp is empty, and requests make no spans

	accessLog   bool   // server.access_log is not off
	ridHeader   string // canonical
	maxBody     int64
	bodyTimeout time.Duration

	keyRequired, notFound, badRequest, tooLarge, headersTooLarge, requestTimeout,
	limiterUnavailable, upstreamTimeout, upstreamUnavailable *answer.Answer
	badGRPCTimeout     *answer.Answer // to a gRPC request whose grpc-timeout is malformed
	grpcDeadlinePassed *answer.Answer // to a gRPC request whose grpc-timeout is 0
	noRoute            *routeMetrics
}

func (gen *generation) localShare() float64 {
	if gen.share == nil {
		return 1
	}
	return gen.share()
}

// ServeHTTP serves one request: clean, route, limit, proxy, answer.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Until the connection goes idle, what it carries is this handler's
	// answer, which Listener leaves as it is.
	markHandled(r)
	if r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody {
		// The gateway wraps the body (max_body_bytes, body_timeout, the
		// upstream client's watch) and sends the request on, so it works
		// on a copy: net/http's server tells by its own Request's Body
		// whether a body was closed with some of it unread, and then
		// ends the connection. With a wrapper in its place it reads on
		// from the middle of the body as if a request began there: a
		// body whose upstream answered before reading it all, and which
		// http.Transport then closed, would have its rest read as
		// requests, unchecked.
		rc := *r
		r = &rc
	}
	x := exchange{r: r, gen: g.gen.Load(), start: g.now()}
	gen := x.gen
	if r.Header["Upgrade"] != nil || hasToken(r.Header["Connection"], "upgrade") {
		// After a request to switch protocols the client may send the
		// new protocol's bytes (WebSocket frames) without waiting for the
		// 101. The listener's framing.Conn holds them until the answer,
		// and ends the connection before them unless it switched; any
		// answer but the 101 says so to the client. The 101 drops the
		// field.
		w.Header()["Connection"] = []string{"close"}
		if g.upgrades.enter() {
			// Counted until every deferred step, lease release included,
			// has run.
			defer g.upgrades.leave()
		}
		if r.ProtoMajor == 1 {
			dropH2CUpgrade(r.Header)
		}
	}

	if r.ProtoMajor == 2 {
		trimFieldValues(r.Header)
	}
	x.rid = g.ids.Use(r, w, gen.ridHeader)
	x.grpc = answer.IsGRPC(r)
	if gen.trace != nil {
		x.startTrace()
	}

	path, err := pathclean.Clean(r.URL.EscapedPath())
	if err != nil || strings.IndexByte(r.RequestURI, '#') >= 0 || r.Method == http.MethodConnect || malformed(r) {
		// A request target has no fragment (RFC 9112 §3.2); passed on,
		// an upstream that cuts it off would read another query than the
		// one the limits' keys were made of. CONNECT asks for a tunnel to
		// the authority it names (RFC 9110 §9.3.6, RFC 9113 §8.5): it has
		// no path to route, and a gateway is no forward proxy. What
		// HTTP/1.1 refuses but HTTP/2 lets through is refused on HTTP/2
		// too (malformed).
		x.reply(w, gen.badRequest, "")
		x.count(w, gen.noRoute, gen.badRequest.Status)
		if gen.accessLog {
			x.path = r.URL.EscapedPath()
			g.logAccess(w, &x, &outcome{status: gen.badRequest.Status, result: resultBadRequest})
		}
		if x.span != nil {
			x.endTrace(gen.badRequest.Status, resultBadRequest)
		}
		return
	}
	x.path, x.host = path, hostOf(r)
	x.route = gen.match(r.Method, x.host, x.path)
	if x.route == nil {
		x.reply(w, gen.notFound, "")
		x.count(w, gen.noRoute, gen.notFound.Status)
		if gen.accessLog {
			g.logAccess(w, &x, &outcome{status: gen.notFound.Status, result: resultNotFound})
		}
		if x.span != nil {
			x.endTrace(gen.notFound.Status, resultNotFound)
		}
		return
	}
	var refused *answer.Answer
	if x.grpc {
		refused = x.refuseGRPC()
	}
	var o outcome
	if refused != nil {
		// Before the breaker and the limits: the request would fail
		// whatever they said, and counts against neither.
		x.reply(w, refused, "")
		o = outcome{status: refused.Status, written: true, result: resultGRPCRefused}
	} else {
		o = g.serveRoute(w, &x)
	}
	x.count(w, x.route.metrics, o.status)
	// A connection joined after a switch of protocols counts until the
	// switch, not for its life.
	x.route.metrics.duration.Observe((g.now().Sub(x.start) - o.joined).Seconds())
	if gen.accessLog {
		g.logAccess(w, &x, &o)
	}
	if x.span != nil {
		x.endTrace(o.status, o.result)
	}
	if o.aborted && !o.ended || o.status == statusClientClosed && !o.written {
		// Closing the connection is the only way left to tell the client
		// that the body it is reading is incomplete; and a client that
		// went away (or only half-closed) must not be sent the empty 200
		// that net/http would answer for a handler that wrote nothing.
		panic(http.ErrAbortHandler)
	}
}

// serveRoute runs the limit step and the upstream exchange of a routed
// request and returns what happened: the status it answered with, and
// whether the response broke off.
func (g *Gateway) serveRoute(w http.ResponseWriter, x *exchange) outcome {
	// An open breaker answers before anything else is decided: the request
	// consumes no quota and costs no store round trip.
	//
	// done stays in this function (Allow's record of the call then lives
	// on the stack): report, which closes over it, is only called.
	var done func(breaker.Outcome, time.Time)
	rb := x.route.breaker
	if rb != nil {
		var err error
		bs := x.startStep("breaker", trace.SpanKindInternal)
		done, err = rb.b.Allow(g.now())
		if bs != nil {
			endBreaker(bs, rb.b, err)
		}
		if err != nil {
			return g.refuse(w, x, err)
		}
		// A trial call is judged when its answer's head arrives, by its
		// status and how long the head took, as the trial's timeout (the
		// upstream timeout) counts to the head: a body that streams for
		// longer must not fail it.
		x.trial = rb.b.State() == breaker.HalfOpen
	}
	report := func(o outcome) {
		if done == nil {
			return
		}
		// Requests the limit step refused, and clients that went away,
		// say nothing about the upstream: they free a trial slot without
		// counting.
		done(breaker.Outcome{
			Failed:    !o.cancelled() && rb.failed(o),
			Duration:  o.took,
			Cancelled: o.cancelled(),
		}, g.now())
		done = nil
	}
	o := g.limitAndForward(w, x, report)
	report(o)
	return o
}

// forwardedProto is the scheme a trusted proxy passed on in vv, the
// request's X-Forwarded-Proto lines, if it is http or https; else own.
func forwardedProto(vv []string, own string) string {
	switch first := firstEntry(vv); {
	case strings.EqualFold(first, "https"):
		return "https"
	case strings.EqualFold(first, "http"):
		return "http"
	}
	return own
}

// forwardedHost is the host a trusted proxy passed on in vv, the request's
// X-Forwarded-Host lines, if it is a plausible host[:port]; else own.
func forwardedHost(vv []string, own string) string {
	first := firstEntry(vv)
	if first == "" || len(first) > 255 || strings.ContainsAny(first, " \t/\\?#@\"") {
		return own
	}
	return first
}

// firstEntry is the first entry of a list header's lines, trimmed: the
// one the proxy nearest the client set. "" when there is none.
func firstEntry(vv []string) string {
	if len(vv) == 0 {
		return ""
	}
	first, _, _ := strings.Cut(vv[0], ",")
	return strings.TrimSpace(first)
}

// limitAndForward runs the limit step and, if the request is admitted, the
// upstream exchange.
//
// report tells the breaker how the exchange went; it is called here when
// the exchange switched protocols (the switch is its outcome, not the
// life of the connection after it) or, for a trial, as soon as the
// upstream's answer has its head, and by the caller otherwise.
func (g *Gateway) limitAndForward(w http.ResponseWriter, x *exchange, report func(outcome)) outcome {
	r, gen := x.r, x.gen
	xff := r.Header["X-Forwarded-For"]
	x.resolveClient()

	if gen.maxBody > 0 {
		if r.ContentLength > gen.maxBody {
			o := answerWith(w, x, gen.tooLarge)
			o.result = resultTooLarge
			return o
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, gen.maxBody)
		}
	}
	if gen.bodyTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
		sb := &slowBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: gen.bodyTimeout}
		defer sb.end()
		r.Body = sb
	}

	ctx := r.Context()
	var ls trace.Span
	if len(x.route.limits) > 0 {
		ls = x.startLimits()
	}
	v, err := g.decide(ctx, x)
	defer v.free()
	if ls != nil {
		endLimits(ls, &v, err)
	}
	if err != nil {
		if !errors.Is(err, errStoreDenied) {
			g.log.Error("limit step failed", "request_id", x.rid, "route", x.route.id, "error", err.Error())
		}
		o := answerWith(w, x, gen.limiterUnavailable)
		o.result = resultLimiterUnavailable
		return o
	}
	g.audit(x, &v)
	if v.shadowed {
		g.logShadowed(x, &v)
	}
	if v.reject != nil {
		v.setHeaders(w.Header())
		o := answerWith(w, x, v.reject)
		o.result = resultKeyRequired
		if v.reason >= 0 {
			g.logRejection(x, &v)
			o.result, o.limit = resultLimited, v.specs[v.reason].name
		}
		return o
	}
	if len(v.leases) > 0 {
		stop := g.holdLeases(v.store, v.lease, v.leases)
		defer stop()
	}
	if d := v.res.Delay; d > 0 {
		// A token bucket with queue admitted this request against a token
		// that is due in d: wait for it, unless the client leaves first.
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return outcome{status: statusClientClosed}
		}
	}

	// The three values share one array, each slice capped at its own. A
	// trusted proxy in front saw the client's scheme and host, which the
	// gateway did not; from any other peer they are the gateway's own, and
	// a Forwarded header (RFC 7239), which the gateway does not rewrite,
	// goes too, so that nothing the client wrote passes as a proxy's word.
	proto, fhost := "http", r.Host
	if r.TLS != nil {
		proto = "https"
	}
	if x.trusted {
		proto = forwardedProto(r.Header["X-Forwarded-Proto"], proto)
		fhost = forwardedHost(r.Header["X-Forwarded-Host"], fhost)
	} else {
		delete(r.Header, "Forwarded")
	}
	fw := &[3]string{gen.ips.ForwardedFor(clientip.Peer(r.RemoteAddr), x.trusted, xff), proto, fhost}
	r.Header["X-Forwarded-For"] = fw[0:1:1]
	r.Header["X-Forwarded-Proto"] = fw[1:2:2]
	r.Header["X-Forwarded-Host"] = fw[2:3:3]

	var answered func(outcome)
	if x.trial {
		answered = report
	}
	if x.route.upstream.http2 && r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody {
		// HTTP/2 sends the rest of the body while the answer comes back
		// (a bidirectional stream): an HTTP/1 server would otherwise
		// read the body to its end before the answer's first write. HTTP/2
		// clients have it anyway.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	var us trace.Span
	if x.span != nil {
		us = x.startUpstream(r.Header)
	}
	o := x.route.upstream.forward(w, r, x.path, v.setHeaders, answered)
	if us != nil {
		endUpstream(us, &o)
	}
	if o.join != nil {
		report(o)
		start := g.now()
		o.join()
		o.joined = g.now().Sub(start)
	}
	if o.written || o.status == statusClientClosed {
		if o.failed || o.status >= 500 {
			g.logUpstreamFailure(x, o, o.status)
		}
		if errors.Is(o.err, errSendTimeout) {
			g.logSendTimeout(x, o)
		}
		return o
	}
	a := gen.upstreamUnavailable
	switch {
	case o.client && o.status == http.StatusRequestEntityTooLarge:
		a = gen.tooLarge
	case o.client && o.status == http.StatusRequestTimeout:
		a = gen.requestTimeout
	case o.client:
		a = gen.badRequest
	case o.timeout:
		a = gen.upstreamTimeout
	}
	if o.client && r.ProtoMajor == 1 {
		// The request's body broke its framing or ended short: where the
		// next request would begin is in doubt, so none is read. Not so
		// on HTTP/2, whose streams each end on their own: net/http's
		// server would take the field for a request to end the whole
		// connection (a GOAWAY) and its other streams with it.
		w.Header()["Connection"] = []string{"close"}
		if ac, ok := r.Context().Value(connKey{}).(*answeringConn); ok {
			if e := ac.framing.Refused(); e != nil {
				g.logRefused(ac.RemoteAddr(), e)
			}
		}
	}
	v.setHeaders(w.Header())
	x.reply(w, a, "")
	o.status = a.Status
	if !o.client && !o.deadline && o.err != nil {
		g.logUpstreamFailure(x, o, a.Status)
	}
	return o
}

// logUpstreamFailure writes the WARN line of an exchange that failed:
// the gateway answered status for it (502, 504), the upstream answered
// 5xx, or the body broke off after the head. What the answer cannot
// say, the log does: which target failed, how and after how long. The
// lines are sampled per route as rejections are, and the count of those
// not logged follows once a second.
func (g *Gateway) logUpstreamFailure(x *exchange, o outcome, status int) {
	if !x.route.failLog.allow(g.now().Unix()) {
		return
	}
	msg := "upstream failed"
	if o.err == nil {
		msg = "upstream answered " + strconv.Itoa(o.status)
	}
	attrs := []slog.Attr{
		slog.String("request_id", x.rid),
		slog.String("route", x.route.id),
		slog.Int("status", status),
	}
	if o.err != nil {
		attrs = append(attrs, slog.String("error", o.err.Error()))
	}
	attrs = append(attrs,
		slog.String("kind", failureKind(o)),
		slog.String("target", o.target),
		slog.Float64("duration", o.took.Seconds()),
	)
	g.log.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}

// logSendTimeout logs an exchange ended by server.send_timeout, sampled
// with the route's upstream failures.
func (g *Gateway) logSendTimeout(x *exchange, o outcome) {
	if !x.route.failLog.allow(g.now().Unix()) {
		return
	}
	g.log.LogAttrs(context.Background(), slog.LevelWarn, "client stopped reading",
		slog.String("request_id", x.rid),
		slog.String("route", x.route.id),
		slog.String("remote_addr", x.r.RemoteAddr),
		slog.Int64("bytes", o.bytes),
		slog.String("target", o.target),
	)
}

// failureKind names how an exchange failed, for the log: a few words a
// query can count by, beside the error's own text.
func failureKind(o outcome) string {
	err := o.err
	switch {
	case err == nil:
		return "status"
	case o.deadline:
		return "grpc_deadline"
	case o.client && o.aborted:
		// The client's request stream failed under the answer: the code
		// its answer would have had before the head.
		switch classifyBody(err, outcome{}).status {
		case http.StatusRequestTimeout:
			return config.CodeRequestTimeout
		case http.StatusRequestEntityTooLarge:
			return "body_too_large"
		}
		return "bad_request"
	case errors.Is(err, errSendTimeout):
		return "send_timeout"
	case o.aborted && o.timeout:
		return "body_idle"
	case o.aborted:
		return "body_broken"
	case o.timeout:
		return "timeout"
	case errors.Is(err, errNoTarget):
		return "no_healthy_target"
	case errors.Is(err, errNotHTTP2):
		return "not_http2"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection_reset"
	case isTLS(err):
		return "tls"
	case isDial(err):
		return "dial"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	}
	return "protocol"
}

// isTLS says err is a TLS handshake's failure: the target's certificate
// did not verify, or the target refused the gateway's (an alert).
func isTLS(err error) bool {
	var ve *tls.CertificateVerificationError
	var re tls.RecordHeaderError
	var op *net.OpError
	return errors.As(err, &ve) || errors.As(err, &re) ||
		errors.As(err, &op) && op.Op == "remote error" // an alert the target sent

}

// answerWith writes one of the gateway's own answers.
func answerWith(w http.ResponseWriter, x *exchange, a *answer.Answer) outcome {
	x.reply(w, a, "")
	return outcome{status: a.Status, written: true}
}

// holdLeases renews concurrency leases while the exchange runs (a response
// may stream for longer than a lease lives) and returns the function that
// releases them. The release is sent even when the decision timed out,
// because the lease id is ours and releasing an absent lease is harmless.
func (g *Gateway) holdLeases(store limit.Store, lease string, leases []limit.Limit) func() {
	return holdLeases(g.log, g.now, store, lease, leases)
}

func holdLeases(log *slog.Logger, now func() time.Time, store limit.Store, lease string, leases []limit.Limit) func() {
	ttl := leases[0].Rule.LeaseTTL
	for _, l := range leases[1:] {
		ttl = min(ttl, l.Rule.LeaseTTL)
	}
	if ttl <= 0 {
		ttl = limit.DefaultLeaseTTL
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if err := store.Renew(ctx, now(), lease, leases...); err != nil {
					log.Warn("renewing a concurrency lease failed", "lease", lease, "error", err.Error())
				}
				cancel()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := store.Release(ctx, lease, leases...); err != nil {
			log.Warn("releasing a concurrency lease failed; it expires on its own", "lease", lease, "error", err.Error())
		}
	}
}
