package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/floodgate-gw/floodgate/limit"
)

// ErrNoLimit is returned for a route or limit name the configuration does not have.
var ErrNoLimit = errors.New("no such route or limit")

// lookup finds a limit by route ("global" for global limits) and name and
// builds the key of values, one per key part (or fallback part) in order,
// each read as a request's would be: an address as the ip part groups it,
// a host lowercased and without port. The rule is the limit's, or that of
// the first override by key value the values match, whose counters are
// its own (an override by header cannot be told from values alone).
func (gen *generation) lookup(route, name string, values []string, fallback bool) (*limit.Rule, limit.Key, error) {
	spec, err := gen.findLimit(route, name)
	if err != nil {
		return nil, "", err
	}
	key, vs, err := gen.keyOf(route, spec, values, fallback)
	if err != nil {
		return nil, "", err
	}
	return spec.ruleFor(vs, nil), key, nil
}

// findLimit returns the limit name of route, or of the global limits
// for route "global"; the error wraps ErrNoLimit.
func (gen *generation) findLimit(route, name string) (*limitSpec, error) {
	for _, r := range gen.routes {
		if route != "global" && r.id != route {
			continue
		}
		for i, l := range r.limits {
			isGlobal := i < len(gen.cfg.GlobalLimits)
			if l.name == name && isGlobal == (route == "global") {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: route %q, limit %q", ErrNoLimit, route, name)
}

// keyOf builds the key of spec from values, one per key part (or fallback
// part) in order, each read as a request's would be: an address as the ip
// part groups it, a host lowercased and without port. It returns the
// values as read.
func (gen *generation) keyOf(route string, spec *limitSpec, values []string, fallback bool) (limit.Key, []string, error) {
	name := spec.name
	parts := spec.key
	if fallback {
		parts = spec.fallback
		if len(parts) == 0 {
			return "", nil, fmt.Errorf("limit %q of route %q has no fallback key", name, route)
		}
	}
	if len(values) != len(parts) {
		return "", nil, fmt.Errorf("limit %q has %d key parts; %d values given", name, len(parts), len(values))
	}
	ps := make([]limit.Part, len(parts))
	vs := make([]string, len(parts))
	for i, p := range parts {
		v := values[i]
		switch p.src {
		case srcGlobal:
			v = "-"
		case srcIP:
			if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")); err == nil {
				v = gen.ips.Key(ip)
			}
		case srcHost:
			v = hostKey(v)
		}
		ps[i], vs[i] = limit.Part{Kind: p.kind, Value: v, Fallback: fallback}, v
	}
	return limit.NewKey(ps...), vs, nil
}

// ruleFor is the limit's rule for a request whose key values are values,
// or that of the first override they match, whose counters are its own.
// An override by header matches when headers (canonical names) hold the
// value; nil headers match none. An override by claim matches none: there
// is no verified token to read it from.
func (l *limitSpec) ruleFor(values []string, headers map[string][]string) *limit.Rule {
	for i := range l.overrides {
		o := &l.overrides[i]
		switch {
		case o.claim != "":
		case o.header != "":
			if slices.Contains(headers[o.header], o.headerValue) {
				return o.rule
			}
		case o.matchesValues(values):
			return o.rule
		}
	}
	return l.rule
}

// LimitState reads the state of one key of a limit without consuming it.
// route is a route id, or "global" for a global limit; values hold one
// value per part of the limit's key (of its fallback key with fallback).
func (g *Gateway) LimitState(ctx context.Context, route, name string, values []string, fallback bool) (limit.State, error) {
	gen := g.gen.Load()
	rule, key, err := gen.lookup(route, name, values, fallback)
	if err != nil {
		return limit.State{}, err
	}
	return gen.store.Peek(ctx, g.now(), rule, key)
}

// ResetLimit forgets the state of one key of a limit.
func (g *Gateway) ResetLimit(ctx context.Context, route, name string, values []string, fallback bool) error {
	gen := g.gen.Load()
	rule, key, err := gen.lookup(route, name, values, fallback)
	if err != nil {
		return err
	}
	return gen.store.Reset(ctx, rule, key)
}

// probe is the rule Ready and CheckStore read, to learn whether the store
// answers.
var probe = &limit.Rule{Name: "floodgate:readyz", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: limit.MinPeriod}}

// CheckStore reports whether the store answers now. A store that does not
// is logged as down, and its return, at the next decision it makes, is
// logged too.
func (g *Gateway) CheckStore(ctx context.Context) error {
	_, err := g.gen.Load().store.Peek(ctx, g.now(), probe, limit.NewKey())
	if err != nil {
		g.storeDown.Store(true)
	}
	return err
}

// Ready reports whether the gateway can decide: its store answers, or a
// store failure would not refuse requests (no limit has on_error deny).
func (g *Gateway) Ready(ctx context.Context) error {
	gen := g.gen.Load()
	_, err := gen.store.Peek(ctx, g.now(), probe, limit.NewKey())
	if err == nil {
		return nil
	}
	for _, r := range gen.routes {
		for _, l := range r.limits {
			if l.onError == errDeny {
				return fmt.Errorf("store unavailable and limit %s of route %s has on_error deny: %w", l.name, r.id, err)
			}
		}
	}
	return nil
}
