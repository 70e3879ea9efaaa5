package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway/clientip"
	"github.com/floodgate-gw/floodgate/internal/accesslog"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/leases"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/pathclean"
	"github.com/floodgate-gw/floodgate/internal/tracing"
	"github.com/floodgate-gw/floodgate/internal/upstream"
	"github.com/floodgate-gw/floodgate/internal/usagepool"
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
	storeErrLog *logsample.Sampler
	framingLog  *logsample.Sampler // requests refused for their framing
	storeDown   atomic.Bool        // the store failed, and has not answered since
	// storeFailedAt is the Unix ns of the store's last failure.
	storeFailedAt atomic.Int64

	local     *memory.Store          // the memory store, and the local fallback of Redis
	instances atomic.Int64           // gateway instances alive in the store when it last answered
	version   string                 // Options.Version
	digest    atomic.Pointer[string] // Options.ConfigDigest, then SetConfigDigest's
	started   time.Time

	pools   pools        // what outlives a generation (pools.go)
	grace   atomic.Int64 // ns a retired generation's requests have to end
	closing atomic.Bool  // Close is under way: what goes, goes at once
	// abandoning is set while a build that failed gives back what it
	// took (reloadMu is held): what goes, goes at once.
	abandoning atomic.Bool
	reg        prometheus.Registerer

	access *accesslog.Log // the access log's queue and writer
	stdout io.Writer      // server.access_log: stdout
	stderr io.Writer      // server.access_log: stderr

	reloadMu  sync.Mutex
	stop      chan struct{}
	closeOnce sync.Once
	bg        sync.WaitGroup
	upgrades  upstream.Upgrades // requests that switched protocols
	health    *upstream.Registry
}

// upgradeCloseWait bounds how long Close waits for the handlers of joined
// connections to release their leases.
const upgradeCloseWait = 5 * time.Second

// generation is one configuration, built and ready to serve: each request
// runs on the generation it started with, which a reload replaces for
// the requests after it.
type generation struct {
	lease    *usagepool.Lease // what it holds of the gateway's pools
	cfg      *config.Config   // file with the runtime overrides laid over it
	file     *config.Config   // as the file has it
	routes   []*route
	recorder *events.Recorder // nil: events are not recorded
	store    limit.Store      // the memory store is g.local; a Redis one is closed when a reload replaces it
	bus      *fleetbus.Bus    // the Redis store's fleet bus; nil with the memory store
	local    *memory.Store    // decides on_error: local
	share    func() float64
	ips      *clientip.Resolver
	ipKeys   *ipKeys           // the ip key parts of recent clients; nil: no limit has one
	jwt      *tokens           // nil: no server.jwt
	trace    *tracing.Provider // nil: tracing.otlp is empty, and requests make no spans

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

// upstreams are the upstreams of gen's routes.
func (gen *generation) upstreams() []*upstream.Upstream {
	ups := make([]*upstream.Upstream, len(gen.routes))
	for i, r := range gen.routes {
		ups[i] = r.upstream
	}
	return ups
}

func (gen *generation) localShare() float64 {
	if gen.share == nil {
		return 1
	}
	return gen.share()
}

// outcome is how a request ended: the upstream exchange, if there was
// one, and what the gateway decided, as the access log says it.
type outcome struct {
	upstream.Result
	result accessResult  // what the gateway decided
	limit  string        // the limit that rejected the request
	joined time.Duration // how long a connection joined after a switch of protocols ran
}

// answered is the outcome of a request the gateway answered itself with
// status, as result says.
func answered(status int, result accessResult) outcome {
	return outcome{Result: upstream.Result{Status: status, Head: true}, result: result}
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
	if r.Header["Upgrade"] != nil || upstream.HasToken(r.Header["Connection"], "upgrade") {
		// After a request to switch protocols the client may send the
		// new protocol's bytes (WebSocket frames) without waiting for the
		// 101. The listener's framing.Conn holds them until the answer,
		// and ends the connection before them unless it switched; any
		// answer but the 101 says so to the client. The 101 drops the
		// field.
		w.Header()["Connection"] = []string{"close"}
		if g.upgrades.Enter() {
			// Counted until every deferred step, lease release included,
			// has run.
			defer g.upgrades.Leave()
		}
		if r.ProtoMajor == 1 {
			dropH2CUpgrade(r.Header)
		}
	}

	if r.ProtoMajor == 2 {
		trimFieldValues(r.Header)
	}
	x.rid = g.ids.Use(r, w, x.gen.ridHeader)
	x.grpc = answer.IsGRPC(r)
	if x.gen.trace != nil {
		x.startTrace()
	}
	o := g.route(w, &x)
	g.finish(w, &x, &o)
}

// route routes the request and serves it on its route: an answer of the
// gateway's own to a request it cannot route.
func (g *Gateway) route(w http.ResponseWriter, x *exchange) outcome {
	r, gen := x.r, x.gen
	path, err := pathclean.Clean(r.URL.EscapedPath())
	if err != nil || strings.IndexByte(r.RequestURI, '#') >= 0 || r.Method == http.MethodConnect || malformed(r) {
		// A request target has no fragment (RFC 9112 §3.2); passed on,
		// an upstream that cuts it off would read another query than the
		// one the limits' keys were made of. CONNECT asks for a tunnel to
		// the authority it names (RFC 9110 §9.3.6, RFC 9113 §8.5): it has
		// no path to route, and a gateway is no forward proxy. What
		// HTTP/1.1 refuses but HTTP/2 lets through is refused on HTTP/2
		// too (malformed).
		x.path = r.URL.EscapedPath()
		x.reply(w, gen.badRequest, "")
		return answered(gen.badRequest.Status, resultBadRequest)
	}
	x.path, x.host = path, hostOf(r)
	x.route = gen.match(r.Method, x.host, x.path)
	if x.route == nil {
		x.reply(w, gen.notFound, "")
		return answered(gen.notFound.Status, resultNotFound)
	}
	if x.grpc {
		if refused := x.refuseGRPC(); refused != nil {
			// Before the breaker and the limits: the request would fail
			// whatever they said, and counts against neither.
			x.reply(w, refused, "")
			return answered(refused.Status, resultGRPCRefused)
		}
	}
	return g.serveRoute(w, x)
}

// finish ends a request, whichever way it went: its metrics, its access
// log line and its span.
func (g *Gateway) finish(w http.ResponseWriter, x *exchange, o *outcome) {
	if x.route == nil {
		x.count(w, x.gen.noRoute, o.Status)
	} else {
		x.count(w, x.route.metrics, o.Status)
		// A connection joined after a switch of protocols counts until
		// the switch, not for its life.
		x.route.metrics.duration.Observe((g.now().Sub(x.start) - o.joined).Seconds())
	}
	if x.gen.accessLog {
		g.logAccess(w, x, o)
	}
	if x.span != nil {
		x.endTrace(o.Status, o.result)
	}
	// A gRPC call whose answer broke off was ended with a status in its
	// trailers, unless the client is gone.
	ended := x.grpc && o.End != upstream.ClientGone
	if o.Broken() && !ended || o.Status == upstream.StatusClientClosed && !o.Head {
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
	report := func(o upstream.Result) {
		if done == nil {
			return
		}
		// Requests the limit step refused, and clients that went away,
		// say nothing about the upstream: they free a trial slot without
		// counting.
		done(breaker.Outcome{
			Failed:    !o.Cancelled() && rb.failed(&o),
			Duration:  o.Took,
			Cancelled: o.Cancelled(),
		}, g.now())
		done = nil
	}
	o := g.limitAndForward(w, x, report)
	report(o.Result)
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
func (g *Gateway) limitAndForward(w http.ResponseWriter, x *exchange, report func(upstream.Result)) outcome {
	r := x.r
	xff := r.Header["X-Forwarded-For"]
	x.resolveClient()
	if o, refused := g.boundBody(w, x); refused {
		return o
	}
	if sb, ok := r.Body.(*slowBody); ok {
		defer sb.end()
	}
	if x.route.protect != nil {
		if o, ok := g.room(w, x); !ok {
			return o
		}
	}

	v, o, refused := g.limit(w, x)
	defer v.free()
	if refused {
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
		case <-r.Context().Done():
			t.Stop()
			g.audit(x, &v) // admitted, and its quota spent
			return outcome{Result: upstream.Result{Status: upstream.StatusClientClosed}}
		}
	}
	setForwarded(x, xff)
	if x.route.protect != nil {
		// After the route's limits: protection never admits what they
		// would not.
		if o, ok := g.admit(w, x); !ok {
			return o
		}
	}
	// An admission is audited once the request is on its way to the
	// upstream: one that protection turned away is its event alone, so a
	// replay never takes the admission of a request for another request
	// of its user's.
	g.audit(x, &v)
	return g.forward(w, x, &v, report)
}

// boundBody bounds the request's body by server.max_body_bytes and
// server.body_timeout; it refuses a request whose declared length is
// over the bound.
func (g *Gateway) boundBody(w http.ResponseWriter, x *exchange) (o outcome, refused bool) {
	r, gen := x.r, x.gen
	if gen.maxBody > 0 {
		if r.ContentLength > gen.maxBody {
			x.reply(w, gen.tooLarge, "")
			return answered(gen.tooLarge.Status, resultTooLarge), true
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, gen.maxBody)
		}
	}
	if gen.bodyTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
		r.Body = &slowBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: gen.bodyTimeout}
	}
	return outcome{}, false
}

// limit runs the limit step: the verdict, and whether the request was
// refused (by a limit, for a missing key, or because the store failed),
// with how. The caller frees the verdict once the exchange is done.
func (g *Gateway) limit(w http.ResponseWriter, x *exchange) (verdict, outcome, bool) {
	var ls trace.Span
	if len(x.route.limits) > 0 {
		ls = x.startLimits()
	}
	v, err := g.decide(x.r.Context(), x)
	if ls != nil {
		endLimits(ls, &v, err)
	}
	if err != nil {
		if !errors.Is(err, errStoreDenied) {
			g.log.Error("limit step failed", "request_id", x.rid, "route", x.route.id, "error", err.Error())
		}
		x.reply(w, x.gen.limiterUnavailable, "")
		return v, answered(x.gen.limiterUnavailable.Status, resultLimiterUnavailable), true
	}
	if v.reject != nil {
		g.audit(x, &v)
	}
	if v.shadowed {
		g.logShadowed(x, &v)
	}
	if v.reject == nil {
		return v, outcome{}, false
	}
	v.setHeaders(w.Header())
	x.reply(w, v.reject, "")
	o := answered(v.reject.Status, resultKeyRequired)
	if v.reason >= 0 {
		g.logRejection(x, &v)
		o.result, o.limit = resultLimited, v.specs[v.reason].Name
	}
	return v, o, true
}

// setForwarded sets the X-Forwarded fields of the request the upstream
// gets; xff is the client's X-Forwarded-For, as it came.
//
// The three values share one array, each slice capped at its own. A
// trusted proxy in front saw the client's scheme and host, which the
// gateway did not; from any other peer they are the gateway's own, and a
// Forwarded header (RFC 7239), which the gateway does not rewrite, goes
// too, so that nothing the client wrote passes as a proxy's word.
func setForwarded(x *exchange, xff []string) {
	r := x.r
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
	fw := &[3]string{x.gen.ips.ForwardedFor(clientip.Peer(r.RemoteAddr), x.trusted, xff), proto, fhost}
	r.Header["X-Forwarded-For"] = fw[0:1:1]
	r.Header["X-Forwarded-Proto"] = fw[1:2:2]
	r.Header["X-Forwarded-Host"] = fw[2:3:3]
}

// forward runs the upstream exchange of an admitted request, and answers
// for the upstream when the exchange failed before a head went to the
// client.
func (g *Gateway) forward(w http.ResponseWriter, x *exchange, v *verdict, report func(upstream.Result)) outcome {
	r := x.r
	var answered func(upstream.Result)
	switch {
	case x.guard.rp != nil:
		// At the head: a trial's report, and protection's count.
		answered = func(res upstream.Result) {
			if x.trial {
				report(res)
			}
			x.ended(&res, w.Header())
		}
	case x.trial:
		answered = report
	}
	if x.route.upstream.HTTP2() && r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody {
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
	o := outcome{Result: x.route.upstream.Forward(w, r, x.path, v.setHeaders, answered)}
	if us != nil {
		endUpstream(us, &o.Result)
	}
	x.ended(&o.Result, w.Header()) // an exchange without a head, or a switch of protocols
	if o.Join != nil {
		report(o.Result)
		start := g.now()
		o.Join()
		o.joined = g.now().Sub(start)
	}
	if o.Head || o.Status == upstream.StatusClientClosed {
		if o.Failed() || o.Status >= 500 {
			g.logUpstreamFailure(x, &o.Result, o.Status)
		}
		if errors.Is(o.Err, upstream.ErrSendTimeout) {
			g.logSendTimeout(x, &o.Result)
		}
		return o
	}
	g.answerFailure(w, x, v, &o)
	return o
}

// answerFailure answers for an upstream exchange that failed before its
// head went to the client: the gateway's answer for how it failed.
func (g *Gateway) answerFailure(w http.ResponseWriter, x *exchange, v *verdict, o *outcome) {
	r, gen := x.r, x.gen
	client := o.End == upstream.ClientBody
	a := gen.upstreamUnavailable
	switch {
	case client && o.Status == http.StatusRequestEntityTooLarge:
		a = gen.tooLarge
	case client && o.Status == http.StatusRequestTimeout:
		a = gen.requestTimeout
	case client:
		a = gen.badRequest
	case o.End == upstream.TimedOut || o.End == upstream.Deadline:
		a = gen.upstreamTimeout
	}
	if client && r.ProtoMajor == 1 {
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
	o.Status = a.Status
	if !client && o.End != upstream.Deadline && o.Err != nil {
		g.logUpstreamFailure(x, &o.Result, a.Status)
	}
}

// logUpstreamFailure writes the WARN line of an exchange that failed:
// the gateway answered status for it (502, 504), the upstream answered
// 5xx, or the body broke off after the head. What the answer cannot
// say, the log does: which target failed, how and after how long. The
// lines are sampled per route as rejections are, and the count of those
// not logged follows once a second.
func (g *Gateway) logUpstreamFailure(x *exchange, o *upstream.Result, status int) {
	if !x.route.failLog.Allow(g.now().Unix()) {
		return
	}
	msg := "upstream failed"
	if o.Err == nil {
		msg = "upstream answered " + strconv.Itoa(o.Status)
	}
	attrs := []slog.Attr{
		slog.String("request_id", x.rid),
		slog.String("route", x.route.id),
		slog.Int("status", status),
	}
	if o.Err != nil {
		attrs = append(attrs, slog.String("error", o.Err.Error()))
	}
	attrs = append(attrs,
		slog.String("kind", o.Kind()),
		slog.String("target", o.Target),
		slog.Float64("duration", o.Took.Seconds()),
	)
	g.log.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}

// logSendTimeout logs an exchange ended by server.send_timeout, sampled
// with the route's upstream failures.
func (g *Gateway) logSendTimeout(x *exchange, o *upstream.Result) {
	if !x.route.failLog.Allow(g.now().Unix()) {
		return
	}
	g.log.LogAttrs(context.Background(), slog.LevelWarn, "client stopped reading",
		slog.String("request_id", x.rid),
		slog.String("route", x.route.id),
		slog.String("remote_addr", x.r.RemoteAddr),
		slog.Int64("bytes", o.Bytes),
		slog.String("target", o.Target),
	)
}

// holdLeases renews concurrency leases while the exchange runs (a response
// may stream for longer than a lease lives) and returns the function that
// releases them. The release is sent even when the decision timed out,
// because the lease id is ours and releasing an absent lease is harmless.
func (g *Gateway) holdLeases(store limit.Store, lease string, ls []limit.Limit) func() {
	return leases.Hold(g.log, g.now, store, lease, ls)
}
