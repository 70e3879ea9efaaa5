package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-gw/floodgate/internal/spec"
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
	l, err := gen.findLimit(route, name)
	if err != nil {
		return nil, "", err
	}
	key, vs, err := l.KeyOf(route, gen.ips.Key, values, fallback)
	if err != nil {
		return nil, "", err
	}
	return l.RuleFor(vs, nil), key, nil
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
			if l.Name == name && isGlobal == (route == "global") {
				return l, nil
			}
		}
	}
	return nil, fmt.Errorf("%w: route %q, limit %q", ErrNoLimit, route, name)
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
			if l.OnError == spec.OnErrorDeny {
				return fmt.Errorf("store unavailable and limit %s of route %s has on_error deny: %w", l.Name, r.id, err)
			}
		}
	}
	return nil
}
