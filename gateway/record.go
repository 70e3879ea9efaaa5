package gateway

import (
	"net/http"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/limit"
)

// recordRefused writes the event of a request turned away, of type typ
// (the open breaker's, events.TypeBreakerRejected, or protection's,
// events.TypeOverloaded; fallback.record), and reports whether it is
// durable.
func (g *Gateway) recordRefused(x *exchange, typ string) bool {
	r, gen := x.r, x.gen
	if gen.recorder == nil {
		return false
	}
	ev := newEvent(x, typ)
	if r.Body != nil && r.Body != http.NoBody {
		ev.Body, ev.Truncated, _ = events.CaptureBody(r.Body, gen.cfg.Events.MaxBody)
	}
	// Record bounds the wait itself (Options.RecordWait).
	return gen.recorder.Record(r.Context(), ev)
}

// audit records a rate-limit decision when events.audit asks for it: a
// rejection (rejected or all), or an admission (all) of a request on its
// way to the upstream. It does not wait for the event to be durable: no
// answer depends on it.
func (g *Gateway) audit(x *exchange, v *verdict) {
	gen := x.gen
	if gen.recorder == nil || len(v.res.Decisions) == 0 {
		return
	}
	switch gen.cfg.Events.Audit {
	case config.AuditAll:
	case config.AuditRejected:
		if v.reject == nil {
			return
		}
	default:
		return
	}
	typ, lim := events.TypeAdmitted, ""
	if v.reject != nil {
		typ = events.TypeRateLimited
		if v.reason >= 0 {
			lim = v.specs[v.reason].Name
		}
	}
	ev := newEvent(x, typ)
	ev.Limit = lim
	gen.recorder.Audit(ev)
}

// newEvent is the event of type typ of x's request, with the key values
// of its route's limits, so that a replay or an analysis knows whose
// request it was.
func newEvent(x *exchange, typ string) *events.Event {
	r := x.r
	ev := &events.Event{
		Type: typ, Route: x.route.id, RequestID: x.rid,
		Method: r.Method, Path: x.path, Query: r.URL.RawQuery,
		Headers: events.KeepHeaders(r.Header, x.gen.cfg.Events.Headers),
		Keys:    make(map[string][]string, len(x.route.limits)),
	}
	// Global limits come first, under their own names (unique across
	// global and route limits); a limit whose key and fallback are both
	// missing has no entry.
	var buf [4]limit.Part // the parts parts makes: no key is built
	for _, l := range x.route.limits {
		_, values, ok := x.parts(l.Key, false, nil, buf[:0])
		fallback := false
		if !ok && len(l.Fallback) > 0 {
			_, values, ok = x.parts(l.Fallback, true, nil, buf[:0])
			fallback = ok
		}
		if ok {
			ev.Keys[l.Name] = values
		}
		if fallback {
			ev.Fallback = append(ev.Fallback, l.Name)
		}
	}
	return ev
}

// Degraded says what works less well than configured while the gateway
// still serves ("" when all is well): an events sink that is down, bearer
// tokens that cannot be verified (a JWKS URL that gave no keys yet) or are
// verified with keys older than configured (a refused JWKS file, a failed
// refresh), breakers of scope fleet deciding alone and protections
// deciding alone (Redis does not answer).
func (g *Gateway) Degraded() string {
	gen := g.gen.Load()
	var ds []string
	if rec := gen.recorder; rec != nil {
		if err := rec.Ready(); err != nil {
			ds = append(ds, err.Error())
		}
	}
	if s := gen.jwt.status(); s != "" {
		ds = append(ds, s)
	}
	ds = append(ds, gen.fleetStatus()...)
	ds = append(ds, gen.protectStatus()...)
	return strings.Join(ds, "; ")
}

// AdminAction is an operator's reset or forced breaker as the admin API
// carried it out, for the audit trail.
type AdminAction struct {
	Action string // events.ActionReset or events.ActionForceBreaker
	By     string // who asked
	Scope  Scope
	Route  string

	// A reset's key: one value per part, of the fallback key with
	// Fallback.
	Limit    string
	Key      []string
	Fallback bool

	// A force: the state asked for (open, closed or auto), its ttl (zero:
	// until auto), and the breaker's state before and after it.
	State         string
	TTL           time.Duration
	Before, After string

	// An override's reason, and the version of the overrides its change
	// made.
	Reason  string
	Version int64
}

// AuditAdmin records a as an admin_action event when events.audit is set
// (rejected or all: an operator's action is rarer and weighs more than any
// one rejected request). Like the audit of decisions it does not wait for
// the event to be durable; the action is done either way, and its log line
// is written by the caller.
func (g *Gateway) AuditAdmin(a AdminAction) {
	gen := g.gen.Load()
	if gen == nil || gen.recorder == nil {
		return
	}
	switch gen.cfg.Events.Audit {
	case config.AuditAll, config.AuditRejected:
	default:
		return
	}
	ev := &events.Event{
		Type: events.TypeAdminAction, Route: a.Route,
		Action: a.Action, By: a.By, Scope: string(a.Scope), Instance: g.ids.Prefix(),
		Limit: a.Limit, State: strings.ToLower(a.State), TTL: a.TTL.Seconds(),
		Before: a.Before, After: a.After, Reason: a.Reason, Version: a.Version,
	}
	if a.Action == events.ActionReset {
		ev.Keys = map[string][]string{a.Limit: a.Key}
		if a.Fallback {
			ev.Fallback = []string{a.Limit}
		}
	}
	gen.recorder.Audit(ev)
}
