package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway/clientip"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// Recorded is one route's limits, global ones first, built from a
// configuration as the gateway builds them, to decide again the requests
// the route recorded (floodgate events replay). A recorded request is not
// there to read its key parts from: its keys are built from the values the
// event kept (events.Event.Keys), so the stored keys, and the counters,
// are those the request would have used.
type Recorded struct {
	gen   *generation
	route *route
	log   *slog.Logger
}

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

// NewRecorded builds the limits of the route routeID in cfg. log receives what goes
// wrong while leases are held (Hold); nil: slog.Default().
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
		return nil, fmt.Errorf("%w: route %q", ErrNoLimit, routeID)
	}
	ips, err := clientip.New(cfg.Server.TrustedProxies, cfg.Server.IPv6Prefix)
	if err != nil {
		return nil, err
	}
	// The specs' metrics and log samplers are never used: nothing here
	// answers a request.
	g := &Gateway{metrics: NewMetrics(prometheus.NewRegistry()), samplers: map[string]*sampler{}, log: log, now: time.Now}
	r := &route{id: rc.ID}
	for _, lc := range cfg.GlobalLimits {
		r.limits = append(r.limits, g.limitSpec(cfg, rc.ID, lc))
	}
	for _, lc := range rc.Limits {
		r.limits = append(r.limits, g.limitSpec(cfg, rc.ID, lc))
	}
	gen := &generation{cfg: cfg, ips: ips, routes: []*route{r}}
	return &Recorded{gen: gen, route: r, log: log}, nil
}

// Limits returns the limits that apply to e, in the order the gateway
// decides them. A limit whose key e does not hold is left out when the
// limit has on_missing allow, as the gateway leaves it out of a request
// without the key; otherwise it is returned with Err set. A value that is
// empty or only white space is missing, as it is on a request; a limit
// named in e.Fallback is read as its fallback key.
func (rc *Recorded) Limits(e *events.Event) []RecordedLimit {
	out := make([]RecordedLimit, 0, len(rc.route.limits))
	globals := len(rc.gen.cfg.GlobalLimits)
	for i, l := range rc.route.limits {
		rl := RecordedLimit{Name: l.name, Global: i < globals, Shared: l.constKey != ""}
		if rl.Shared {
			// The same for every request of the route, whatever was
			// recorded: an event without keys is still decided by it.
			rl.Limit = limit.Limit{Rule: l.ruleFor(l.constValues, e.Headers), Key: l.constKey}
			out = append(out, rl)
			continue
		}
		values, ok := e.Keys[l.name]
		fallback := false
		for _, name := range e.Fallback {
			fallback = fallback || name == l.name
		}
		if !fallback && len(values) != len(l.key) && len(values) == len(l.fallback) {
			// An event recorded before Fallback was: its values can
			// only be the fallback's.
			fallback = true
		}
		for _, v := range values {
			ok = ok && strings.TrimSpace(v) != ""
		}
		if !ok {
			if l.allowMissing {
				continue
			}
			rl.Err = fmt.Errorf("limit %s: %w (on_missing: deny)", l.name, ErrNoRecordedKey)
			out = append(out, rl)
			continue
		}
		key, vs, err := rc.gen.keyOf(rc.route.id, l, values, fallback)
		if err != nil {
			// The configuration changed since the event was recorded:
			// the key has other parts now.
			rl.Err = fmt.Errorf("%w: %v", ErrNoRecordedKey, err)
			out = append(out, rl)
			continue
		}
		rl.Limit = limit.Limit{Rule: l.ruleFor(vs, e.Headers), Key: key}
		out = append(out, rl)
	}
	return out
}

// Hold renews the concurrency leases that lease holds on leases while a
// recorded request is sent, as the gateway does for a request it proxies,
// and returns the function that releases them.
func (rc *Recorded) Hold(store limit.Store, lease string, leases []limit.Limit) (release func()) {
	return holdLeases(rc.log, time.Now, store, lease, leases)
}

// OpenStore opens the store c names for a process that decides beside the
// gateways: with redis, the store the fleet shares, so that what it
// decides counts against the same quotas as the fleet's requests; with
// memory, a new store of the caller's own. The caller closes it.
func OpenStore(c config.Store) (limit.Store, error) {
	if c.Type != config.StoreRedis {
		return memory.New(memory.Options{MaxKeys: c.Memory.MaxKeys}), nil
	}
	return openStore(c, nil)
}
