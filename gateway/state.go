package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-gw/floodgate/limit"
)

// ErrNoLimit is returned for a route or limit name the configuration does not have.
var ErrNoLimit = errors.New("no such route or limit")

// lookup finds a limit by route ("global" for global limits) and name and
// builds the key of values, one per key part (or fallback part) in order.
func (rt *runtime) lookup(route, name string, values []string, fallback bool) (*limitSpec, limit.Key, error) {
	var spec *limitSpec
	for _, r := range rt.routes {
		if route != "global" && r.id != route {
			continue
		}
		for i, l := range r.limits {
			isGlobal := i < len(rt.cfg.GlobalLimits)
			if l.name == name && isGlobal == (route == "global") {
				spec = l
				break
			}
		}
		if spec != nil {
			break
		}
	}
	if spec == nil {
		return nil, "", fmt.Errorf("%w: route %q, limit %q", ErrNoLimit, route, name)
	}
	parts := spec.key
	if fallback {
		parts = spec.fallback
		if len(parts) == 0 {
			return nil, "", fmt.Errorf("limit %q of route %q has no fallback key", name, route)
		}
	}
	if len(values) != len(parts) {
		return nil, "", fmt.Errorf("limit %q has %d key parts; %d values given", name, len(parts), len(values))
	}
	ps := make([]limit.Part, len(parts))
	for i, p := range parts {
		v := values[i]
		if p.src == srcGlobal {
			v = "-"
		}
		ps[i] = limit.Part{Kind: p.kind, Value: v, Fallback: fallback}
	}
	return spec, limit.NewKey(ps...), nil
}

// LimitState reads the state of one key of a limit without consuming it.
// route is a route id, or "global" for a global limit; values hold one
// value per part of the limit's key (of its fallback key with fallback).
func (g *Gateway) LimitState(ctx context.Context, route, name string, values []string, fallback bool) (limit.State, error) {
	rt := g.rt.Load()
	spec, key, err := rt.lookup(route, name, values, fallback)
	if err != nil {
		return limit.State{}, err
	}
	return rt.store.Peek(ctx, timeNow(), spec.rule, key)
}

// ResetLimit forgets the state of one key of a limit.
func (g *Gateway) ResetLimit(ctx context.Context, route, name string, values []string, fallback bool) error {
	rt := g.rt.Load()
	spec, key, err := rt.lookup(route, name, values, fallback)
	if err != nil {
		return err
	}
	return rt.store.Reset(ctx, spec.rule, key)
}

// Ready reports whether the gateway can decide: its store answers, or a
// store failure would not refuse requests (no limit has on_error deny).
func (g *Gateway) Ready(ctx context.Context) error {
	rt := g.rt.Load()
	probe := &limit.Rule{Name: "floodgate:readyz", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: limit.MinPeriod}}
	_, err := rt.store.Peek(ctx, timeNow(), probe, limit.NewKey())
	if err == nil {
		return nil
	}
	for _, r := range rt.routes {
		for _, l := range r.limits {
			if l.onError == errDeny {
				return fmt.Errorf("store unavailable and limit %s of route %s has on_error deny: %w", l.name, r.id, err)
			}
		}
	}
	return nil
}
