package admin

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/floodgate-gw/floodgate/gateway"
)

// A TopKeyser is a Backend that counts the keys each limit rejects, for
// GET /admin/top. The keys name users and clients: they are behind the
// admin token, like the rest of /admin/.
type TopKeyser interface {
	// TopRejected returns the n keys the limit rejected most lately; an
	// error wraps gateway.ErrNoLimit for an unknown route or limit.
	TopRejected(route, limit string, n int) (gateway.TopKeys, error)
}

// defaultTop is how many keys GET /admin/top answers without n.
const defaultTop = 20

// top answers GET /admin/top?route=ID&limit=NAME[&n=N].
func (h *handler) top(w http.ResponseWriter, r *http.Request) {
	tk, ok := h.b.(TopKeyser)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", "this gateway does not count rejected keys")
		return
	}
	q := r.URL.Query()
	route, name := q.Get("route"), q.Get("limit")
	n := defaultTop
	var err error
	switch {
	case route == "":
		err = errors.New(`missing parameter "route": a route id, or "global" for a global limit`)
	case name == "":
		err = errors.New(`missing parameter "limit": the name of one of the route's limits`)
	case q.Has("n"):
		if n, err = strconv.Atoi(q.Get("n")); err != nil || n < 1 || n > gateway.MaxTopKeys {
			err = errors.New(`parameter "n" must be a whole number from 1 to ` + strconv.Itoa(gateway.MaxTopKeys))
		}
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	top, err := tk.TopRejected(route, name, n)
	if err != nil {
		h.limitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, top)
}
