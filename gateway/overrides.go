package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/limit"
)

// A runtime override changes one running limit without editing a file:
// its rate (and burst), whether it is shadow, or whether it is decided at
// all. With a store the instances share, the overrides live in it as one
// versioned set, and every instance applies each version; with the memory
// store they apply to the one instance. An override wins over the file
// until it is removed or its ttl ends, across reloads; a reload that
// removes its limit drops it.
//
// The gateway applies a set of overrides as it applies a reload: it builds
// a generation from the file's config with the overrides laid over it. A
// limit keeps its name, so its counters go on as they do when a reload
// changes its rate.

// OverrideChange is what an override changes; nil fields keep the file's
// value. It reads and writes as the JSON of PUT /admin/overrides.
type OverrideChange struct {
	// Rate is a rate limit's new rate, as a file writes it ("800/s").
	Rate string `json:"rate,omitempty"`

	// Limit is a concurrency limit's new count of requests in flight.
	Limit int64 `json:"limit,omitempty"`

	// Burst is a token bucket's new size. Without it a new rate brings
	// its own count as the burst when the file's burst is the file rate's
	// count (written so or by default), and keeps the file's otherwise.
	Burst int64 `json:"burst,omitempty"`

	Shadow  *bool `json:"shadow,omitempty"`
	Enabled *bool `json:"enabled,omitempty"`
}

// OverrideRequest is one override as an operator asks for it.
type OverrideRequest struct {
	OverrideChange

	// TTL ends the override after this long, on every instance; zero:
	// until removed. From MinOverrideTTL to MaxOverrideTTL.
	TTL time.Duration

	// Reason and By are kept with the override and logged.
	Reason, By string
}

// Bounds of an override.
const (
	MinOverrideTTL = time.Second
	MaxOverrideTTL = 30 * 24 * time.Hour
	maxReason      = 200
	maxBy          = 64
)

// Override is an override as the set holds it.
type Override struct {
	Route    string         `json:"route"`
	Limit    string         `json:"limit"`
	Change   OverrideChange `json:"override"`
	Reason   string         `json:"reason,omitempty"`
	By       string         `json:"by,omitempty"`
	Set      time.Time      `json:"set_at"`
	Expires  time.Time      `json:"expires_at,omitzero"` // zero: until removed
	Instance string         `json:"instance,omitempty"`  // the instance that set it
}

func overrideName(route, lim string) string { return route + "/" + lim }

// OverrideError is an override refused for one of its fields.
type OverrideError struct {
	Field string // as the JSON names it: rate, burst, ttl…
	Msg   string
}

func (e *OverrideError) Error() string { return e.Field + ": " + e.Msg }

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
		if l := fileLimit(gen.file, ov.Route, ov.Limit); l != nil {
			st.File = fileValues(l, ov.Change)
		}
		if !ov.Expires.IsZero() {
			st.TTLLeft = milliRound(ov.Expires.Sub(now))
		}
		o.Overrides = append(o.Overrides, st)
	}
	return o
}

// fileValues are the values of l that c changes, as the file has them.
func fileValues(l *config.Limit, c OverrideChange) OverrideChange {
	var f OverrideChange
	if c.Rate != "" || c.Limit != 0 {
		if l.Algorithm == limit.Concurrency {
			f.Limit = l.Rate.Count
		} else {
			f.Rate = l.Rate.String()
		}
	}
	if l.Algorithm == limit.TokenBucket && (c.Rate != "" || c.Burst != 0) {
		f.Burst = l.Burst
	}
	if c.Shadow != nil {
		f.Shadow = &l.Shadow
	}
	if c.Enabled != nil {
		f.Enabled = new(bool)
		*f.Enabled = true
	}
	return f
}

// fileLimit finds a limit of cfg: route "global" names the global limits.
func fileLimit(cfg *config.Config, route, name string) *config.Limit {
	var ls []*config.Limit
	if route == "global" {
		ls = cfg.GlobalLimits
	} else {
		for _, r := range cfg.Routes {
			if r.ID == route {
				ls = r.Limits
			}
		}
	}
	for _, l := range ls {
		if l.Name == name {
			return l
		}
	}
	return nil
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
	if err := checkRequest(req); err != nil {
		return OverrideStatus{}, err
	}
	gen := g.gen.Load()
	l := fileLimit(gen.file, route, name)
	if l == nil {
		return OverrideStatus{}, fmt.Errorf("%w: route %q has no limit %q", ErrNoLimit, route, name)
	}
	if _, err := adjust(l, req.OverrideChange); err != nil {
		return OverrideStatus{}, err
	}
	if req.Rate != "" {
		// As a file writes it: " 5/s" and "5/1s" are 5/s.
		r, _ := limit.ParseRate(req.Rate)
		req.Rate = r.String()
	}
	ov := Override{
		Route: route, Limit: name, Change: req.OverrideChange,
		Reason: req.Reason, By: req.By, Set: g.now().UTC().Truncate(time.Millisecond), Instance: g.ids.Prefix(),
	}
	if req.TTL > 0 {
		ov.Expires = ov.Set.Add(req.TTL)
	}
	key := overrideName(route, name)
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
		replaced = parseReplaced(set.Replaced)
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

// parseReplaced reads the override a change replaced, nil for none.
func parseReplaced(b []byte) *Override {
	var ov Override
	if b == nil || json.Unmarshal(b, &ov) != nil {
		return nil
	}
	return &ov
}

// RemoveOverride removes the override of a route's limit on every
// instance, or on this one with the memory store, and returns it with the
// version its removal made. It returns an error wrapping ErrNoOverride
// when none is set, and one wrapping ErrNoLimit when the running file has
// no such limit either.
func (g *Gateway) RemoveOverride(ctx context.Context, route, name string) (Override, int64, error) {
	key := overrideName(route, name)
	gen := g.gen.Load()
	none := func() error {
		if fileLimit(gen.file, route, name) == nil {
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
		if r := parseReplaced(set.Replaced); r != nil {
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

// checkRequest checks what does not depend on the limit.
func checkRequest(req OverrideRequest) error {
	c := req.OverrideChange
	switch {
	case c.Rate == "" && c.Limit == 0 && c.Burst == 0 && c.Shadow == nil && c.Enabled == nil:
		return &OverrideError{Field: "override", Msg: "nothing to change: give rate (or limit for concurrency), burst, shadow or enabled"}
	case c.Limit < 0:
		return &OverrideError{Field: "limit", Msg: fmt.Sprintf("%d must be positive", c.Limit)}
	case c.Burst < 0:
		return &OverrideError{Field: "burst", Msg: fmt.Sprintf("%d must be positive", c.Burst)}
	case req.TTL < 0, req.TTL > 0 && req.TTL < MinOverrideTTL:
		return &OverrideError{Field: "ttl", Msg: fmt.Sprintf("%v: at least %v", req.TTL, MinOverrideTTL)}
	case req.TTL > MaxOverrideTTL:
		return &OverrideError{Field: "ttl", Msg: fmt.Sprintf("%v: at most %v (30 days)", req.TTL, MaxOverrideTTL)}
	}
	if err := checkText("reason", req.Reason, maxReason); err != nil {
		return err
	}
	return checkText("by", req.By, maxBy)
}

// checkText refuses what would break a log line or a terminal.
func checkText(field, s string, n int) error {
	if len(s) > n {
		return &OverrideError{Field: field, Msg: fmt.Sprintf("%d bytes, at most %d", len(s), n)}
	}
	if strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }) {
		return &OverrideError{Field: field, Msg: "holds a control character or invalid UTF-8"}
	}
	return nil
}

// adjust returns l with c laid over it, its rule and its value overrides'
// rules rebuilt; nil when c disables it.
func adjust(l *config.Limit, c OverrideChange) (*config.Limit, error) {
	alg := l.Algorithm
	n := *l
	r := freshRule(l.Rule)
	switch {
	case c.Rate != "" && alg == limit.Concurrency:
		return nil, &OverrideError{Field: "rate", Msg: "concurrency takes limit: N (requests in flight), not a rate"}
	case c.Limit != 0 && alg != limit.Concurrency:
		return nil, &OverrideError{Field: "limit", Msg: fmt.Sprintf("limit: N is for concurrency; a %v takes rate (rate: 100/s)", alg)}
	case c.Burst != 0 && alg != limit.TokenBucket:
		return nil, &OverrideError{Field: "burst", Msg: fmt.Sprintf("burst applies to token_bucket only (algorithm is %v)", alg)}
	}
	if c.Rate != "" {
		rate, err := limit.ParseRate(c.Rate)
		if err != nil {
			return nil, &OverrideError{Field: "rate", Msg: strings.TrimPrefix(err.Error(), fmt.Sprintf("rate %q: ", c.Rate))}
		}
		if alg == limit.TokenBucket && c.Burst == 0 && l.Burst == l.Rate.Count {
			n.Burst, r.Burst = rate.Count, rate.Count
		}
		n.Rate, r.Rate = rate, rate
	}
	if c.Limit != 0 {
		n.Rate = limit.Rate{Count: c.Limit}
		n.Limit, r.Rate = c.Limit, n.Rate
	}
	if c.Burst != 0 {
		n.Burst, r.Burst = c.Burst, c.Burst
	}
	if c.Shadow != nil {
		n.Shadow, r.Shadow = *c.Shadow, *c.Shadow
		n.Overrides = make([]*config.Override, len(l.Overrides))
		for i, o := range l.Overrides {
			oc, or := *o, freshRule(o.Rule)
			or.Shadow = *c.Shadow
			if err := or.Validate(); err != nil {
				return nil, &OverrideError{Field: "shadow", Msg: err.Error()}
			}
			oc.Rule = or
			n.Overrides[i] = &oc
		}
	}
	if err := r.Validate(); err != nil {
		field := "rate"
		switch {
		case c.Limit != 0:
			field = "limit"
		case c.Burst != 0 || c.Rate == "":
			field = "burst"
		}
		return nil, &OverrideError{Field: field, Msg: strings.TrimPrefix(err.Error(), "rule "+r.Name+": ")}
	}
	n.Rule = r
	if c.Enabled != nil && !*c.Enabled {
		return nil, nil
	}
	return &n, nil
}

// freshRule copies r's settings into a rule of its own, which derives
// its data again when validated.
func freshRule(r *limit.Rule) *limit.Rule {
	return &limit.Rule{
		Name: r.Name, Algorithm: r.Algorithm, Rate: r.Rate, Burst: r.Burst, Cost: r.Cost,
		Queue: r.Queue, Align: r.Align, Location: r.Location, Shadow: r.Shadow,
		Sliced: r.Sliced, LeaseTTL: r.LeaseTTL,
	}
}

// overlay returns file with set laid over it, and the overrides of set it
// could not apply, with why. file is not changed: what an override
// touches is copied.
func overlay(file *config.Config, set map[string]Override) (*config.Config, map[string]string) {
	skipped := map[string]string{}
	if len(set) == 0 {
		return file, skipped
	}
	cfg := *file
	// changed returns ls with the overrides of route laid over it, a new
	// slice when one applies.
	changed := func(ls []*config.Limit, route string) ([]*config.Limit, bool) {
		out := make([]*config.Limit, 0, len(ls))
		touched := false
		for _, l := range ls {
			name := overrideName(route, l.Name)
			ov, ok := set[name]
			if !ok {
				out = append(out, l)
				continue
			}
			n, err := adjust(l, ov.Change)
			if err != nil {
				skipped[name] = err.Error()
				out = append(out, l)
				continue
			}
			touched = true
			if n != nil {
				out = append(out, n)
			}
		}
		if !touched {
			return ls, false
		}
		return out, true
	}
	cfg.GlobalLimits, _ = changed(file.GlobalLimits, "global")
	cfg.Routes = make([]*config.Route, len(file.Routes))
	for i, r := range file.Routes {
		cfg.Routes[i] = r
		if ls, ok := changed(r.Limits, r.ID); ok {
			rc := *r
			rc.Limits = ls
			cfg.Routes[i] = &rc
		}
	}
	for name, ov := range set {
		if fileLimit(file, ov.Route, ov.Limit) == nil {
			skipped[name] = fmt.Sprintf("this instance's config has no limit %q on route %q", ov.Limit, ov.Route)
		}
	}
	return &cfg, skipped
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
		var ov Override
		if len(e.Value) > maxOverrideJSON || json.Unmarshal(e.Value, &ov) != nil ||
			overrideName(ov.Route, ov.Limit) != name || checkRequest(OverrideRequest{OverrideChange: ov.Change, Reason: ov.Reason, By: ov.By}) != nil {
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

// maxOverrideJSON bounds an override read from the store.
const maxOverrideJSON = 4 << 10

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
	cfg, skipped := overlay(prev.file, set)
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
		args = append(args, changeArgs(ov.Change)...)
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

func changeArgs(c OverrideChange) []any {
	var args []any
	if c.Rate != "" {
		args = append(args, "rate", c.Rate)
	}
	if c.Limit != 0 {
		args = append(args, "in_flight", c.Limit)
	}
	if c.Burst != 0 {
		args = append(args, "burst", c.Burst)
	}
	if c.Shadow != nil {
		args = append(args, "shadow", *c.Shadow)
	}
	if c.Enabled != nil {
		args = append(args, "enabled", *c.Enabled)
	}
	return args
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

// withoutGone splits set into the overrides whose limit file has and
// those of limits it no longer has.
func withoutGone(file *config.Config, set map[string]Override) (kept map[string]Override, gone []Override) {
	if set == nil {
		return nil, nil
	}
	kept = map[string]Override{}
	for name, ov := range set {
		if fileLimit(file, ov.Route, ov.Limit) == nil {
			gone = append(gone, ov)
			continue
		}
		kept[name] = ov
	}
	return kept, gone
}

// forgetGone drops the overrides of limits that the file running now no
// longer has from the memory store's set. reloadMu is held.
func (g *Gateway) forgetGone(gone []Override) {
	if len(gone) == 0 {
		return
	}
	for _, ov := range gone {
		g.log.Warn("runtime override dropped: the config no longer has its limit",
			append([]any{"route", ov.Route, "limit", ov.Limit, "by", ov.By}, changeArgs(ov.Change)...)...)
		delete(g.ov.local, overrideName(ov.Route, ov.Limit))
	}
	g.ov.version++
	g.metrics.overridesVersion.Set(float64(g.ov.version))
	v := g.ov.version
	g.ovVersion.Store(&v)
}
