package replay

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/gateway/clientip"
	"github.com/floodgate-gw/floodgate/internal/jwtverify"
	"github.com/floodgate-gw/floodgate/internal/leases"
	"github.com/floodgate-gw/floodgate/internal/pathclean"
	"github.com/floodgate-gw/floodgate/internal/spec"
	"github.com/floodgate-gw/floodgate/limit"
)

// Recorded is one route's limits, global ones first, built from a
// configuration as the gateway builds them, to decide again the requests
// the route recorded (floodgate events replay). A recorded request is not
// there to read its key parts from: its keys are built from the values the
// event kept (events.Event.Keys), so the stored keys, and the counters,
// are those the request would have used.
type Recorded struct {
	cfg     *config.Config
	route   string
	match   spec.Match
	limits  []spec.Limit // global ones first
	globals int          // how many of limits are global
	ips     *clientip.Resolver
	tokens  *tokenCheck // nil: no server.jwt
	log     *slog.Logger
}

// tokenCheck verifies a recorded request's token as server.jwt says.
type tokenCheck struct {
	from jwtverify.From
	v    *jwtverify.Verifier
}

// ErrNotRecorded is wrapped by the error of Recorded.Check: the event is
// not one the gateway, under this configuration, can have recorded for
// the route.
var ErrNotRecorded = errors.New("not a request this configuration records")

// RecordedLimit is one limit of a recorded request.
type RecordedLimit struct {
	// Name is the limit's name; Global says it is one of global_limits.
	Name   string
	Global bool
	// Shared says the key has only global and route parts: every request
	// of the route counts on one key, which tells nothing about whose
	// request it was.
	Shared bool
	// Limit is the rule and the key to decide. The rule is that of the
	// first override the recorded values or headers match (an override by
	// claim never matches: there is no token to verify), else the
	// limit's. Zero when Err is set.
	limit.Limit
	// Err says why the event gives no key for this limit: it wraps
	// ErrNoRecordedKey.
	Err error
}

// ErrNoRecordedKey is wrapped by RecordedLimit.Err: the event holds no
// usable key for a limit whose key is required (on_missing deny).
var ErrNoRecordedKey = errors.New("no key recorded")

// NewRecorded builds the limits of the route routeID in cfg, as the
// gateway builds them. log receives what goes wrong while leases are held
// (Hold); nil: slog.Default(). The caller closes it.
func NewRecorded(cfg *config.Config, routeID string, log *slog.Logger) (*Recorded, error) {
	if log == nil {
		log = slog.Default()
	}
	var rc *config.Route
	for _, r := range cfg.Routes {
		if r.ID == routeID {
			rc = r
		}
	}
	if rc == nil {
		return nil, fmt.Errorf("%w: route %q", gateway.ErrNoLimit, routeID)
	}
	ips, err := clientip.New(cfg.Server.TrustedProxies, cfg.Server.IPv6Prefix)
	if err != nil {
		return nil, err
	}
	rec := &Recorded{cfg: cfg, route: rc.ID, match: spec.NewMatch(rc.Match), globals: len(cfg.GlobalLimits), ips: ips, log: log}
	for _, lc := range cfg.GlobalLimits {
		rec.limits = append(rec.limits, spec.NewLimit(cfg, rc.ID, lc))
	}
	for _, lc := range rc.Limits {
		rec.limits = append(rec.limits, spec.NewLimit(cfg, rc.ID, lc))
	}
	// The verifier of server.jwt, to check the claims an event recorded
	// against the token it recorded (Check).
	if j := cfg.Server.JWT; j != nil {
		if _, err := gateway.CheckJWKSFile(cfg); err != nil {
			return nil, err
		}
		v, err := jwtverify.New(jwtverify.Options{
			File: j.JWKSFile, URL: j.JWKSURL, Issuer: j.Issuer, Audience: j.Audience, Leeway: j.Leeway,
			Logger: log,
		})
		if err != nil {
			return nil, fmt.Errorf("server.jwt: %w", err)
		}
		rec.tokens = &tokenCheck{from: spec.TokenFrom(j), v: v}
		if j.JWKSURL != "" {
			// Fetched in the background: give the first fetch its time, so
			// that the first events need not stop the replay (Check).
			for deadline := time.Now().Add(jwtverify.DefaultFetchTimeout); v.Status() != nil && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	return rec, nil
}

// Close stops the token verifier's background work.
func (rc *Recorded) Close() {
	if rc.tokens != nil {
		rc.tokens.v.Close()
	}
}

// Check reports why e, recorded for the route, is not a request the
// gateway can have recorded under this configuration, or nil. An event is
// only what the sink holds, and anyone who can write the sink can write
// one, so what replay would send is checked against what the gateway
// records:
//
//   - the path is clean (package pathclean) and absolute, as the gateway
//     records it, and the route takes it and the method (its host is not
//     recorded, so match.host is not compared);
//   - the body is no longer than events.max_body;
//   - each key value the event recorded that can be worked out again from
//     the rest of it is the one the gateway would have resolved: a
//     header:NAME part from a recorded NAME header, query:, cookie: (a
//     recorded Cookie header), path, method and route parts, and a jwt:
//     part from a recorded token, verified with server.jwt at the time the
//     event was recorded, as the gateway verified it then (a token that
//     has expired since still matches). A limit recorded under its
//     fallback key must not have had its key. ip and host parts, and
//     values whose source was not recorded, are taken as recorded.
//
// An error that does not wrap ErrNotRecorded says nothing about the event:
// a token cannot be checked while server.jwt's JWKS URL gives no keys.
func (rc *Recorded) Check(e *events.Event) error {
	path := e.Path
	if clean, err := pathclean.Clean(path); err != nil || clean != path {
		return fmt.Errorf("%w: path %q is not a cleaned absolute path", ErrNotRecorded, path)
	}
	if !rc.match.TakesAnyHost(e.Method, path) {
		return fmt.Errorf("%w: route %s does not take %s %s", ErrNotRecorded, rc.route, e.Method, path)
	}
	if max := rc.cfg.Events.MaxBody; int64(len(e.Body)) > max {
		return fmt.Errorf("%w: a body of %d bytes, and events.max_body is %d", ErrNotRecorded, len(e.Body), max)
	}
	rv := &recordedValues{rc: rc, e: e, headers: http.Header{}}
	for k, vs := range e.Headers {
		ck := http.CanonicalHeaderKey(k)
		rv.headers[ck] = append(rv.headers[ck], vs...)
	}
	for i := range rc.limits {
		l := &rc.limits[i]
		if l.Const() {
			continue
		}
		values, ok := e.Keys[l.Name]
		if !ok {
			continue
		}
		fallback := slices.Contains(e.Fallback, l.Name)
		if !fallback && len(values) != len(l.Key) && len(values) == len(l.Fallback) {
			fallback = true // as Limits reads it
		}
		parts := l.Key
		if fallback {
			parts = l.Fallback
		}
		if len(values) != len(parts) {
			continue // Limits says so
		}
		for i, p := range parts {
			v, known, err := rv.value(p)
			if errors.Is(err, errNoKeys) {
				return fmt.Errorf("limit %s: %w", l.Name, err)
			}
			if err != nil {
				return fmt.Errorf("%w: limit %s: %v", ErrNotRecorded, l.Name, err)
			}
			if known && v != values[i] {
				return fmt.Errorf("%w: limit %s: the key value %q is not the recorded request's %s %q", ErrNotRecorded, l.Name, values[i], p.Kind, v)
			}
		}
		if fallback && rv.carries(l.Key) {
			return fmt.Errorf("%w: limit %s: recorded under its fallback key, but the recorded request has its key", ErrNotRecorded, l.Name)
		}
	}
	return nil
}

// recordedValues works out key part values from an event's other fields.
type recordedValues struct {
	rc      *Recorded
	e       *events.Event
	headers http.Header // e.Headers, canonical
	query   url.Values
}

// value is the value the gateway would have resolved for p from what e
// recorded ("" when missing, as on a request), with known false when e
// did not record the part's source.
func (rv *recordedValues) value(p spec.Part) (v string, known bool, err error) {
	switch p.Src {
	case spec.Route:
		v = rv.rc.route
	case spec.Path:
		v = rv.e.Path
	case spec.Method:
		v = rv.e.Method
	case spec.Header:
		vv, ok := rv.headers[p.Name]
		if !ok {
			return "", false, nil
		}
		if len(vv) > 0 {
			v = vv[0]
		}
	case spec.Query:
		if rv.query == nil {
			rv.query, _ = url.ParseQuery(rv.e.Query) // as URL.Query reads it
		}
		if vv := rv.query[p.Name]; len(vv) > 0 {
			v = vv[0]
		}
	case spec.Cookie:
		if _, ok := rv.headers["Cookie"]; !ok {
			return "", false, nil
		}
		if c, err := (&http.Request{Header: rv.headers}).Cookie(p.Name); err == nil {
			v = c.Value
		}
	case spec.JWT:
		t := rv.rc.tokens
		if t == nil || !rv.recorded(t) {
			return "", false, nil
		}
		if v, err = rv.claim(t, p.Name); err != nil {
			return "", false, err
		}
	default: // global (always "-"), ip, host: not recorded
		return "", false, nil
	}
	if strings.TrimSpace(v) == "" {
		v = ""
	}
	return v, true, nil
}

// recorded says whether e recorded where t reads the token from.
func (rv *recordedValues) recorded(t *tokenCheck) bool {
	name := t.from.Header
	if name == "" {
		name = "Cookie"
	}
	_, ok := rv.headers[name]
	return ok
}

// claim is the claim of the recorded token, verified at the event's time;
// "" when the recorded request carries no token or the claim is not there.
// A token that does not verify is an error: the gateway would have had no
// claim to record.
func (rv *recordedValues) claim(t *tokenCheck, name string) (string, error) {
	raw, err := t.from.Read(&http.Request{Header: rv.headers})
	if err != nil || raw == "" {
		return "", err
	}
	at := rv.e.Time
	if at.IsZero() || at.After(time.Now()) {
		at = time.Now()
	}
	tok, err := t.v.Verify(raw, at)
	if jwtverify.ReasonOf(err) == jwtverify.NoKeys {
		return "", fmt.Errorf("%w: %v", errNoKeys, err)
	}
	if err != nil {
		return "", fmt.Errorf("the recorded token: %w", err)
	}
	v, err := tok.Claim(name)
	if err != nil {
		return "", nil
	}
	return v, nil
}

// errNoKeys: a recorded token cannot be checked yet, as server.jwt's
// JWKS URL has given no keys. It says nothing about the event.
var errNoKeys = errors.New("server.jwt has no keys to verify the recorded token with")

// carries says whether every part of parts has a known, present value in
// the recorded request.
func (rv *recordedValues) carries(parts []spec.Part) bool {
	if len(parts) == 0 {
		return false
	}
	for _, p := range parts {
		v, known, err := rv.value(p)
		if err != nil || !known || v == "" {
			return false
		}
	}
	return true
}

// Limits returns the limits that apply to e, in the order the gateway
// decides them. A limit whose key e does not hold is left out when the
// limit has on_missing allow, as the gateway leaves it out of a request
// without the key; otherwise it is returned with Err set. A value that is
// empty or only white space is missing, as it is on a request; a limit
// named in e.Fallback is read as its fallback key.
func (rc *Recorded) Limits(e *events.Event) []RecordedLimit {
	out := make([]RecordedLimit, 0, len(rc.limits))
	for i := range rc.limits {
		l := &rc.limits[i]
		rl := RecordedLimit{Name: l.Name, Global: i < rc.globals, Shared: l.Const()}
		if rl.Shared {
			// The same for every request of the route, whatever was
			// recorded: an event without keys is still decided by it.
			rl.Limit = limit.Limit{Rule: l.RuleFor(l.ConstValues, e.Headers), Key: l.ConstKey}
			out = append(out, rl)
			continue
		}
		values, ok := e.Keys[l.Name]
		fallback := false
		for _, name := range e.Fallback {
			fallback = fallback || name == l.Name
		}
		if !fallback && len(values) != len(l.Key) && len(values) == len(l.Fallback) {
			// An event recorded before Fallback was: its values can
			// only be the fallback's.
			fallback = true
		}
		for _, v := range values {
			ok = ok && strings.TrimSpace(v) != ""
		}
		if !ok {
			if l.AllowMissing {
				continue
			}
			rl.Err = fmt.Errorf("limit %s: %w (on_missing: deny)", l.Name, ErrNoRecordedKey)
			out = append(out, rl)
			continue
		}
		key, vs, err := l.KeyOf(rc.route, rc.ips.Key, values, fallback)
		if err != nil {
			// The configuration changed since the event was recorded:
			// the key has other parts now.
			rl.Err = fmt.Errorf("%w: %v", ErrNoRecordedKey, err)
			out = append(out, rl)
			continue
		}
		rl.Limit = limit.Limit{Rule: l.RuleFor(vs, e.Headers), Key: key}
		out = append(out, rl)
	}
	return out
}

// Hold renews the concurrency leases that lease holds on leases while a
// recorded request is sent, as the gateway does for a request it proxies,
// and returns the function that releases them.
func (rc *Recorded) Hold(store limit.Store, lease string, ls []limit.Limit) (release func()) {
	return leases.Hold(rc.log, time.Now, store, lease, ls)
}
