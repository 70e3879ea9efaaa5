package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// Scope is where an admin action is carried out: on every instance that
// shares the store, or on the one that received it.
type Scope string

const (
	ScopeFleet    Scope = "fleet"
	ScopeInstance Scope = "instance"
)

// ErrScope is returned for a scope the gateway cannot act in.
var ErrScope = errors.New("bad scope")

// ErrUnconfirmed is wrapped, with limit.ErrStoreUnavailable, by a fleet
// change (an override set or removed, a breaker forced for the fleet) that
// went to the store and whose answer did not come: it may be in force on
// every instance all the same.
var ErrUnconfirmed = fleetbus.ErrUnknown

// controlKind is the channel of the gateway's messages, under the store's
// prefix.
const controlKind = "control"

// maxControl bounds a control message: floodgate's own are a few hundred
// bytes, and a larger one is not parsed.
const maxControl = 16 << 10

// controlMessage is one fleet action, as JSON. Floodgate is the format's
// version, 1: a message without it is not floodgate's.
type controlMessage struct {
	Floodgate int      `json:"floodgate"`
	Kind      string   `json:"kind"`  // "breaker" or "reset"
	From      string   `json:"from"`  // the instance id of the sender
	Nonce     string   `json:"nonce"` // unique to the message
	By        string   `json:"by"`    // who asked, for the logs
	Route     string   `json:"route"`
	State     string   `json:"state,omitempty"`  // breaker: open, closed or auto
	TTL       int64    `json:"ttl_ns,omitempty"` // breaker: the force's ttl, whole: 1ms would be 0 in ms
	Limit     string   `json:"limit,omitempty"`  // reset
	Key       []string `json:"key,omitempty"`    // reset
	Fallback  bool     `json:"fallback,omitempty"`
}

// busOf is the fleet bus of a store the instances share: a Redis store's;
// nil for the memory store, which is this instance's own.
func busOf(s limit.Store) *fleetbus.Bus {
	if r, ok := s.(*redisstore.Store); ok {
		return fleetbus.New(r)
	}
	return nil
}

// Scope reads an admin call's scope parameter. Empty is the default:
// fleet with a store that instances share, instance with the memory
// store. Fleet with the memory store is refused rather than taken as
// instance, so that an operator who means to steer a fleet learns that
// this instance steers only itself.
func (g *Gateway) Scope(s string) (Scope, error) {
	shared := g.gen.Load().bus != nil
	switch Scope(s) {
	case "":
		if shared {
			return ScopeFleet, nil
		}
		return ScopeInstance, nil
	case ScopeInstance:
		return ScopeInstance, nil
	case ScopeFleet:
		if shared {
			return ScopeFleet, nil
		}
		return "", fmt.Errorf("%w: scope fleet needs the redis store; with the memory store each instance keeps its own counters and breakers, so use scope=instance", ErrScope)
	}
	return "", fmt.Errorf("%w %q: want fleet or instance", ErrScope, s)
}

// FleetForceBreaker forces a route's breaker as ForceBreaker does, on
// every instance sharing the store. The message goes out first: when the
// store does not take it, the error wraps limit.ErrStoreUnavailable and
// this instance's breaker is left as it was. by names who asked, for the
// other instances' logs.
func (g *Gateway) FleetForceBreaker(ctx context.Context, by, route, mode string, ttl time.Duration) error {
	if _, err := parseForce(mode, ttl); err != nil {
		return err
	}
	if g.routeBreaker(route) == nil {
		return fmt.Errorf("%w: %q", ErrNoBreaker, route)
	}
	m := controlMessage{Kind: "breaker", By: by, Route: route, State: strings.ToLower(mode), TTL: int64(ttl)}
	if err := g.publish(ctx, &m); err != nil {
		if !errors.Is(err, ErrUnconfirmed) {
			return fmt.Errorf("breaker of %s not forced on any instance: %w", route, err)
		}
		// The message may reach the others when Redis answers: this
		// instance does as they may, rather than be the one left out.
		if ferr := g.forceBreaker(route, mode, ttl); ferr != nil {
			return ferr
		}
		g.keptForces.claim(route, m.Nonce)
		g.keptForces.mark(route, m.Nonce, m.State)
		return fmt.Errorf("breaker of %s forced on this instance; Redis did not answer in time, so the other instances may or may not have the force (GET /admin/breakers on each shows): %w", route, err)
	}
	if err := g.forceBreaker(route, mode, ttl); err != nil {
		return err
	}
	g.keptForces.claim(route, m.Nonce)
	g.keptForces.mark(route, m.Nonce, m.State)
	g.keepForce(ctx, m, ttl)
	if m.State == "auto" {
		// A breaker of scope fleet: the fleet's window starts afresh too
		// (breakerfleet.go).
		return g.resetFleetBreaker(route)
	}
	return nil
}

// FleetResetLimit resets one key as ResetLimit does, and tells the other
// instances, which log it. The counter is the fleet's own in the shared
// store; the store makes every instance forget what it remembers of the
// key (its local rejects and slices) by its own channel.
func (g *Gateway) FleetResetLimit(ctx context.Context, by, route, name string, values []string, fallback bool) error {
	if g.gen.Load().bus == nil {
		return fmt.Errorf("%w: scope fleet needs the redis store", ErrScope)
	}
	if err := g.ResetLimit(ctx, route, name, values, fallback); err != nil {
		return err
	}
	m := controlMessage{Kind: "reset", By: by, Route: route, Limit: name, Key: values, Fallback: fallback}
	if err := g.publish(ctx, &m); err != nil {
		return fmt.Errorf("the key was reset, but the other instances were not told and log nothing of it: %w", err)
	}
	return nil
}

func (g *Gateway) publish(ctx context.Context, m *controlMessage) error {
	bus := g.gen.Load().bus
	if bus == nil {
		return fmt.Errorf("%w: the store is not shared", ErrScope)
	}
	var n [12]byte
	rand.Read(n[:])
	m.Floodgate, m.From, m.Nonce = 1, g.ids.Prefix(), hex.EncodeToString(n[:])
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxControl {
		return fmt.Errorf("the action is %d bytes as a message, over the %d the instances read", len(b), maxControl)
	}
	// The sender applies its own action itself, at once, and skips the
	// echo; the nonce lets it skip a second delivery too.
	g.fleet.seen(m.Nonce, time.Now())
	return bus.Publish(ctx, controlKind, b)
}

// subscribe makes the instance carry out the fleet actions published on
// b, the bus of a shared store; nil: none.
func (g *Gateway) subscribe(b *fleetbus.Bus) {
	if b != nil {
		if err := b.Subscribe(controlKind, g.onControl); err != nil {
			g.log.Warn("fleet actions: cannot subscribe", "error", err.Error())
		}
		if err := b.Subscribe(overrideKind, g.onOverrides); err != nil {
			g.log.Warn("runtime overrides: cannot subscribe; read every second instead", "error", err.Error())
		}
	}
}

// onControl carries out a fleet action another instance published.
// Anyone who can publish on the Redis server reaches this: a message that
// is too large, does not parse or is not floodgate's is counted and
// dropped.
func (g *Gateway) onControl(b []byte) {
	if len(b) > maxControl {
		g.metrics.fleetIgnored.WithLabelValues("too_large").Inc()
		return
	}
	var m controlMessage
	if err := json.Unmarshal(b, &m); err != nil || m.Floodgate != 1 || m.From == "" || m.Nonce == "" {
		g.metrics.fleetIgnored.WithLabelValues("malformed").Inc()
		return
	}
	if m.From == g.ids.Prefix() || !g.fleet.seen(m.Nonce, time.Now()) {
		return
	}
	args := []any{"by", m.By, "from", m.From, "route", m.Route, "scope", ScopeFleet}
	switch m.Kind {
	case "breaker":
		// ForceBreaker refuses a ttl below zero or over MaxForceTTL.
		ttl := time.Duration(m.TTL)
		if ttl > 0 {
			args = append(args, "ttl", ttl.String())
		}
		if !g.keptForces.claim(m.Route, m.Nonce) {
			return // carried out from the fleet's set of forces already
		}
		if err := g.forceBreaker(m.Route, m.State, ttl); err != nil {
			g.log.Warn("fleet breaker force not applied", append(args, "asked", m.State, "error", err.Error())...)
			return
		}
		g.keptForces.mark(m.Route, m.Nonce, m.State)
		// The state as GET /admin/breakers spells it, as the instance
		// that took the call logs it.
		for _, b := range g.Breakers() {
			if b.Route == m.Route {
				args = append(args, "state", b.State, "forced", b.Forced)
			}
		}
		g.log.Info("circuit breaker forced by the fleet", args...)
	case "reset":
		// The store forgot the key by its own message; this is the log.
		g.log.Info("limit key reset by the fleet", append(args, "limit", m.Limit, "key", m.Key, "fallback", m.Fallback)...)
	default:
		g.metrics.fleetIgnored.WithLabelValues("unknown_kind").Inc()
	}
}

// fleetNonces are the nonces of recent fleet actions, so that an action
// delivered twice (by the old and the new store while a reload swaps
// them) is carried out once.
type fleetNonces struct {
	mu sync.Mutex
	at map[string]time.Time
}

// nonceMemory is how long a nonce is remembered: far longer than a
// message takes to arrive twice.
const nonceMemory = time.Minute

// seen records nonce and reports whether it is new.
func (f *fleetNonces) seen(nonce string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at == nil {
		f.at = map[string]time.Time{}
	}
	if _, ok := f.at[nonce]; ok {
		return false
	}
	if len(f.at) >= 1024 {
		for n, t := range f.at {
			if now.Sub(t) > nonceMemory {
				delete(f.at, n)
			}
		}
		if len(f.at) >= 1024 {
			// A flood of actions: forgetting costs at most a force applied
			// twice, which ends as the first would.
			clear(f.at)
		}
	}
	f.at[nonce] = now
	return true
}
