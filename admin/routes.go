package admin

import (
	"net/http"

	"github.com/floodgate-gw/floodgate/gateway"
)

// A RouteViewer is a Backend that can list its routes with the health of
// their targets, for GET /admin/routes.
type RouteViewer interface {
	Routes() []gateway.RouteStatus
}

// listRoutes serves GET /admin/routes: each route's balancing, and each of
// its targets' state (healthy, unhealthy, ejected) and what led to it.
func (h *handler) listRoutes(w http.ResponseWriter, r *http.Request) {
	serveRoutes(w, h.b, RouteViewer.Routes, "this gateway does not list its routes")
}

// A ProtectViewer is a Backend whose routes may be protected (protect:),
// for GET /admin/protect.
type ProtectViewer interface {
	Protected() []gateway.ProtectStatus
}

// listProtected serves GET /admin/protect: each protected route's learned
// limit, the healthy latency it measured, and what it admits now.
func (h *handler) listProtected(w http.ResponseWriter, r *http.Request) {
	serveRoutes(w, h.b, ProtectViewer.Protected, "this gateway does not protect routes")
}

// serveRoutes answers {"routes": [...]} with what list reads of the
// backend b, as a V; 501 with without when b is no V.
func serveRoutes[V, T any](w http.ResponseWriter, b Backend, list func(V) []T, without string) {
	v, ok := b.(V)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", without)
		return
	}
	items := list(v)
	if items == nil {
		items = []T{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"routes": items})
}
