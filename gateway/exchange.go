package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate-gw/floodgate/internal/jwtverify"
)

// exchange is one request on its way through the gateway. ServeHTTP
// gathers it once, on its own stack, and hands it to each step: what the
// steps read of the request, and what they learn of it as they go.
type exchange struct {
	r     *http.Request
	gen   *generation // the configuration the request runs on
	route *route      // nil until a route takes the request
	rid   string      // the request id
	path  string      // cleaned; the request's own when it cannot be
	host  string      // lower case, without port
	start time.Time   // when the request arrived, by the gateway's clock
	grpc  bool        // a gRPC request (answer.IsGRPC): the gateway's answers are gRPC statuses

	// client is the client's address, as package clientip decides it
	// from the peer and X-Forwarded-For (the zero Addr until the limit
	// step or the breaker's record resolves it); trusted says the peer is
	// a trusted proxy.
	client  netip.Addr
	trusted bool

	// trial says the request is a trial call of the route's half-open
	// breaker, judged when the answer's head arrives.
	trial bool
	// guard is the request's admission by its route's protection, if the
	// route has one.
	guard guard

	// The request's trace, when its generation traces (tracing.go): the
	// server span and the context that carries it, the parent of the
	// steps' spans; limitCtx carries the limit step's, the store's
	// parent. rec says the server span records (it was sampled); the
	// steps make spans only then.
	span     trace.Span
	spanCtx  context.Context
	limitCtx context.Context
	rec      bool

	// What the key parts read, made when first needed.
	clientIP    string // the ip key part
	query       url.Values
	queryOK     bool
	tok         *jwtverify.Token // the verified token, once tokenRead
	tokenRead   bool
	claimFailed bool // a claim_type failure was counted
}

// resolveClient decides the client's address from the request as it
// came, before the gateway rewrites its X-Forwarded-For.
func (x *exchange) resolveClient() {
	x.client, x.trusted = x.gen.ips.Client(x.r.RemoteAddr, x.r.Header["X-Forwarded-For"])
}
