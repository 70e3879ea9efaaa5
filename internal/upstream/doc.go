// Package upstream is the gateway's side towards its targets: a route's
// Upstream picks a target (round robin or least_request, passing over
// those out of rotation), sends the admitted request there over HTTP/1.1
// or HTTP/2 (h2c, h2, with trailers for gRPC), relays informational
// answers, streams the answer back with its bounds (upstream.idle_timeout,
// server.send_timeout), and joins the two connections after a switch of
// protocols (WebSocket).
//
// Forward returns a Result: the status, how the exchange ended (End: done,
// failed, timed out, the client's body or the client gone, a gRPC
// deadline), how long the target took, and the bytes copied. The gateway
// judges the request by it (the breaker, the metrics, the access log and
// the span) and answers for an exchange that failed before its head; this
// package answers nothing itself but the trailers that end a broken gRPC
// call.
//
// The health of the targets is the Registry's: each Target's state comes
// from the exchanges (ejection after failures or 5xx in a row) and from
// active checks (upstream.health, an HTTP GET or a gRPC Health/Check),
// and outlives a reload that keeps its route and target. The gateway
// hands the Registry the upstreams of each configuration it serves
// (Apply), and reads the targets' states for GET /admin/routes and
// gateway_upstream_healthy.
//
// Clients are made by NewClient and shared by the routes whose settings
// have the same ClientID, so that idle connections survive a reload.
package upstream
