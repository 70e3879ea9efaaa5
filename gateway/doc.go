// Package gateway is floodgate's HTTP gateway: the handler that routes
// each request, decides its rate limits, keeps a failing upstream behind
// a circuit breaker, and proxies the request to the upstream.
//
// A Gateway is built by New from a configuration that package config
// parsed and validated; Options give what the configuration does not say:
// the logger, the Prometheus registerer, where "server.access_log:
// stdout" and "stderr" write, and the clock. A Gateway is an http.Handler (ServeHTTP).
// Served through Listener, net/http's own error answers become the
// gateway's too, and a request whose framing is in doubt is refused.
// Reload swaps in a new configuration: the requests already running finish
// on the one they started with, and stores, breakers and the events
// recorder whose settings did not change are kept. Close stops the
// background work and closes the stores. The admin API reads and changes
// the running gateway through LimitState, ResetLimit, Breakers,
// ForceBreaker, Ready and Degraded; with a shared store, FleetResetLimit
// and FleetForceBreaker act on every instance (fleet.go), and Scope says
// which of the two an admin call means.
//
// # A request
//
// ServeHTTP takes one request through these steps:
//
//  1. It takes the running configuration, the request id and the cleaned
//     path; a path with no safe form is answered 400.
//  2. The first route whose path, methods and host match takes it; with
//     none, 404 (route.go).
//  3. An open breaker answers with the route's fallback before any limit
//     is spent (breakers.go). A breaker of scope fleet shares its window,
//     its opening and its trials with the other instances through Redis,
//     from a loop of its own rather than per request (breakerfleet.go).
//  4. The limit step resolves the client's address and each limit's key,
//     and decides every limit in one store call; over a limit, 429 with
//     Retry-After (keys.go, limitstep.go).
//  5. The upstream exchange sends the request on and streams the answer
//     back (package internal/upstream, which also keeps the targets'
//     health); an exchange that failed before its head is answered here
//     (gateway.go).
//  6. The breaker learns the outcome; one epilogue, finish, writes the
//     metrics, the access log line and the span of every request however
//     it ended, and any concurrency lease is released (gateway.go,
//     accesslog.go).
//
// docs/architecture.md follows the same path through the other packages,
// and docs/configuration.md says what each setting does.
package gateway
