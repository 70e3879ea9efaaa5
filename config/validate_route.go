package config

import (
	"errors"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/internal/pathclean"
)

// Routes: their match, upstream and breaker, and routes that can never be
// reached.

func (v *validator) route(c *Config, r *Route, p string, ids, global map[string]string) {
	ip := p + ".id"
	idOK := false
	switch {
	case v.failed(ip):
	case r.ID == "":
		v.errorf(p, "a route needs an id")
	case r.ID == "global":
		v.errorf(ip, `"global" is reserved for the global limits`)
	case !nameRE.MatchString(r.ID):
		v.errorf(ip, "%q: a route id is made of a-z, 0-9, _ and -", r.ID)
	default:
		if first, ok := ids[r.ID]; ok {
			v.errorf(ip, "duplicate route id %q (first at line %d)", r.ID, v.line(first))
		} else {
			ids[r.ID] = ip
		}
		idOK = true
	}
	v.match(&r.Match, p+".match")
	v.upstream(&r.Upstream, &r.Match, p+".upstream")

	own := map[string]string{}
	lease := longestQueue(c.GlobalLimits, r.Limits) + r.Upstream.ConnectTimeout + r.Upstream.Timeout + leaseSlack
	for i, l := range r.Limits {
		lp := fmt.Sprintf("%s.limits[%d]", p, i)
		if v.bad[lp] {
			continue
		}
		ok := v.uniqueName(l, lp, own, global)
		if r.Protect != nil && l.Name == ProtectName {
			v.errorf(lp+".name", "%q names the route's protection in runtime overrides; give this limit another name", l.Name)
		}
		v.limit(l, lp, r.ID+":"+l.Name, lease, ok && idOK)
	}
	v.breaker(&r.Breaker, p+".breaker")
	v.breakerScope(&r.Breaker, p+".breaker")

	f, fp := &r.Fallback, p+".fallback"
	if f.Status < 200 || f.Status > 599 {
		// 2xx is allowed: a recorded entry may honestly be answered 202.
		v.errorf(fp+".status", "%d is outside 200..599", f.Status)
	}
	v.code(fp+".code", f.Code)
	if f.Record && c.Events.Sink == SinkNone {
		v.errorf(fp+".record", "record: true needs an events sink, but events.sink is none")
	}
	if r.Protect != nil {
		v.protect(r.Protect, p+".protect")
	}
}

// protect checks a route's protect block.
func (v *validator) protect(pr *Protect, p string) {
	switch {
	case !(pr.Min > 0) || pr.Min > 1e9:
		v.errorf(p+".min", "%v: the least the learned limit may be, in requests a second: more than 0, at most 1e9", pr.Min)
	case !(pr.Max >= 0) || pr.Max > 1e9:
		v.errorf(p+".max", "%v: the most the learned limit may be, in requests a second (0: none)", pr.Max)
	case pr.Max > 0 && pr.Max < pr.Min:
		v.errorf(p+".max", "%v is under min %v", pr.Max, pr.Min)
	}
	if !(pr.Tolerance > 1) || pr.Tolerance > 100 {
		v.errorf(p+".tolerance", "%v: how many times its healthy latency an answer may take, more than 1 and at most 100", pr.Tolerance)
	}
	if pr.WarmUp < 0 || pr.WarmUp > 10*time.Minute {
		v.errorf(p+".warm_up", "%v: how long admission ramps up after an idle spell or the breaker closing, 0s to 10m", pr.WarmUp)
	}
	if s := pr.Reject.Status; s < 400 || s > 599 {
		v.errorf(p+".reject.status", "%d is outside 400..599", s)
	}
	v.code(p+".reject.code", pr.Reject.Code)
	if pr.Priority != nil {
		v.priority(pr.Priority, p+".priority")
	}
}

// maxLevels is the most levels protect.priority takes.
const maxLevels = 8

// priority checks a protect block's priority.
func (v *validator) priority(pr *Priority, p string) {
	if !v.has(p+".key") && !v.failed(p+".key") {
		v.errorf(p, "priority needs key: the key part whose value is the level (header:X-Priority, jwt:tier...)")
	}
	switch n := len(pr.Levels); {
	case n < 2 || n > maxLevels:
		v.errorf(p+".levels", "%d levels: give 2 to %d, highest first", n, maxLevels)
	default:
		seen := map[string]bool{}
		for i, l := range pr.Levels {
			switch {
			case l == "" || len(l) > 64 || strings.ContainsFunc(l, unicode.IsControl):
				v.errorf(fmt.Sprintf("%s.levels[%d]", p, i), "%q: a level is 1 to 64 printable characters", l)
			case seen[l]:
				v.errorf(fmt.Sprintf("%s.levels[%d]", p, i), "%q is listed twice", l)
			}
			seen[l] = true
		}
	}
	if pr.MaxWait < 0 || pr.MaxWait > 5*time.Second {
		v.errorf(p+".max_wait", "%v: how long a request may wait for room, 0s to 5s (a connection held longer helps no one)", pr.MaxWait)
	}
}

func (v *validator) code(p, code string) {
	if !codeRE.MatchString(code) {
		v.errorf(p, "%q: a code is made of a-z, 0-9 and _", code)
	}
}

func (v *validator) match(m *Match, p string) {
	pp := p + ".path"
	switch {
	case v.failed(p):
	case m.Path == "":
		v.errorf(p, "a route needs match.path (an exact path, or a prefix such as /api/orders/**)")
	case !strings.HasPrefix(m.Path, "/"):
		v.errorf(pp, "%q does not start with /", m.Path)
	default:
		base, prefix := m.Prefix()
		if !prefix {
			base = m.Path
		}
		switch {
		case strings.HasSuffix(m.Path, "/*") && !strings.Contains(strings.TrimSuffix(m.Path, "/*"), "*"):
			v.errorf(pp, `%q: a prefix is written with "**": %q matches it and every path below`, m.Path, m.Path+"*")
		case strings.Contains(base, "*"):
			v.errorf(pp, `%q: "**" may only end a path, as "/**", and "*" has no other use`, m.Path)
		case strings.ContainsAny(base, "?#"):
			v.errorf(pp, "%q: a path to match has no query or fragment", m.Path)
		case base != "":
			// Requests are matched after cleaning (dot segments resolved, escapes normalized), so an
			// unclean pattern would never match anything.
			c, err := pathclean.Clean(base)
			switch {
			case err != nil:
				v.errorf(pp, "%q can never match: a request with such a path is answered 400 (%s)", m.Path, strings.TrimPrefix(err.Error(), pathclean.ErrBadPath.Error()+": "))
			case c != base:
				if prefix {
					c = strings.TrimSuffix(c, "/") + "/**"
				}
				v.errorf(pp, "%q is not a clean path (requests are matched as %q)", m.Path, c)
			}
		}
	}
	for i, meth := range m.Methods {
		mp := fmt.Sprintf("%s.methods[%d]", p, i)
		if v.failed(mp) {
			continue
		}
		if !isToken(meth) {
			v.errorf(mp, "%q is not an HTTP method", meth)
			continue
		}
		m.Methods[i] = strings.ToUpper(meth)
	}
	if m.Host != "" {
		hp := p + ".host"
		if _, _, err := net.SplitHostPort(m.Host); err == nil {
			v.errorf(hp, "%q: a host to match has no port (requests are compared without it)", m.Host)
		} else if strings.ContainsAny(m.Host, "/*?# @") {
			v.errorf(hp, "%q is not a host name", m.Host)
		} else {
			m.Host = strings.ToLower(m.Host)
		}
	}
}

func (v *validator) upstream(u *Upstream, m *Match, p string) {
	if len(u.Targets) == 0 && !v.failed(p+".targets") {
		v.errorf(p+".targets", "a route needs at least one target")
	}
	if s := u.StripPrefix; s != "" {
		sp := p + ".strip_prefix"
		base, prefix := m.Prefix()
		if !prefix {
			base = m.Path
		}
		switch {
		case !strings.HasPrefix(s, "/") || path.Clean(s) != s || s == "/":
			v.errorf(sp, "%q is not a clean path prefix such as /api", s)
		case m.Path != "" && base != s && !strings.HasPrefix(base, s+"/"):
			// Stripping from some of a route's requests and not others
			// would hand the upstream two shapes of path.
			v.errorf(sp, "%q is not a prefix of every path match.path %q matches", s, m.Path)
		}
	}
	v.positive(p+".connect_timeout", u.ConnectTimeout)
	v.positive(p+".timeout", u.Timeout)
	v.positive(p+".idle_timeout", u.IdleTimeout)
	v.balance(u, p)
	v.health(&u.Health, u.Protocol, p)
	v.eject(&u.Eject, p)
	v.protocol(u, p)
	v.upstreamTLS(u, p)
}

// protocol checks upstream.protocol and that every target's scheme suits
// it: h2c is HTTP/2 in clear and h2 is HTTP/2 over TLS, so an https target
// of h2c (or an http one of h2) would be spoken to in the wrong way.
func (v *validator) protocol(u *Upstream, p string) {
	pp := p + ".protocol"
	var want, is, other string
	switch u.Protocol {
	case ProtocolHTTP1:
		return
	case ProtocolH2C:
		want, is, other = "http", "HTTP/2 in clear", "for HTTP/2 over TLS use protocol h2"
	case ProtocolH2:
		want, is, other = "https", "HTTP/2 over TLS", "for HTTP/2 in clear use protocol h2c"
	default:
		if !v.failed(pp) {
			v.errorf(pp, "unknown protocol %q (http1, h2c, h2)", u.Protocol)
		}
		return
	}
	if v.failed(p + ".targets") {
		return
	}
	for i, t := range u.Targets {
		if t.Scheme != want {
			v.errorf(fmt.Sprintf("%s.targets[%d]", p, i), "%q: protocol %s is %s and takes %s:// targets; %s",
				redactedURL(t), u.Protocol, is, want, other)
		}
	}
}

// breakerKeys are the YAML keys of breaker.Settings' fields that a route's
// breaker block sets.
var breakerKeys = map[string]string{
	"Window":           "window",
	"MinCalls":         "min_calls",
	"FailureRate":      "failure_rate",
	"SlowCallDuration": "slow_call_duration",
	"SlowCallRate":     "slow_call_rate",
	"OpenFor":          "open_for",
	"HalfOpenCalls":    "half_open_calls",
}

// breaker reports what breaker.Settings.Validate refuses of b, at b's
// keys: the breaker's rules are its own, stated once. The trial timeout
// is the upstream's, checked with the upstream.
func (v *validator) breaker(b *Breaker, p string) {
	s := breaker.Settings{
		Window:           b.Window,
		MinCalls:         b.MinCalls,
		FailureRate:      b.FailureRate,
		SlowCallDuration: b.SlowCallDuration,
		SlowCallRate:     b.SlowCallRate,
		OpenFor:          b.OpenFor,
		HalfOpenCalls:    b.HalfOpenCalls,
		TrialTimeout:     time.Second,
	}
	var errs interface{ Unwrap() []error }
	if err := s.Validate(); errors.As(err, &errs) {
		for _, err := range errs.Unwrap() {
			var se *breaker.SettingError
			if !errors.As(err, &se) {
				continue
			}
			if key := breakerKeys[se.Field]; key != "" && !v.failed(p+"."+key) {
				v.errorf(p+"."+key, "%v %s", se.Value, se.Why)
			}
		}
	}
	for i, s := range b.FailureStatuses {
		if s < 100 || s > 599 {
			v.errorf(fmt.Sprintf("%s.failure_statuses[%d]", p, i), "%d is not an HTTP status (100..599)", s)
		}
	}
}

// unreachable warns of a route that an earlier one hides. It is not an
// error: routes are tried in file order and the first match wins, as in other gateways, and a route
// may be parked behind another on purpose.
func (v *validator) unreachable(routes []*Route) {
	for j, later := range routes {
		for _, earlier := range routes[:j] {
			if covers(&earlier.Match, &later.Match) {
				v.warnf(fmt.Sprintf("routes[%d].match", j), "unreachable: route %q (line %d) takes every request this route matches (the first match wins)", earlier.ID, earlier.Line)
				break
			}
		}
	}
}

// covers reports whether every request b matches is matched by a.
func covers(a, b *Match) bool {
	if a.Path == "" || b.Path == "" || a.Host != "" && a.Host != b.Host {
		return false
	}
	if len(a.Methods) > 0 {
		if len(b.Methods) == 0 {
			return false
		}
		for _, m := range b.Methods {
			if !slices.Contains(a.Methods, m) {
				return false
			}
		}
	}
	ap, aPrefix := a.Prefix()
	bp, bPrefix := b.Prefix()
	if !bPrefix {
		bp = b.Path
	}
	if !aPrefix {
		return !bPrefix && a.Path == b.Path
	}
	return ap == "" || bp == ap || strings.HasPrefix(bp, ap+"/")
}
