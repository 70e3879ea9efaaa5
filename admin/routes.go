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
	v, ok := h.b.(RouteViewer)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", "this gateway does not list its routes")
		return
	}
	rs := v.Routes()
	if rs == nil {
		rs = []gateway.RouteStatus{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"routes": rs})
}

// A ProtectViewer is a Backend whose routes may be protected (protect:),
// for GET /admin/protect.
type ProtectViewer interface {
	Protected() []gateway.ProtectStatus
}

// listProtected serves GET /admin/protect: each protected route's learned
// limit, the healthy latency it measured, and what it admits now.
func (h *handler) listProtected(w http.ResponseWriter, r *http.Request) {
	v, ok := h.b.(ProtectViewer)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", "this gateway does not protect routes")
		return
	}
	ps := v.Protected()
	if ps == nil {
		ps = []gateway.ProtectStatus{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"routes": ps})
}
