package spec

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/limit"
)

// OnError is what a decision is when the store fails (docs/configuration.md,
// When the store fails).
type OnError uint8

const (
	OnErrorLocal OnError = iota
	OnErrorAllow
	OnErrorDeny
)

// Limit is one configured limit of a route, or a global limit, as its
// configuration says it.
type Limit struct {
	Name         string
	Rule         *limit.Rule
	Key          []Part
	Fallback     []Part
	AllowMissing bool // on_missing allow: a request without the key is not limited
	Headers      bool // the rate-limit headers are sent
	OnError      OnError
	Overrides    []Override
	UsesIP       bool // Key or Fallback has the ip part
	// ConstKey is the key when its parts are the same for every request
	// of the route (global and route parts only), and ConstValues their
	// values; "" otherwise.
	ConstKey    limit.Key
	ConstValues []string
}

// Override gives some requests a different rule with its own counters.
type Override struct {
	Values      [][]string // the key's values are one of these
	Header      string     // or the request carries Header = HeaderValue (canonical)
	HeaderValue string
	Claim       string // or its verified token has Claim = ClaimValue
	ClaimValue  string
	Rule        *limit.Rule
}

// NewLimit is lc, a limit of the route routeID (or a global one) in cfg.
func NewLimit(cfg *config.Config, routeID string, lc *config.Limit) Limit {
	l := Limit{
		Name:         lc.Name,
		Rule:         lc.Rule,
		AllowMissing: lc.OnMissing == config.OnMissingAllow,
		Headers:      lc.Headers,
	}
	switch oe := lc.OnError; {
	case oe == "" && cfg.Store.OnError == config.OnErrorAllow, oe == config.OnErrorAllow:
		l.OnError = OnErrorAllow
	case oe == "" && cfg.Store.OnError == config.OnErrorDeny, oe == config.OnErrorDeny:
		l.OnError = OnErrorDeny
	default:
		l.OnError = OnErrorLocal
	}
	for _, p := range lc.Key {
		l.Key = append(l.Key, PartOf(p))
	}
	for _, p := range lc.Fallback {
		l.Fallback = append(l.Fallback, PartOf(p))
	}
	l.UsesIP = UsesIP(l.Key) || UsesIP(l.Fallback)
	// A key of global and route parts only is the same for every request
	// of the route: it is made once, here.
	if !slices.ContainsFunc(l.Key, func(p Part) bool { return p.Src != Global && p.Src != Route }) {
		ps := make([]limit.Part, len(l.Key))
		l.ConstValues = make([]string, len(l.Key))
		for i, p := range l.Key {
			v := "-"
			if p.Src == Route {
				v = routeID
			}
			ps[i], l.ConstValues[i] = limit.Part{Kind: p.Kind, Value: v}, v
		}
		l.ConstKey = limit.NewKey(ps...)
	}
	for _, oc := range lc.Overrides {
		o := Override{Rule: oc.Rule}
		if oc.Header != nil {
			o.Header, o.HeaderValue = http.CanonicalHeaderKey(oc.Header.Name), oc.Header.Value
		}
		if oc.Claim != nil {
			o.Claim, o.ClaimValue = oc.Claim.Name, oc.Claim.Value
		}
		for _, kv := range oc.Values {
			o.Values = append(o.Values, []string(kv))
		}
		l.Overrides = append(l.Overrides, o)
	}
	return l
}

// Const reports a key whose parts are the same for every request of the
// route: ConstKey is the key.
func (l *Limit) Const() bool { return l.ConstValues != nil }

// MatchesValues reports whether values, a key's, are one of o's.
func (o *Override) MatchesValues(values []string) bool {
next:
	for _, want := range o.Values {
		if len(want) != len(values) {
			continue
		}
		for i := range want {
			if want[i] != values[i] {
				continue next
			}
		}
		return true
	}
	return false
}

// RuleFor is the limit's rule for a request whose key values are values,
// or that of the first override they match, whose counters are its own.
// An override by header matches when headers (canonical names) hold the
// value; nil headers match none. An override by claim matches none: there
// is no verified token to read it from.
func (l *Limit) RuleFor(values []string, headers map[string][]string) *limit.Rule {
	for i := range l.Overrides {
		o := &l.Overrides[i]
		switch {
		case o.Claim != "":
		case o.Header != "":
			if slices.Contains(headers[o.Header], o.HeaderValue) {
				return o.Rule
			}
		case o.MatchesValues(values):
			return o.Rule
		}
	}
	return l.Rule
}

// KeyOf is the key of the limit on the route route for values, one per
// part of its key (of its fallback key with fallback), as the gateway
// makes it for a request with those values: an ip value is grouped as
// ipKey groups a client's address, a host value loses its port, and a
// global part is "-" whatever it is given. It also returns the values as
// the key has them.
func (l *Limit) KeyOf(route string, ipKey func(netip.Addr) string, values []string, fallback bool) (limit.Key, []string, error) {
	parts := l.Key
	if fallback {
		parts = l.Fallback
		if len(parts) == 0 {
			return "", nil, fmt.Errorf("limit %q of route %q has no fallback key", l.Name, route)
		}
	}
	if len(values) != len(parts) {
		return "", nil, fmt.Errorf("limit %q has %d key parts; %d values given", l.Name, len(parts), len(values))
	}
	ps := make([]limit.Part, len(parts))
	vs := make([]string, len(parts))
	for i, p := range parts {
		v := values[i]
		switch p.Src {
		case Global:
			v = "-"
		case IP:
			if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]")); err == nil {
				v = ipKey(ip)
			}
		case Host:
			v = HostKey(v)
		}
		ps[i], vs[i] = limit.Part{Kind: p.Kind, Value: v, Fallback: fallback}, v
	}
	return limit.NewKey(ps...), vs, nil
}
