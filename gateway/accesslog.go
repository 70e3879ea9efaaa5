package gateway

import (
	"net/http"
	"strconv"

	"github.com/floodgate-gw/floodgate/internal/accesslog"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// The access log's line of a request is put together here, from what the
// request did; package accesslog writes it.

// The outcome of a request as the access log says it: what the gateway
// decided before the upstream was asked, if it was.
type accessResult uint8

const (
	resultAdmitted accessResult = iota // went upstream (or would have: the client left first)
	resultLimited                      // a limit rejected it
	resultBreaker                      // the route's open breaker turned it away
	resultNotFound
	resultBadRequest
	resultTooLarge
	resultKeyRequired
	resultLimiterUnavailable
	resultGRPCRefused // a gRPC request the route cannot take (grpc.go)
	resultOverloaded  // the route's protection turned it away (protect.go)
)

var accessResults = [...]string{
	resultAdmitted:           "admitted",
	resultLimited:            "limited",
	resultBreaker:            "breaker",
	resultNotFound:           "not_found",
	resultBadRequest:         "bad_request",
	resultTooLarge:           "body_too_large",
	resultKeyRequired:        "key_required",
	resultLimiterUnavailable: "limiter_unavailable",
	resultGRPCRefused:        "grpc_refused",
	resultOverloaded:         "overloaded",
}

// logAccess writes the access log line of x's request, answered with o.
func (g *Gateway) logAccess(w http.ResponseWriter, x *exchange, o *outcome) {
	r := x.r
	rec := accesslog.Record{
		Start:      x.start,
		RequestID:  x.rid,
		Client:     x.client,
		Method:     r.Method,
		Protocol:   r.Proto,
		Path:       x.path,
		Status:     o.Status,
		GRPCStatus: -1,
		Duration:   g.now().Sub(x.start),
		Bytes:      o.sent(w),
		Outcome:    accessResults[o.result],
		Limit:      o.limit,
		Upstream:   o.Exchanged(),
	}
	if !rec.Client.IsValid() {
		rec.Client, _ = x.gen.ips.Client(r.RemoteAddr, r.Header["X-Forwarded-For"])
	}
	if x.route != nil {
		rec.Route = x.route.id
	}
	if x.grpc {
		// The upstream's value is logged only if it is a number.
		if gs, err := strconv.Atoi(grpcStatusOf(w.Header())); err == nil && gs >= 0 {
			rec.GRPCStatus = gs
		}
	}
	if rec.Upstream {
		rec.Target, rec.UpstreamDuration = o.Target, o.Took
		if (o.Failed() || o.Err != nil && (o.End != upstream.ClientBody || o.Broken())) && !o.ClientGone() {
			rec.Error = o.Kind()
		}
	} else if o.Err == upstream.ErrNoTarget {
		rec.Error = "no_healthy_target"
	}
	g.access.Write(&rec)
}

// sent is the number of body bytes the response carried: the upstream's
// body as copied, or the gateway's own answer's length; -1 when it is
// not known (a switch of protocols).
func (o *outcome) sent(w http.ResponseWriter) int64 {
	if n, ok := o.Sent(); ok {
		return n
	}
	if o.Status == http.StatusSwitchingProtocols {
		return -1
	}
	if cl := w.Header()["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil {
			return n
		}
	}
	return -1
}
