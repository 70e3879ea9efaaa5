package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/internal/fleetbus"
)

// A fleet force reaches the instances connected when it is published
// (fleet.go). So that an instance that starts or reconnects later is
// forced too, the store keeps the fleet's forces in a versioned set, one
// entry per route, that ends with the force's ttl; each instance reads it
// as it reads the overrides, and carries out what it has not yet seen.

// forceKind is the versioned set of the fleet's forces.
const forceKind = "forces"

// keptForce is one fleet force as the set holds it.
type keptForce struct {
	State string `json:"state"` // open or closed
	By    string `json:"by"`
	From  string `json:"from"`
	Nonce string `json:"nonce"` // the force's message's
}

// keptForces are the fleet forces an instance has seen, by route (the
// nonce of each), and of those the ones in force on it: a force of the
// instance's own takes the route out of applied, and the fleet's set does
// not undo it with a force already seen.
//
// A force reaches an instance twice, by its message and by the set, in
// either order: the first to claim its nonce carries it out. The sender
// publishes before it keeps the force in the set, so a set read just
// after the message came may not hold it yet: for forceSettle after a
// route's message (heard), the set does not steer that route, and is read
// again until it may. Without that, a set read in that gap would give
// back the force just heard, for good: the next read finds it seen.
type keptForces struct {
	mu      sync.Mutex
	seen    map[string]string
	applied map[string]bool
	heard   map[string]time.Time
	epoch   string
	version int64
}

// forceSettle is how long a fleet force's message may come before the
// set holds the force: the sender's Put, within the store's time for a
// change, on a loaded machine.
const forceSettle = 10 * time.Second

func (k *keptForces) init() {
	if k.seen == nil {
		k.seen, k.applied, k.heard = map[string]string{}, map[string]bool{}, map[string]time.Time{}
	}
}

// claim takes the force nonce of route, come by message (or the sender's
// own), to carry out, and reports false when it was taken already.
func (k *keptForces) claim(route, nonce string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	if k.seen[route] == nonce {
		return false
	}
	k.seen[route] = nonce
	k.heard[route] = time.Now()
	return true
}

func (k *keptForces) mark(route, nonce, state string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	k.seen[route] = nonce
	if state == "auto" {
		delete(k.applied, route)
	} else {
		k.applied[route] = true
	}
}

func (k *keptForces) unmark(route string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.applied, route)
}

// keepForce puts a fleet force in the store's set, or takes the route out
// for auto. A failure leaves the force to the instances that heard it.
func (g *Gateway) keepForce(ctx context.Context, m controlMessage, ttl time.Duration) {
	bus := g.gen.Load().bus
	if bus == nil {
		return
	}
	var err error
	if m.State == "auto" {
		_, _, err = bus.Delete(ctx, forceKind, m.Route)
	} else {
		b, _ := json.Marshal(keptForce{State: m.State, By: m.By, From: m.From, Nonce: m.Nonce})
		_, err = bus.Put(ctx, forceKind, m.Route, b, ttl)
	}
	if err != nil {
		g.log.Warn("fleet breaker force not kept for instances that start later", "route", m.Route, "state", m.State, "error", err.Error())
	}
}

// syncForces carries out the fleet's forces this instance has not seen,
// and gives back the breakers whose fleet force ended while it was not
// listening.
func (g *Gateway) syncForces(ctx context.Context, s *fleetbus.Bus) {
	epoch, version, err := s.SetVersion(ctx, forceKind)
	if err != nil {
		return
	}
	k := &g.keptForces
	k.mu.Lock()
	current := epoch == k.epoch && version == k.version
	k.mu.Unlock()
	if current {
		return
	}
	set, err := s.Read(ctx, forceKind)
	if err != nil {
		return
	}
	g.applyForces(set)
}

func (g *Gateway) applyForces(set fleetbus.Set) {
	k := &g.keptForces
	shift := g.now().Sub(set.Now)
	type todo struct {
		route string
		f     keptForce
		ttl   time.Duration
	}
	var force []todo
	var giveBack []string
	k.mu.Lock()
	k.init()
	settled := true
	for route, at := range k.heard {
		if time.Since(at) < forceSettle {
			settled = false
		} else {
			delete(k.heard, route)
		}
	}
	if settled {
		// Read again on the next beat otherwise, once what was heard has
		// had the time to reach the set.
		k.epoch, k.version = set.Epoch, set.Version
	}
	for route, e := range set.Entries {
		if _, ok := k.heard[route]; ok {
			continue
		}
		var f keptForce
		if json.Unmarshal(e.Value, &f) != nil || (f.State != "open" && f.State != "closed") || f.Nonce == "" {
			g.metrics.fleetIgnored.WithLabelValues("malformed").Inc()
			continue
		}
		if k.seen[route] == f.Nonce {
			continue
		}
		var ttl time.Duration
		if !e.Expires.IsZero() {
			if ttl = e.Expires.Add(shift).Sub(g.now()); ttl <= 0 {
				continue
			}
			ttl = min(ttl, MaxForceTTL)
		}
		// Claimed here, so that the force's message, should it come
		// now, is not carried out again.
		k.seen[route] = f.Nonce
		force = append(force, todo{route, f, ttl})
	}
	for route := range k.applied {
		if _, ok := set.Entries[route]; !ok && k.heard[route].IsZero() {
			giveBack = append(giveBack, route)
		}
	}
	k.mu.Unlock()
	for _, t := range force {
		args := []any{"by", t.f.By, "from", t.f.From, "route", t.route, "scope", ScopeFleet}
		if err := g.forceBreaker(t.route, t.f.State, t.ttl); err != nil {
			// A route without a breaker here: this instance's file differs.
			continue
		}
		k.mark(t.route, t.f.Nonce, t.f.State)
		if t.ttl > 0 {
			args = append(args, "ttl", t.ttl.Round(time.Second).String())
		}
		g.log.Info("circuit breaker forced by the fleet", append(args, "state", breakerState(g, t.route), "forced", true, "caught_up", true)...)
	}
	for _, route := range giveBack {
		k.unmark(route)
		// Forced still: the fleet gave it back (or its ttl ended by the
		// Redis clock) while this instance did not hear.
		if forced(g, route) && g.forceBreaker(route, "auto", 0) == nil {
			g.log.Info("circuit breaker given back by the fleet", "route", route, "state", breakerState(g, route), "caught_up", true)
		}
	}
}

// breakerState is the state of route's breaker, as GET /admin/breakers
// spells it; "" without one.
func breakerState(g *Gateway, route string) string {
	for _, b := range g.Breakers() {
		if b.Route == route {
			return b.State
		}
	}
	return ""
}

func forced(g *Gateway, route string) bool {
	for _, b := range g.Breakers() {
		if b.Route == route {
			return b.Forced
		}
	}
	return false
}
