package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/limit"
)

// An Overrider is a Backend that takes runtime overrides: changes to its
// running limits that outlive reloads (gateway.Gateway.SetOverride). With
// a shared store they reach every instance.
type Overrider interface {
	Overrides() gateway.Overrides
	SetOverride(ctx context.Context, route, limit string, req gateway.OverrideRequest) (gateway.OverrideStatus, error)
	RemoveOverride(ctx context.Context, route, limit string) (gateway.Override, int64, error)
}

const overridePrefix = "/admin/overrides/"

// maxOverrideBody bounds a PUT's body: an override is a few dozen bytes.
const maxOverrideBody = 16 << 10

// overrideBody is the JSON of PUT /admin/overrides/ROUTE/LIMIT.
type overrideBody struct {
	Rate    *string `json:"rate"`
	Limit   *int64  `json:"limit"`
	Burst   *int64  `json:"burst"`
	Shadow  *bool   `json:"shadow"`
	Enabled *bool   `json:"enabled"`
	TTL     *string `json:"ttl"`
	Reason  string  `json:"reason"`
	By      string  `json:"by"`
}

// overrideTarget reads ROUTE/LIMIT from the request's path as it was
// sent: an encoded slash (%2F) is part of a segment, not a separator, so
// that a rule in front that allows /admin/overrides/api/ sees what the
// gateway acts on. Neither a route id nor a limit name holds a slash.
func overrideTarget(r *http.Request) (route, lim string, ok bool) {
	rest, found := strings.CutPrefix(r.URL.EscapedPath(), overridePrefix)
	if !found {
		return "", "", false
	}
	rawRoute, rawLim, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", false
	}
	var err1, err2 error
	route, err1 = url.PathUnescape(rawRoute)
	lim, err2 = url.PathUnescape(rawLim)
	return route, lim, err1 == nil && err2 == nil && route != "" && lim != "" && !strings.Contains(route+lim, "/")
}

// overrideScope checks the scope parameter of an override call: the
// overrides are the fleet's with a shared store and the instance's with
// the memory store, and a call that asks for the other is refused rather
// than carried out where it was not meant.
func (h *handler) overrideScope(w http.ResponseWriter, r *http.Request, o Overrider) bool {
	s := r.URL.Query().Get("scope")
	if s == "" {
		return true
	}
	have := o.Overrides().Scope
	switch {
	case s != string(gateway.ScopeFleet) && s != string(gateway.ScopeInstance):
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf(`parameter "scope" is %q: want fleet or instance`, s))
		return false
	case gateway.Scope(s) != have && have == gateway.ScopeFleet:
		writeError(w, http.StatusBadRequest, "bad_request", `parameter "scope": with the redis store the overrides are the fleet's, kept in the store; an override reaches every instance`)
		return false
	case gateway.Scope(s) != have:
		writeError(w, http.StatusBadRequest, "bad_request", `parameter "scope": with the memory store an override applies to this instance only; use scope=instance`)
		return false
	}
	return true
}

func (h *handler) overrider(w http.ResponseWriter) (Overrider, bool) {
	o, ok := h.b.(Overrider)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", "this gateway takes no runtime overrides")
	}
	return o, ok
}

// listOverrides serves GET /admin/overrides.
func (h *handler) listOverrides(w http.ResponseWriter, r *http.Request) {
	o, ok := h.overrider(w)
	if !ok || !h.overrideScope(w, r, o) {
		return
	}
	writeJSON(w, http.StatusOK, o.Overrides())
}

// getOverride serves GET /admin/overrides/ROUTE/LIMIT.
func (h *handler) getOverride(w http.ResponseWriter, r *http.Request) {
	o, route, lim, ok := h.overrideCall(w, r, false)
	if !ok {
		return
	}
	st, ok := findOverride(o.Overrides(), route, lim)
	if !ok {
		writeError(w, http.StatusNotFound, "override_not_found", fmt.Sprintf("no override of limit %q of route %q", lim, route))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// setOverride serves PUT /admin/overrides/ROUTE/LIMIT. The body replaces
// the limit's override as a whole.
func (h *handler) setOverride(w http.ResponseWriter, r *http.Request) {
	o, route, lim, ok := h.overrideCall(w, r, true)
	if !ok {
		return
	}
	req, field, err := readOverride(w, r)
	if err != nil {
		h.overrideError(w, field, err)
		return
	}
	// A named token says who acts; with admin.token, which names no one,
	// the body's by may say it, but not as a named token's holder.
	if name, ok := named(r); ok || req.By == "" {
		req.By = name
	} else if cfg := h.b.Config(); cfg != nil {
		for _, t := range cfg.Admin.Tokens {
			if t.Name == req.By {
				h.overrideError(w, "by", fmt.Errorf("%q is the name of a named admin token: only a call with that token acts as %s", req.By, req.By))
				return
			}
		}
	}
	scope := o.Overrides().Scope
	ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
	defer cancel()
	st, err := o.SetOverride(ctx, route, lim, req)
	if err != nil {
		if errors.Is(err, gateway.ErrUnconfirmed) {
			// It may be in force all the same: the trail says it was asked.
			h.log.Warn("runtime override not confirmed", "route", route, "limit", lim, "scope", scope, "by", req.By, "after", describe(req.Change), "error", err.Error())
		}
		h.overrideError(w, "", err)
		return
	}
	after := describe(st.Change)
	was := describe(st.File)
	if st.Replaced != nil {
		was = describe(st.Replaced.Change)
	}
	args := []any{"route", route, "limit", lim, "scope", scope, "by", req.By, "version", st.Version, "before", was, "after", after}
	if req.Reason != "" {
		args = append(args, "reason", req.Reason)
	}
	if req.TTL > 0 {
		args = append(args, "ttl", req.TTL.String())
	}
	h.log.Info("runtime override set", args...)
	h.audit(gateway.AdminAction{
		Action: events.ActionOverride, By: req.By, Scope: scope, Route: route, Limit: lim,
		TTL: req.TTL, Before: was, After: after, Reason: req.Reason, Version: st.Version,
	})
	writeJSON(w, http.StatusOK, st)
}

// removeOverride serves DELETE /admin/overrides/ROUTE/LIMIT.
func (h *handler) removeOverride(w http.ResponseWriter, r *http.Request) {
	o, route, lim, ok := h.overrideCall(w, r, true)
	if !ok {
		return
	}
	by := who(r)
	scope := o.Overrides().Scope
	ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
	defer cancel()
	old, version, err := o.RemoveOverride(ctx, route, lim)
	if err != nil {
		if errors.Is(err, gateway.ErrUnconfirmed) {
			h.log.Warn("runtime override removal not confirmed", "route", route, "limit", lim, "scope", scope, "by", by, "error", err.Error())
		}
		h.overrideError(w, "", err)
		return
	}
	was := describe(old.Change)
	h.log.Info("runtime override removed", "route", route, "limit", lim, "scope", scope, "by", by, "version", version, "before", was)
	h.audit(gateway.AdminAction{
		Action: events.ActionOverrideRemoved, By: by, Scope: scope, Route: route, Limit: lim, Before: was, Version: version,
	})
	writeJSON(w, http.StatusOK, map[string]any{"status": "removed", "route": route, "limit": lim, "scope": scope, "version": version})
}

// overrideCall reads what every call on one override needs, and answers
// itself when the call cannot go on: the backend, the route and limit of
// the path, and (for a change) a scope that fits the backend.
func (h *handler) overrideCall(w http.ResponseWriter, r *http.Request, change bool) (o Overrider, route, lim string, ok bool) {
	if o, ok = h.overrider(w); !ok {
		return nil, "", "", false
	}
	if route, lim, ok = overrideTarget(r); !ok {
		writeError(w, http.StatusNotFound, "not_found", "want /admin/overrides/ROUTE/LIMIT (ROUTE global for a global limit)")
		return nil, "", "", false
	}
	if change && !h.overrideScope(w, r, o) {
		return nil, "", "", false
	}
	return o, route, lim, true
}

func findOverride(o gateway.Overrides, route, lim string) (gateway.OverrideStatus, bool) {
	for _, st := range o.Overrides {
		if st.Route == route && st.Limit == lim {
			return st, true
		}
	}
	return gateway.OverrideStatus{}, false
}

// describe writes a change as one short string for logs and events:
// "rate=800/s burst=80 shadow=false".
func describe(c gateway.OverrideChange) string {
	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + v)
	}
	if c.Rate != "" {
		add("rate", c.Rate)
	}
	if c.Limit != 0 {
		add("limit", fmt.Sprint(c.Limit))
	}
	if c.Burst != 0 {
		add("burst", fmt.Sprint(c.Burst))
	}
	if c.Shadow != nil {
		add("shadow", fmt.Sprint(*c.Shadow))
	}
	if c.Enabled != nil {
		add("enabled", fmt.Sprint(*c.Enabled))
	}
	return b.String()
}

// readOverride reads a PUT's body. field names what is wrong, when one
// field is.
func readOverride(w http.ResponseWriter, r *http.Request) (gateway.OverrideRequest, string, error) {
	var req gateway.OverrideRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOverrideBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, "", errTooLarge
		}
		return req, "", fmt.Errorf("reading the body: %w", err)
	}
	var b overrideBody
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&b); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return req, te.Field, fmt.Errorf("want %s, not a JSON %s", jsonKind(te.Type.String()), te.Value)
		}
		if errors.As(err, &te) {
			return req, "", fmt.Errorf(`the body is a JSON %s: want an object such as {"rate": "800/s", "ttl": "30m"}`, te.Value)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return req, strings.Trim(f, `"`), errors.New("unknown field: want rate, limit, burst, shadow, enabled, ttl, reason or by")
		}
		return req, "", fmt.Errorf(`the body is not a JSON object such as {"rate": "800/s", "ttl": "30m"}: %v`, err)
	}
	if d.More() {
		return req, "", errors.New("the body holds more than one JSON value")
	}
	if b.Rate != nil {
		if strings.TrimSpace(*b.Rate) == "" {
			return req, "rate", errors.New(`empty: want a rate such as "800/s"`)
		}
		if strings.ContainsFunc(*b.Rate, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return req, "rate", errors.New(`holds a control character: want a rate such as "800/s"`)
		}
		req.Rate = *b.Rate
	}
	if b.Limit != nil {
		if *b.Limit <= 0 {
			return req, "limit", fmt.Errorf("%d must be positive", *b.Limit)
		}
		req.Limit = *b.Limit
	}
	if b.Burst != nil {
		if *b.Burst <= 0 {
			return req, "burst", fmt.Errorf("%d must be positive", *b.Burst)
		}
		req.Burst = *b.Burst
	}
	req.Shadow, req.Enabled, req.Reason, req.By = b.Shadow, b.Enabled, b.Reason, b.By
	if b.TTL != nil {
		ttl, err := time.ParseDuration(*b.TTL)
		switch {
		case err != nil && durationRE.MatchString(*b.TTL):
			return req, "ttl", fmt.Errorf("%q is too long: at most %v", *b.TTL, gateway.MaxOverrideTTL)
		case err != nil:
			return req, "ttl", fmt.Errorf("%q: want a duration such as 30m", *b.TTL)
		case ttl < gateway.MinOverrideTTL:
			return req, "ttl", fmt.Errorf("%q: at least %v", *b.TTL, gateway.MinOverrideTTL)
		}
		req.TTL = ttl
	}
	return req, "", nil
}

var errTooLarge = fmt.Errorf("the body is over %d bytes; an override is a few dozen", maxOverrideBody)

func jsonKind(goType string) string {
	switch goType {
	case "string":
		return "a string"
	case "int64":
		return "a whole number"
	case "bool":
		return "true or false"
	}
	return goType
}

// overrideErrorBody is a refused override: the usual error, and the field.
type overrideErrorBody struct {
	apiError
	Field string `json:"field,omitempty"`
}

// overrideError answers a refused override: 404 for a limit or override
// that is not there, 503 when the store did not answer, 413 for a body too
// large, 400 naming the field otherwise.
func (h *handler) overrideError(w http.ResponseWriter, field string, err error) {
	var oe *gateway.OverrideError
	if errors.As(err, &oe) {
		field, err = oe.Field, errors.New(oe.Msg)
	}
	status, code := http.StatusBadRequest, "bad_request"
	switch {
	case errors.Is(err, errTooLarge):
		status, code = http.StatusRequestEntityTooLarge, "body_too_large"
	case errors.Is(err, gateway.ErrNoLimit):
		status, code = http.StatusNotFound, "limit_not_found"
	case errors.Is(err, gateway.ErrNoOverride):
		status, code = http.StatusNotFound, "override_not_found"
	case errors.Is(err, limit.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded):
		if !errors.Is(err, gateway.ErrUnconfirmed) {
			h.log.Warn("admin override: store unavailable", "error", err.Error())
		}
		status, code = http.StatusServiceUnavailable, "store_unavailable"
	}
	msg := err.Error()
	if field != "" {
		msg = field + ": " + msg
	}
	writeJSON(w, status, overrideErrorBody{apiError{Status: "error", Code: code, Message: msg}, field})
}
