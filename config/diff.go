package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/floodgate-gw/floodgate/limit"
)

// Changes are what a reload from one config to the next changes, as the
// reload's log line tells an operator. Routes are named by id, limits as
// "ROUTE/NAME" ("global/NAME" for a global limit), in file order. The
// limits of a route that was added or removed are not listed again.
type Changes struct {
	RoutesAdded   []string
	RoutesRemoved []string
	// RoutesChanged are routes whose match, upstream or fallback changed.
	RoutesChanged []string

	LimitsAdded   []string
	LimitsRemoved []string
	// Rates are limits whose rate or burst changed, as
	// "ROUTE/NAME: 1/10s -> 2/10s".
	Rates []string
	// LimitsChanged are limits that changed otherwise (key, algorithm,
	// reject, overrides...); one whose rate changed too is in both.
	LimitsChanged []string

	// Breakers are routes whose breaker changed, as "ROUTE enabled",
	// "ROUTE disabled" or "ROUTE changed".
	Breakers []string

	// Settings are the other top-level blocks that changed: server,
	// admin, rls, store, responses, events, tracing.
	Settings []string
}

// Diff is what changes from old to new.
func Diff(old, new *Config) Changes {
	var c Changes
	oldRoutes := map[string]*Route{}
	for _, r := range old.Routes {
		oldRoutes[r.ID] = r
	}
	newRoutes := map[string]bool{}
	for _, r := range new.Routes {
		newRoutes[r.ID] = true
		o, ok := oldRoutes[r.ID]
		if !ok {
			c.RoutesAdded = append(c.RoutesAdded, r.ID)
			continue
		}
		if fingerprint(routeOnly(o)) != fingerprint(routeOnly(r)) {
			c.RoutesChanged = append(c.RoutesChanged, r.ID)
		}
		c.limits(r.ID, o.Limits, r.Limits)
		switch ob, nb := o.Breaker, r.Breaker; {
		case !ob.Enabled && nb.Enabled:
			c.Breakers = append(c.Breakers, r.ID+" enabled")
		case ob.Enabled && !nb.Enabled:
			c.Breakers = append(c.Breakers, r.ID+" disabled")
		case ob.Enabled && fingerprint(ob) != fingerprint(nb):
			c.Breakers = append(c.Breakers, r.ID+" changed")
		}
	}
	for _, r := range old.Routes {
		if !newRoutes[r.ID] {
			c.RoutesRemoved = append(c.RoutesRemoved, r.ID)
		}
	}
	c.limits("global", old.GlobalLimits, new.GlobalLimits)

	settings := []struct {
		name     string
		old, new any
	}{
		{"server", old.Server, new.Server},
		{"admin", old.Admin, new.Admin},
		{"rls", old.RLS, new.RLS},
		{"store", old.Store, new.Store},
		{"responses", old.Responses, new.Responses},
		{"events", old.Events, new.Events},
		{"tracing", old.Tracing, new.Tracing},
	}
	for _, s := range settings {
		// DeepEqual, not the fingerprint: that shows secrets as "***",
		// and a new Redis password is a change.
		if !reflect.DeepEqual(s.old, s.new) {
			c.Settings = append(c.Settings, s.name)
		}
	}
	return c
}

// limits adds the changes between the limits of one route.
func (c *Changes) limits(route string, old, new []*Limit) {
	was := map[string]*Limit{}
	for _, l := range old {
		was[l.Name] = l
	}
	is := map[string]bool{}
	for _, l := range new {
		is[l.Name] = true
		name := route + "/" + l.Name
		o, ok := was[l.Name]
		if !ok {
			c.LimitsAdded = append(c.LimitsAdded, name)
			continue
		}
		if from, to := rateOf(o), rateOf(l); from != to {
			c.Rates = append(c.Rates, name+": "+from+" -> "+to)
		}
		if fingerprint(limitOnly(o)) != fingerprint(limitOnly(l)) {
			c.LimitsChanged = append(c.LimitsChanged, name)
		}
	}
	for _, l := range old {
		if !is[l.Name] {
			c.LimitsRemoved = append(c.LimitsRemoved, route+"/"+l.Name)
		}
	}
}

// rateOf is a limit's rate as the file writes it, with the burst of a
// token bucket when it is not the rate's count.
func rateOf(l *Limit) string {
	if l.Rate.Period == 0 {
		return strconv.FormatInt(l.Rate.Count, 10) + " in flight"
	}
	s := l.Rate.String()
	if l.Algorithm == limit.TokenBucket && l.Burst != l.Rate.Count {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

// routeOnly is r without what Diff reports on its own: limits, breaker.
func routeOnly(r *Route) Route {
	c := *r
	c.Limits, c.Breaker = nil, Breaker{}
	return c
}

// limitOnly is l without its rate and burst, which Diff reports on their
// own.
func limitOnly(l *Limit) Limit {
	c := *l
	c.Rate, c.Burst = limit.Rate{}, 0
	return c
}

// fingerprint is v as GET /admin/config shows it: the file's notation,
// without what Parse derives (rules, lines).
func fingerprint(v any) string {
	b, err := json.Marshal(view(reflect.ValueOf(v), ""))
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

// diffListMax is how many names each list of String shows: a reload that
// changes 500 routes is said in one short line.
const diffListMax = 5

// None reports whether nothing changed.
func (c Changes) None() bool { return c.String() == "no changes" }

// String is the changes in one bounded line: "routes added: a, b;
// rates: api/user: 1/10s -> 2/10s", each list with its first few entries
// and the count of the rest, or "no changes".
func (c Changes) String() string {
	var b strings.Builder
	add := func(what string, items []string) {
		if len(items) == 0 {
			return
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(what)
		b.WriteString(": ")
		for i, it := range items[:min(len(items), diffListMax)] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(it)
		}
		if n := len(items) - diffListMax; n > 0 {
			fmt.Fprintf(&b, " (+%d more)", n)
		}
	}
	add("routes added", c.RoutesAdded)
	add("routes removed", c.RoutesRemoved)
	add("routes changed", c.RoutesChanged)
	add("limits added", c.LimitsAdded)
	add("limits removed", c.LimitsRemoved)
	add("rates", c.Rates)
	add("limits changed", c.LimitsChanged)
	add("breakers", c.Breakers)
	add("settings", c.Settings)
	if b.Len() == 0 {
		return "no changes"
	}
	return b.String()
}
