// Package admin serves floodgate's admin listener: health and readiness
// probes, Prometheus metrics, the admin API and the dashboard.
//
// NewHandler is the whole package. It reaches the running gateway only
// through the Backend interface, so the HTTP layer (routes, status codes,
// JSON shapes, the bearer token) is tested on its own, and "floodgate serve"
// decides what a reload means (re-reading the file, serialized with the
// other reload triggers).
//
// Every answer carries Cache-Control: no-store, and every answer but
// /metrics and the dashboard is JSON. Errors are
//
//	{"status": "error", "code": "...", "message": "..."}
//
// except a refused reload, which lists every problem of the file:
//
//	{"status": "error", "errors": ["floodgate.yaml:12: unknown key \"rat\""]}
package admin
