package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/overlay"
	"github.com/floodgate-gw/floodgate/limit"
)

// A runtime override changes one running limit without editing a file;
// package internal/overlay is what one is and how a set of them is laid
// over the file's config. This file is the gateway's control of them.
// With a store the instances share, the overrides live in it as one
// versioned set, and every instance applies each version; with the memory
// store they apply to the one instance.
//
// The gateway applies a set of overrides as it applies a reload: it builds
// a generation from the file's config with the overrides laid over it. A
// limit keeps its name, so its counters go on as they do when a reload
// changes its rate.

// OverrideChange is what an override changes; nil fields keep the file's
// value. It reads and writes as the JSON of PUT /admin/overrides.
type OverrideChange = overlay.Change

// OverrideRequest is one override as an operator asks for it.
type OverrideRequest = overlay.Request

// Bounds of an override's ttl.
const (
	MinOverrideTTL = overlay.MinTTL
	MaxOverrideTTL = overlay.MaxTTL
)

// Override is an override as the set holds it.
type Override = overlay.Override

// OverrideError is an override refused for one of its fields.
type OverrideError = overlay.Error

// ErrNoOverride is returned for removing an override that is not set.
var ErrNoOverride = errors.New("no such override")

// overrideKind is the versioned set of the overrides in a shared store,
// and the channel of its versions.
const overrideKind = "overrides"

// overrides is the set of overrides the gateway runs with.
type overrides struct {
	epoch   string // of the store's set; "" for the memory store's
	version int64
	set     map[string]Override // by route/limit; nil until the first is applied
	skipped map[string]string   // in set, but not applied here: why
	timer   *time.Timer         // fires at the first expiry
	local   map[string]Override // the memory store's own set
}

// Overrides is the set of overrides in force, as GET /admin/overrides
// shows it.
type Overrides struct {
	Scope     Scope            `json:"scope"`
	Epoch     string           `json:"epoch,omitempty"`
	Version   int64            `json:"version"`
	Overrides []OverrideStatus `json:"overrides"`
}

// OverrideStatus is one override and the file's values it overrides.
type OverrideStatus struct {
	Override
	File    OverrideChange `json:"file"`
	TTLLeft float64        `json:"ttl_left,omitempty"` // seconds
	Applied bool           `json:"applied"`
	Why     string         `json:"not_applied,omitempty"`

	// Set by SetOverride only: the version the change made, and the
	// override it replaced (nil: none).
	Version  int64     `json:"version,omitempty"`
	Replaced *Override `json:"replaced,omitempty"`
}

// Overrides lists the overrides in force and the version of the set.
func (g *Gateway) Overrides() Overrides {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	return g.overridesLocked()
}

func (g *Gateway) overridesLocked() Overrides {
	gen := g.gen.Load()
	o := Overrides{Scope: ScopeInstance, Epoch: g.ov.epoch, Version: g.ov.version, Overrides: []OverrideStatus{}}
	if gen.bus != nil {
		o.Scope = ScopeFleet
	}
	now := g.now()
	for _, name := range slices.Sorted(maps.Keys(g.ov.set)) {
		ov := g.ov.set[name]
		if !ov.Expires.IsZero() && !ov.Expires.After(now) {
			continue
		}
		st := OverrideStatus{Override: ov, Applied: true}
		if why, ok := g.ov.skipped[name]; ok {
			st.Applied, st.Why = false, why
		}
		if l := overlay.FindLimit(gen.file, ov.Route, ov.Limit); l != nil {
			st.File = overlay.FileValues(l, ov.Change)
		}
		if !ov.Expires.IsZero() {
			st.TTLLeft = milliRound(ov.Expires.Sub(now))
		}
		o.Overrides = append(o.Overrides, st)
	}
	return o
}

// SetOverride sets an override of a route's limit (route "global" for a
// global limit) on every instance that shares the store, or on this one
// with the memory store, and returns it as GET /admin/overrides shows it.
// It returns an error wrapping ErrNoLimit for a limit the running file does
// not have, an *OverrideError for a value the limit cannot take, and one
// wrapping limit.ErrStoreUnavailable when the store did not answer: then
// the override is in force nowhere, or (when the answer was lost) on
// every instance once they read the store.
func (g *Gateway) SetOverride(ctx context.Context, route, name string, req OverrideRequest) (OverrideStatus, error) {
	if err := overlay.Check(req); err != nil {
		return OverrideStatus{}, err
	}
	gen := g.gen.Load()
	found, err := overlay.CheckOn(gen.file, route, name, req.Change)
	if !found {
		return OverrideStatus{}, fmt.Errorf("%w: route %q has no limit %q", ErrNoLimit, route, name)
	}
	if err != nil {
		return OverrideStatus{}, err
	}
	if req.Rate != "" {
		// As a file writes it: " 5/s" and "5/1s" are 5/s.
		r, _ := limit.ParseRate(req.Rate)
		req.Rate = r.String()
	}
	ov := Override{
		Route: route, Limit: name, Change: req.Change,
		Reason: req.Reason, By: req.By, Set: g.now().UTC().Truncate(time.Millisecond), Instance: g.ids.Prefix(),
	}
	if req.TTL > 0 {
		ov.Expires = ov.Set.Add(req.TTL)
	}
	key := overlay.Name(route, name)
	var replaced *Override
	var version int64
	if s := gen.bus; s != nil {
		b, err := json.Marshal(ov)
		if err != nil {
			return OverrideStatus{}, err
		}
		set, err := s.Put(ctx, overrideKind, key, b, req.TTL)
		if err != nil {
			return OverrideStatus{}, g.changeFailed("set", err)
		}
		replaced = overlay.Replaced(set.Replaced)
		version = set.Version
		g.applyStoreSet(set, key)
	} else {
		g.reloadMu.Lock()
		if g.ov.local == nil {
			g.ov.local = map[string]Override{}
		}
		if old, ok := g.ov.local[key]; ok {
			replaced = &old
		}
		g.ov.local[key] = ov
		g.ov.version++
		version = g.ov.version
		g.applyLocked(g.ov.epoch, g.ov.version, maps.Clone(g.ov.local), key)
		g.reloadMu.Unlock()
	}
	st := OverrideStatus{Override: ov, Applied: true}
	for _, s := range g.Overrides().Overrides {
		if s.Route == route && s.Limit == name {
			st = s
		}
	}
	st.Version, st.Replaced = version, replaced
	return st, nil
}

// changeFailed is the error of a change the store did not take, or whose
// answer did not come; in that case the set is read again, so that what
// the change made (if it made anything) is in force and logged here too.
func (g *Gateway) changeFailed(what string, err error) error {
	switch {
	case errors.Is(err, fleetbus.ErrFull):
		return &OverrideError{Field: "limit", Msg: err.Error()}
	case errors.Is(err, ErrUnconfirmed):
		g.ovSignal()
		return fmt.Errorf("the store did not answer in time, so the override may or may not be %s on every instance; GET /admin/overrides shows what is in force: %w", what, err)
	}
	return fmt.Errorf("override not %s on any instance: %w", what, err)
}

// RemoveOverride removes the override of a route's limit on every
// instance, or on this one with the memory store, and returns it with the
// version its removal made. It returns an error wrapping ErrNoOverride
// when none is set, and one wrapping ErrNoLimit when the running file has
// no such limit either.
func (g *Gateway) RemoveOverride(ctx context.Context, route, name string) (Override, int64, error) {
	key := overlay.Name(route, name)
	gen := g.gen.Load()
	none := func() error {
		if !overlay.Has(gen.file, route, name) {
			return fmt.Errorf("%w: route %q has no limit %q, nor an override of one", ErrNoLimit, route, name)
		}
		return fmt.Errorf("%w for limit %q of route %q", ErrNoOverride, name, route)
	}
	if s := gen.bus; s != nil {
		set, changed, err := s.Delete(ctx, overrideKind, key)
		if err != nil {
			return Override{}, 0, g.changeFailed("removed", err)
		}
		g.applyStoreSet(set, key)
		if !changed {
			return Override{}, 0, none()
		}
		old := Override{Route: route, Limit: name}
		if r := overlay.Replaced(set.Replaced); r != nil {
			old = *r
		}
		return old, set.Version, nil
	}
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	old, ok := g.ov.local[key]
	if !ok {
		return Override{}, 0, none()
	}
	delete(g.ov.local, key)
	g.ov.version++
	g.applyLocked(g.ov.epoch, g.ov.version, maps.Clone(g.ov.local), key)
	return old, g.ov.version, nil
}

// applyStoreSet applies a set read from the store, if it is not older
// than the one in force: what one instance's change returned may arrive
// after a later version the instance read.
//
// own names the override that this instance's own call changed, which
// the call logs itself: "" for a set read on its own.
func (g *Gateway) applyStoreSet(set fleetbus.Set, own string) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if set.Epoch == g.ov.epoch && set.Version <= g.ov.version && g.ov.set != nil {
		return
	}
	if set.Skipped > 0 {
		g.log.Warn("runtime overrides: entries of the store skipped", "skipped", set.Skipped, "version", set.Version)
	}
	lost := set.Epoch != g.ov.epoch && g.ov.set != nil && len(g.ov.set) > 0
	// The entries end by the Redis clock; this instance's may be off.
	shift := g.now().Sub(set.Now)
	if set.Now.IsZero() {
		shift = 0
	}
	m := map[string]Override{}
	for name, e := range set.Entries {
		ov, err := overlay.Decode(name, e.Value)
		if err != nil {
			g.metrics.fleetIgnored.WithLabelValues("malformed").Inc()
			continue
		}
		ov.Expires = time.Time{}
		if !e.Expires.IsZero() {
			ov.Expires = e.Expires.Add(shift)
		}
		m[name] = ov
	}
	if lost {
		g.log.Warn("runtime overrides: the store holds another set (Redis lost it, or it was deleted); the fleet's overrides are what it holds now",
			"overrides_before", len(g.ov.set), "overrides_now", len(m), "version", set.Version)
	}
	g.applyLocked(set.Epoch, set.Version, m, own)
}

// applyLocked makes set, at version, the overrides in force: it builds the
// generation of the file's config with set laid over it and swaps it in.
// reloadMu is held.
func (g *Gateway) applyLocked(epoch string, version int64, set map[string]Override, own string) {
	now := g.now()
	for name, ov := range set {
		if !ov.Expires.IsZero() && !ov.Expires.After(now) {
			delete(set, name)
		}
	}
	prev := g.gen.Load()
	before, skippedBefore := g.ov.set, g.ov.skipped
	g.ov.epoch, g.ov.version = epoch, version
	if err := g.swapOverlay(prev, set); err != nil {
		// The file built; only an override can have broken it, and each
		// was checked against its limit. Keep what runs.
		g.log.Error("runtime overrides not applied", "version", version, "error", err.Error())
		return
	}
	g.logOverrides(before, set, version, own)
	g.noteSkipped(skippedBefore)
	g.metrics.overridesVersion.Set(float64(version))
	g.ovVersion.Store(&version)
	select {
	case g.announceNow <- struct{}{}:
	default:
	}
	g.scheduleExpiry(set)
}

// swapOverlay builds the generation of prev's file with set laid over it,
// and swaps it in. reloadMu is held.
func (g *Gateway) swapOverlay(prev *generation, set map[string]Override) error {
	cfg, skipped := overlay.Apply(prev.file, set)
	gen, err := g.build(cfg, prev)
	if err != nil {
		return err
	}
	gen.file = prev.file
	g.ov.set, g.ov.skipped = set, skipped
	g.gen.Store(gen)
	g.health.Apply(gen.upstreams())
	g.retire(prev)
	return nil
}

// logOverrides writes a line per override that came, changed or went,
// but for own, the one this instance's call changed, which the call logs.
func (g *Gateway) logOverrides(before, after map[string]Override, version int64, own string) {
	for name, ov := range after {
		old, had := before[name]
		if name == own || had && old.Set.Equal(ov.Set) && old.Instance == ov.Instance {
			continue
		}
		args := []any{"route", ov.Route, "limit", ov.Limit, "by", ov.By, "version", version}
		args = append(args, ov.Change.LogArgs()...)
		if ov.Reason != "" {
			args = append(args, "reason", ov.Reason)
		}
		if !ov.Expires.IsZero() {
			args = append(args, "expires_at", ov.Expires.UTC().Format(time.RFC3339))
		}
		g.log.Info("runtime override in force", append(args, "from", ov.Instance)...)
	}
	for name, ov := range before {
		if _, ok := after[name]; ok || name == own {
			continue
		}
		if !ov.Expires.IsZero() && !ov.Expires.After(g.now()) {
			g.log.Info("runtime override expired", "route", ov.Route, "limit", ov.Limit, "by", ov.By, "version", version)
			continue
		}
		g.log.Info("runtime override removed", "route", ov.Route, "limit", ov.Limit, "version", version)
	}
}

// noteSkipped logs each override in force that this instance cannot
// apply, once until its reason changes, and counts those it applies.
// reloadMu is held.
func (g *Gateway) noteSkipped(before map[string]string) {
	for name, why := range g.ov.skipped {
		if before[name] == why {
			continue
		}
		ov := g.ov.set[name]
		g.log.Warn("runtime override not applied here", "route", ov.Route, "limit", ov.Limit, "by", ov.By, "why", why)
	}
	g.metrics.overrides.Set(float64(len(g.ov.set) - len(g.ov.skipped)))
}

// scheduleExpiry arms the timer that lays the set over the file again
// when its first override ends. reloadMu is held.
func (g *Gateway) scheduleExpiry(set map[string]Override) {
	if g.ov.timer != nil {
		g.ov.timer.Stop()
		g.ov.timer = nil
	}
	var first time.Time
	for _, ov := range set {
		if !ov.Expires.IsZero() && (first.IsZero() || ov.Expires.Before(first)) {
			first = ov.Expires
		}
	}
	if first.IsZero() {
		return
	}
	// Timers keep the wall clock (Options.Now); a few ms late, so that
	// the override is past its end when the set is laid again.
	d := max(first.Sub(g.now()), 0) + 5*time.Millisecond
	g.ov.timer = time.AfterFunc(d, func() {
		select {
		case <-g.stop:
			return
		default:
		}
		g.reloadMu.Lock()
		defer g.reloadMu.Unlock()
		if g.ov.local != nil {
			for name, ov := range g.ov.local {
				if !ov.Expires.IsZero() && !ov.Expires.After(g.now()) {
					delete(g.ov.local, name)
				}
			}
		}
		g.applyLocked(g.ov.epoch, g.ov.version, maps.Clone(g.ov.set), "")
	})
}

// syncOverrides keeps the overrides in force equal to the store's set: an
// announced version is read at once, and the version is asked for every
// second, so that an instance that missed an announcement (it started,
// reconnected after an outage) catches up within a second.
func (g *Gateway) syncOverrides() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		g.syncOnce()
		select {
		case <-g.stop:
			return
		case <-g.ovNotify:
		case <-t.C:
		}
	}
}

func (g *Gateway) syncOnce() {
	s := g.gen.Load().bus
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	g.syncForces(ctx, s)
	epoch, version, err := s.SetVersion(ctx, overrideKind)
	if err != nil {
		g.syncFailed(err)
		return
	}
	g.reloadMu.Lock()
	current := epoch == g.ov.epoch && version == g.ov.version && g.ov.set != nil
	g.reloadMu.Unlock()
	if current {
		return
	}
	set, err := s.Read(ctx, overrideKind)
	if err != nil {
		g.syncFailed(err)
		return
	}
	if set.Epoch != epoch || set.Version < version {
		// Changed between the two reads; read again on the next beat.
		g.ovSignal()
	}
	// A set of another epoch (Redis lost the last one) passes the
	// version check of applyStoreSet whatever its version.
	g.applyStoreSet(set, "")
}

// syncFailed logs, at most once a minute, that the overrides could not be
// read because the store holds a set floodgate did not write (a version
// that is not a number). While Redis is down every call fails, which the
// store's failures say already.
func (g *Gateway) syncFailed(err error) {
	if !errors.Is(err, fleetbus.ErrBadSet) {
		return
	}
	now := g.now().Unix()
	if last := g.ovWarned.Load(); now-last < 60 || !g.ovWarned.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn("runtime overrides: cannot read the fleet's set; the overrides in force stay", "error", err.Error())
}

// ovSignal wakes syncOverrides.
func (g *Gateway) ovSignal() {
	select {
	case g.ovNotify <- struct{}{}:
	default:
	}
}

// onOverrides hears a version announced on the store's channel. What it
// carries is only a hint: the set itself is read from the store.
func (g *Gateway) onOverrides(b []byte) {
	if v, err := strconv.ParseInt(string(b), 10, 64); err != nil || v < 1 {
		g.metrics.fleetIgnored.WithLabelValues("malformed").Inc()
		return
	}
	g.ovSignal()
}

// forgetGone drops the overrides of limits that the file running now no
// longer has from the memory store's set. reloadMu is held.
func (g *Gateway) forgetGone(gone []Override) {
	if len(gone) == 0 {
		return
	}
	for _, ov := range gone {
		g.log.Warn("runtime override dropped: the config no longer has its limit",
			append([]any{"route", ov.Route, "limit", ov.Limit, "by", ov.By}, ov.Change.LogArgs()...)...)
		delete(g.ov.local, overlay.Name(ov.Route, ov.Limit))
	}
	g.ov.version++
	g.metrics.overridesVersion.Set(float64(g.ov.version))
	v := g.ov.version
	g.ovVersion.Store(&v)
}
