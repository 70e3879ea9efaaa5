package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	RemoveOverride(ctx context.Context, route, limit string) (gateway.Override, error)
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

// overrideTarget reads ROUTE/LIMIT from the path.
func overrideTarget(p string) (route, lim string, ok bool) {
	route, lim, ok = strings.Cut(strings.TrimPrefix(p, overridePrefix), "/")
	return route, lim, ok && route != "" && lim != "" && !strings.Contains(lim, "/")
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
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, o.Overrides())
}

// setOverride serves PUT /admin/overrides/ROUTE/LIMIT.
func (h *handler) setOverride(w http.ResponseWriter, r *http.Request) {
	o, ok := h.overrider(w)
	if !ok {
		return
	}
	route, lim, ok := overrideTarget(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "want /admin/overrides/ROUTE/LIMIT (ROUTE global for a global limit)")
		return
	}
	req, field, err := readOverride(w, r)
	if err != nil {
		h.overrideError(w, field, err)
		return
	}
	// A named token says who acts; the body's by says it only for the
	// one admin.token, which names no one.
	if name, ok := named(r); ok || req.By == "" {
		req.By = name
	}
	before := o.Overrides()
	ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
	defer cancel()
	st, err := o.SetOverride(ctx, route, lim, req)
	if err != nil {
		h.overrideError(w, "", err)
		return
	}
	after := describe(st.Change)
	was := describe(st.File)
	if prev, ok := findOverride(before, route, lim); ok {
		was = describe(prev.Change)
	}
	args := []any{"route", route, "limit", lim, "scope", before.Scope, "by", req.By, "before", was, "after", after}
	if req.Reason != "" {
		args = append(args, "reason", req.Reason)
	}
	if req.TTL > 0 {
		args = append(args, "ttl", req.TTL.String())
	}
	h.log.Info("runtime override set", args...)
	h.audit(gateway.AdminAction{
		Action: events.ActionOverride, By: req.By, Scope: before.Scope, Route: route, Limit: lim,
		TTL: req.TTL, Before: was, After: after, Reason: req.Reason,
	})
	writeJSON(w, http.StatusOK, st)
}

// removeOverride serves DELETE /admin/overrides/ROUTE/LIMIT.
func (h *handler) removeOverride(w http.ResponseWriter, r *http.Request) {
	o, ok := h.overrider(w)
	if !ok {
		return
	}
	route, lim, ok := overrideTarget(r.URL.Path)
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "want /admin/overrides/ROUTE/LIMIT (ROUTE global for a global limit)")
		return
	}
	by := who(r)
	before := o.Overrides()
	ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
	defer cancel()
	old, err := o.RemoveOverride(ctx, route, lim)
	if err != nil {
		h.overrideError(w, "", err)
		return
	}
	was := describe(old.Change)
	h.log.Info("runtime override removed", "route", route, "limit", lim, "scope", before.Scope, "by", by, "before", was)
	h.audit(gateway.AdminAction{
		Action: events.ActionOverrideRemoved, By: by, Scope: before.Scope, Route: route, Limit: lim, Before: was,
	})
	writeJSON(w, http.StatusOK, map[string]any{"status": "removed", "route": route, "limit": lim, "scope": before.Scope, "version": o.Overrides().Version})
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
		if errors.As(err, &te) {
			return req, te.Field, fmt.Errorf("want %s, not a JSON %s", jsonKind(te.Type.String()), te.Value)
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
		if *b.Rate == "" {
			return req, "rate", errors.New(`empty: want a rate such as "800/s"`)
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
		h.log.Warn("admin override: store unavailable", "error", err.Error())
		status, code = http.StatusServiceUnavailable, "store_unavailable"
	}
	msg := err.Error()
	if field != "" {
		msg = field + ": " + msg
	}
	writeJSON(w, status, overrideErrorBody{apiError{Status: "error", Code: code, Message: msg}, field})
}
