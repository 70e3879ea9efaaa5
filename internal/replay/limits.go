package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// Replay keeps "once per user" in two steps, both decided by the limit
// package's own algorithms on keys the gateway's own code builds from the
// values each event recorded (Recorded):
//
//  1. collapse: each event is decided at the time it was recorded against
//     the route's client-keyed limits, in a memory store of the replay's
//     own that sees nothing but the route's recorded events. An event that
//     store refuses is one the limits would have refused had the breaker
//     been closed (with user: 1/10s, every event of a user after the first
//     in one epoch-aligned 10 s window), and is marked done as collapsed.
//  2. live: each event left is decided, now, against every limit of the
//     route in the configured store, as a request of the user's would be.
//
// The collapse memory also counts the route's admissions the sink holds
// (events.TypeAdmitted, recorded with events.audit all), each at its
// recorded time as an event kept: a user admitted live in a window, then
// recorded while the breaker was open in the same window, has had that
// window's grant.

// DefaultCollapseKeys bounds the collapse memory: the keys (one per limit
// and client) its store holds at once. Beyond it, an event that needs a
// new key is not collapsed; the live decision alone stands between it and
// the upstream.
const DefaultCollapseKeys = 1_000_000

// collapser is the collapse step.
type collapser struct {
	store    *memory.Store
	full     bool // the memory was full at least once
	overflow bool // it was full for the last event asked about

	// admitted is the recorded time of the latest admission counted, per
	// limit and key, to tell why an event collapses; it is forgotten
	// whole when it holds maxKeys, which only loses that telling.
	admitted map[admittedKey]time.Time
	maxKeys  int
	// byAdmission: the last event asked about collapsed on a key an
	// admission was counted on within the limit's window before it.
	byAdmission bool
}

type admittedKey struct {
	rule string
	key  limit.Key
}

func newCollapser(maxKeys int) *collapser {
	// No background sweep: its clock would be the wall clock, not the
	// events'. A full store sweeps what has expired at the time of the
	// event that found it full.
	return &collapser{
		store:    memory.New(memory.Options{MaxKeys: maxKeys, SweepEvery: -1}),
		admitted: map[admittedKey]time.Time{},
		maxKeys:  maxKeys,
	}
}

// admit counts a, an admission recorded for the route, as an event kept
// at its recorded time: it takes its part of the client-keyed limits, and
// the events after it in the same window collapse. It reports whether a
// took any (not when the memory is full, or a has no time to place it at,
// or no limit is client-keyed).
func (c *collapser) admit(a *events.Event, ls []RecordedLimit) bool {
	lims, _ := collapsing(ls)
	if len(lims) == 0 || !placed(a) {
		return false
	}
	c.collapses(a, ls)
	if c.overflow {
		return false
	}
	if len(c.admitted)+len(lims) > c.maxKeys {
		clear(c.admitted)
	}
	for _, l := range lims {
		c.admitted[admittedKey{l.Rule.Name, l.Key}] = a.Time
	}
	return true
}

// placed reports whether e has a recorded time the memory can decide at:
// not none, nor one from a clock ahead of this one. The memory store
// decides each key at the latest time it has seen, so one event from the
// future would put every later one of its keys in the future's window.
func placed(e *events.Event) bool {
	return !e.Time.IsZero() && e.Time.Unix() > 0 && !e.Time.After(time.Now())
}

// collapsing returns the limits of ls that take part in the collapse, and
// their names. Only client-keyed limits do: a limit whose key is the same
// for every request of the route (global, route) would keep one event of
// everyone; a concurrency limit counts requests in flight, and recorded
// requests never were.
func collapsing(ls []RecordedLimit) ([]limit.Limit, []string) {
	var lims []limit.Limit
	var names []string
	for _, l := range ls {
		if l.Shared || l.Err != nil || l.Rule.Algorithm == limit.Concurrency {
			continue
		}
		lims, names = append(lims, l.Limit), append(names, l.Name)
	}
	return lims, names
}

func (c *collapser) Close() { c.store.Close() }

// collapses reports the name of the limit that refuses e at its recorded
// time, or "" when e is kept (collapsing says which limits take part).
// An event without a recorded time, or with one from a clock ahead of
// this one, is kept: there is no window to place it in (placed).
func (c *collapser) collapses(e *events.Event, ls []RecordedLimit) string {
	c.overflow, c.byAdmission = false, false
	if !placed(e) {
		return ""
	}
	lims, names := collapsing(ls)
	if len(lims) == 0 {
		return ""
	}
	res, err := c.store.Decide(context.Background(), &limit.Request{Limits: lims, Now: e.Time})
	if errors.Is(err, limit.ErrFull) {
		c.full, c.overflow = true, true
		return ""
	}
	if err != nil || res.Allowed {
		return ""
	}
	for i, d := range res.Decisions {
		if !d.Allowed && !d.Undecided && !d.Rule.Shadow {
			if at, ok := c.admitted[admittedKey{lims[i].Rule.Name, lims[i].Key}]; ok {
				c.byAdmission = e.Time.Sub(at) < lims[i].Rule.Window()
			}
			return names[i]
		}
	}
	return ""
}

// verdict is what the live decision made of an event.
type verdict struct {
	limited string        // the client-keyed limit that refused it
	wait    time.Duration // refused by shared or concurrency limits only: decide again after this
	waitFor string        // the limit waited for
	delay   time.Duration // admitted: a token bucket with queue asks to wait this long first
	lease   string        // admitted holding leases on leases
	leases  []limit.Limit
}

// decider is the live step.
type decider struct {
	store limit.Store
	ids   *answer.IDSource
}

// maxWait bounds one wait for a refusing limit that is not the client's:
// its window, after which it can always admit again. A concurrency limit
// has none, and its retry-after (a second) is a hint for clients: a lease
// is freed when a request ends, often this replay's own, so it is asked
// again soon.
func maxWait(r *limit.Rule) time.Duration {
	if r.Algorithm == limit.Concurrency {
		return concurrencyPoll
	}
	return r.Window()
}

// concurrencyPoll is how often a concurrency limit that refused an event
// is asked again.
const concurrencyPoll = 50 * time.Millisecond

// minWait keeps a refusal that gives no retry-after (a concurrency limit
// full) from being asked again in a tight loop.
const minWait = 10 * time.Millisecond

// decide decides ls now, consuming quota when every limit admits. A
// refusal by a client-keyed window or bucket limit makes the event
// limited: the user's quota is spent. A refusal by a shared limit
// (global, route) or a concurrency limit is not the user's: the event
// waits for it and is decided again.
func (dc *decider) decide(ctx context.Context, ls []RecordedLimit) (verdict, error) {
	req := &limit.Request{Now: time.Now()}
	for _, l := range ls {
		req.Limits = append(req.Limits, l.Limit)
		if l.Rule.Algorithm == limit.Concurrency && req.Lease == "" {
			req.Lease = dc.ids.Next()
		}
	}
	if len(req.Limits) == 0 {
		return verdict{}, nil
	}
	res, err := dc.store.Decide(ctx, req)
	if err != nil {
		if req.Lease != "" {
			// A decision that timed out may have taken its leases.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			dc.store.Release(rctx, req.Lease, leasesOf(req.Limits)...)
			cancel()
		}
		return verdict{}, err
	}
	if res.Allowed {
		v := verdict{delay: res.Delay, lease: req.Lease}
		if req.Lease != "" {
			v.leases = leasesOf(req.Limits)
		}
		return v, nil
	}
	var v verdict
	for i, d := range res.Decisions {
		if d.Allowed || d.Undecided || d.Rule.Shadow {
			continue
		}
		l := ls[i]
		if !l.Shared && l.Rule.Algorithm != limit.Concurrency {
			return verdict{limited: l.Name}, nil
		}
		w := min(max(d.RetryAfter, minWait), maxWait(d.Rule))
		if w > v.wait {
			v.wait, v.waitFor = w, l.Name
		}
	}
	if v.wait == 0 {
		// Refused, yet no limit says so (a store's odd answer): wait the
		// least, rather than send what was refused.
		v.wait = minWait
	}
	return v, nil
}

func leasesOf(ls []limit.Limit) []limit.Limit {
	var out []limit.Limit
	for _, l := range ls {
		if l.Rule.Algorithm == limit.Concurrency {
			out = append(out, l)
		}
	}
	return out
}

// peek is the dry run's live step: the name of a client-keyed limit whose
// key has no room left now for the event, read without consuming
// anything. What the run's earlier events would take is not counted.
func (dc *decider) peek(ctx context.Context, ls []RecordedLimit) (string, error) {
	for _, l := range ls {
		if l.Shared || l.Rule.Algorithm == limit.Concurrency {
			continue
		}
		st, err := dc.store.Peek(ctx, time.Now(), l.Rule, l.Key)
		if err != nil {
			return "", err
		}
		cost := l.Rule.Cost
		if cost == 0 {
			cost = 1
		}
		if st.Remaining < cost {
			return l.Name, nil
		}
	}
	return "", nil
}

// unkeyed is why an event gives no key for one of the route's limits that
// needs one, or nil.
func unkeyed(ls []RecordedLimit) error {
	for _, l := range ls {
		if l.Err != nil {
			return l.Err
		}
	}
	return nil
}

// describe names the waits for each limit, for the run's last lines.
func describe(waits map[string]time.Duration) string {
	s := ""
	for _, name := range slices.Sorted(maps.Keys(waits)) {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %v", name, waits[name].Round(time.Millisecond))
	}
	return s
}
