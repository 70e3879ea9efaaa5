package gateway

import (
	"net/http"
	"strings"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// route is one configured route, ready to serve.
type route struct {
	id       string
	exact    string // the path, when it is matched exactly
	prefix   string // for "/x/**": "/x"; matches /x and everything below it
	methods  []string
	host     string
	upstream *upstream.Upstream
	limits   []*limitSpec
	fallback *answer.Answer
	// grpcRefused answers gRPC requests, which a route of protocol
	// http1 cannot carry; nil on h2c and h2 routes.
	grpcRefused *answer.Answer
	breaker     *routeBreaker // nil: none
	record      bool          // fallback.record: write an event per refusal
	metrics     *routeMetrics
	failLog     *logsample.Sampler // WARN lines of failed exchanges, as many a second as rejections
}

// setMatch sets what the route takes from its match block.
func (rte *route) setMatch(m config.Match) {
	rte.methods, rte.host = m.Methods, strings.ToLower(m.Host)
	if p, ok := m.Prefix(); ok {
		rte.prefix = p
		if rte.prefix == "" {
			rte.prefix = "/"
		}
	} else {
		rte.exact = m.Path
	}
}

// matches reports whether the route takes a request; path is cleaned.
func (rte *route) matches(method, host, path string) bool {
	if rte.prefix != "" {
		if !strings.HasPrefix(path, rte.prefix) || len(path) > len(rte.prefix) && path[len(rte.prefix)] != '/' && rte.prefix != "/" {
			return false
		}
	} else if path != rte.exact {
		return false
	}
	if rte.host != "" && host != rte.host {
		return false
	}
	if len(rte.methods) == 0 {
		return true
	}
	for _, m := range rte.methods {
		if m == method {
			return true
		}
	}
	return false
}

// match finds the first route that takes the request: routes are tried in
// the order of the file, and the first match wins.
func (gen *generation) match(method, host, path string) *route {
	for _, r := range gen.routes {
		if r.matches(method, host, path) {
			return r
		}
	}
	return nil
}

// hostOf is the request's host, lower case, without port: what match.host
// and the host key part compare.
func hostOf(r *http.Request) string { return hostKey(r.Host) }

// hostKey is the host part of a Host header value: without port or
// brackets, lowercased.
func hostKey(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}
