package gateway

import (
	"net/http"

	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/spec"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// route is one configured route, ready to serve.
type route struct {
	spec.Match
	id       string
	upstream *upstream.Upstream
	limits   []*limitSpec
	fallback *answer.Answer
	// grpcRefused answers gRPC requests, which a route of protocol
	// http1 cannot carry; nil on h2c and h2 routes.
	grpcRefused *answer.Answer
	breaker     *routeBreaker  // nil: none
	record      bool           // fallback.record: write an event per refusal
	protect     *routeProtect  // nil: no protect block
	overloaded  *answer.Answer // protect's answer to a request turned away
	metrics     *routeMetrics
	failLog     *logsample.Sampler // WARN lines of failed exchanges, as many a second as rejections
}

// match finds the first route that takes the request: routes are tried in
// the order of the file, and the first match wins.
func (gen *generation) match(method, host, path string) *route {
	for _, r := range gen.routes {
		if r.Takes(method, host, path) {
			return r
		}
	}
	return nil
}

// hostOf is the request's host, lower case, without port: what match.host
// and the host key part compare.
func hostOf(r *http.Request) string { return spec.HostKey(r.Host) }
