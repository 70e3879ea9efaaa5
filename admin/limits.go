package admin

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/limit"
)

// limitQuery is the key that GET and DELETE /admin/limits name:
//
//	?route=ID&limit=NAME&key=V1[&key=V2...][&fallback=true]
type limitQuery struct {
	route, limit string
	values       []string
	fallback     bool
}

func parseLimitQuery(r *http.Request) (limitQuery, error) {
	q := r.URL.Query()
	lq := limitQuery{route: q.Get("route"), limit: q.Get("limit"), values: q["key"]}
	switch {
	case lq.route == "":
		return lq, errors.New(`missing parameter "route": a route id, or "global" for a global limit`)
	case lq.limit == "":
		return lq, errors.New(`missing parameter "limit": the name of one of the route's limits`)
	case len(lq.values) == 0:
		return lq, errors.New(`missing parameter "key": one value per part of the limit's key, in order (key=A&key=B)`)
	}
	if f := q.Get("fallback"); f != "" {
		var err error
		if lq.fallback, err = strconv.ParseBool(f); err != nil {
			return lq, errors.New(`parameter "fallback" must be true or false`)
		}
	}
	return lq, nil
}

// limitState is the JSON of one key's state (GET /admin/limits). Durations
// are in seconds; in_flight appears for concurrency limits only.
type limitState struct {
	Algorithm  string  `json:"algorithm"`
	Limit      int64   `json:"limit"`
	Window     float64 `json:"window"`
	Remaining  int64   `json:"remaining"`
	ResetAfter float64 `json:"reset_after"`
	InFlight   *int64  `json:"in_flight,omitempty"`
}

func stateJSON(s limit.State) limitState {
	j := limitState{
		Algorithm:  s.Algorithm.String(),
		Limit:      s.Limit,
		Window:     seconds(s.Window),
		Remaining:  s.Remaining,
		ResetAfter: seconds(s.ResetAfter),
	}
	if s.Algorithm == limit.Concurrency {
		n := s.InFlight
		j.InFlight = &n
	}
	return j
}

// seconds rounds to the millisecond: finer digits are noise by the time
// the answer is read.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}

func (h *handler) limitState(w http.ResponseWriter, r *http.Request) {
	q, err := parseLimitQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
	defer cancel()
	s, err := h.b.LimitState(ctx, q.route, q.limit, q.values, q.fallback)
	if err != nil {
		h.limitError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, stateJSON(s))
}

func (h *handler) limitReset(w http.ResponseWriter, r *http.Request) {
	q, err := parseLimitQuery(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	scope, fleet, ok := h.scope(w, r)
	if !ok {
		return
	}
	by := who(r)
	ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
	defer cancel()
	if scope == gateway.ScopeFleet {
		err = fleet.FleetResetLimit(ctx, by, q.route, q.limit, q.values, q.fallback)
	} else {
		err = h.b.ResetLimit(ctx, q.route, q.limit, q.values, q.fallback)
	}
	if err != nil {
		h.limitError(w, err)
		return
	}
	h.log.Info("limit key reset", "route", q.route, "limit", q.limit, "key", q.values, "fallback", q.fallback, "scope", scope, "by", by)
	h.audit(gateway.AdminAction{
		Action: events.ActionReset, By: by, Scope: scope, Route: q.route,
		Limit: q.limit, Key: q.values, Fallback: q.fallback,
	})
	writeJSON(w, http.StatusOK, map[string]any{"status": "reset", "scope": scope})
}

// limitError maps the backend's errors to statuses. Anything that is
// neither an unknown limit nor a store failure is a key that does not fit
// the limit (the wrong number of values, a fallback the limit lacks).
func (h *handler) limitError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, gateway.ErrNoLimit):
		writeError(w, http.StatusNotFound, "limit_not_found", err.Error())
	case errors.Is(err, limit.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded):
		h.log.Warn("admin limit query: store unavailable", "error", err.Error())
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
	default:
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
	}
}
