package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/limit"
)

// Limits on one counter.
//
// A counter is the state a store keeps for a rule and a key. It is named by
// the rule's Name and StateID and by the Key (StoredKey), not by the *Rule:
// two limits of one request may name the same counter, when an Envoy
// request repeats a descriptor, perhaps with its own hits_addend (a copy of
// the rule at another cost, Rule.WithCost), or when a caller lists a limit
// twice. Judged one by one against the counter as it was before the
// request, each of them would admit a request that only one of them fits,
// and the counter would end above its limit. So a store decides them as
// one limit: the request needs the sum of their costs (each times Hits)
// from the counter, is admitted by it only if the sum fits, and then takes
// the sum. A concurrency limit counts requests, not costs: however often it
// appears, a request holds one lease on its counter, under the request's
// lease id, which one Release frees.
//
// Limits on one counter whose rules differ in any setting but Cost are a
// caller's mistake (which count, burst or window would the counter keep?):
// the request is refused with an error before anything is decided.

// DecideMerged is how a store decides req. It validates req
// (ValidateRequest), merges the limits that share a counter (Merge), has
// decide decide the merged request, whose limits are all on different
// counters, and answers with one decision per limit of req, in req's
// order: the decision of the limit it was merged into, with its own Rule
// and Key. A request with no two limits on one counter, nearly every
// request, goes to decide as it is, at the cost of comparing its limits'
// names and keys pair by pair.
func DecideMerged(req *limit.Request, decide func(*limit.Request) (limit.Result, error)) (limit.Result, error) {
	m, into, err := prepare(req)
	if err != nil {
		return limit.Result{}, err
	}
	if into == nil {
		return decide(m)
	}
	res, err := decide(m)
	if err != nil {
		return res, err
	}
	ds := Decisions(req, len(req.Limits))
	for i, l := range req.Limits {
		ds[i] = res.Decisions[into[i]]
		ds[i].Rule, ds[i].Key = l.Rule, l.Key
	}
	res.Decisions = ds
	return res, nil
}

// Merge validates req and returns the request that a store decides in its
// place: req itself (a copy at the time of the call if it leaves Now out)
// when no two of its limits share a counter; otherwise a
// copy with one limit per counter, in the order of their first appearance,
// whose rule costs the sum of the costs of the limits it stands for (a
// concurrency limit's stays one lease). Such a rule may cost more than its
// count, which Validate refuses of a caller's rule: a store rejects the
// request, as it rejects one of too many hits.
func Merge(req *limit.Request) (*limit.Request, error) {
	m, _, err := prepare(req)
	return m, err
}

// prepare validates req and returns the request a store decides: req, or
// a copy at the time of the call when req leaves Now out (the caller's
// request stays the caller's), merged when two of its limits share a
// counter, with into, for each limit of req, the index of the limit it
// went into; into is nil when none share one.
func prepare(req *limit.Request) (*limit.Request, []int, error) {
	if err := ValidateRequest(req); err != nil {
		return nil, nil, err
	}
	if req.Now.IsZero() {
		r := *req
		r.Now = time.Now()
		req = &r
	}
	if !sharesCounter(req.Limits) {
		return req, nil, nil
	}
	return merge(req)
}

// sameCounter reports whether a and b name one counter, as StoredKey
// does. Their rules have been validated, so StateID reads a field.
func sameCounter(a, b limit.Limit) bool {
	return a.Key == b.Key && a.Rule.Name == b.Rule.Name && params(a.Rule).State == params(b.Rule).State
}

// counterID is sameCounter's identity as a map key.
type counterID struct {
	name, state string
	key         limit.Key
}

// sharesCounter reports whether two of ls name one counter. Requests have
// few limits, so comparing every pair costs less than a map, and allocates
// nothing.
func sharesCounter(ls []limit.Limit) bool {
	if len(ls) > 16 {
		seen := make(map[counterID]bool, len(ls))
		for _, l := range ls {
			id := counterID{l.Rule.Name, params(l.Rule).State, l.Key}
			if seen[id] {
				return true
			}
			seen[id] = true
		}
		return false
	}
	for i := 1; i < len(ls); i++ {
		for _, o := range ls[:i] {
			if sameCounter(ls[i], o) {
				return true
			}
		}
	}
	return false
}

// merge is Merge of a request whose limits share counters, and for each
// limit of req the index of the merged limit it went into.
func merge(req *limit.Request) (*limit.Request, []int, error) {
	n := len(req.Limits)
	into := make([]int, n)
	ls := make([]limit.Limit, 0, n-1) // one per counter
	cost := make([]int64, 0, n-1)
	for i, l := range req.Limits {
		k := slices.IndexFunc(ls, func(m limit.Limit) bool { return sameCounter(m, l) })
		if k < 0 {
			into[i] = len(ls)
			ls, cost = append(ls, l), append(cost, params(l.Rule).Cost)
			continue
		}
		if !sameSettings(ls[k].Rule, l.Rule, req.Now) {
			return nil, nil, fmt.Errorf("limit: limits %d and %d of the request count on one counter of rule %s with different settings: only their costs may differ",
				slices.Index(into[:i], k), i, l.Rule.Name)
		}
		into[i] = k
		// Each cost is at most MaxCount, so the sum cannot overflow
		// before it saturates as CostOf does.
		cost[k] = min(cost[k]+params(l.Rule).Cost, MaxCost)
	}
	for k := range ls {
		if r := ls[k].Rule; r.Algorithm != limit.Concurrency && cost[k] != params(r).Cost {
			ls[k].Rule = costing(r, cost[k])
		}
	}
	m := *req
	m.Limits = ls
	m.Into = nil // the caller's array holds the answer, built from m's
	return &m, into, nil
}

// sameSettings reports whether a and b, rules on one counter, differ in
// nothing but Cost. Locations are the same when they have the same name
// and give the same offset at now: a zone loaded twice is two pointers.
func sameSettings(a, b *limit.Rule, now time.Time) bool {
	if a == b {
		return true
	}
	return a.Name == b.Name && a.Algorithm == b.Algorithm && a.Rate == b.Rate && a.Burst == b.Burst &&
		a.Queue == b.Queue && a.Align == b.Align && a.Shadow == b.Shadow && a.LeaseTTL == b.LeaseTTL && a.Sliced == b.Sliced &&
		(a.Location == b.Location || a.Location.String() == b.Location.String() && ZoneAt(a, now) == ZoneAt(b, now))
}

// costing is r at cost, derived from r's own derived values, as Validate
// would refuse a cost above the count that a merged request may need.
func costing(r *limit.Rule, cost int64) *limit.Rule {
	c := r.WithCost(cost)
	p := *params(r)
	p.Cost = cost
	ruledata.SetParams(c, p)
	return c
}

// ValidateRequest checks what every store needs of a request.
func ValidateRequest(req *limit.Request) error {
	if req.Hits < 0 {
		return fmt.Errorf("limit: hits %d is negative", req.Hits)
	}
	for _, l := range req.Limits {
		if l.Rule == nil {
			return errors.New("limit: limit without a rule")
		}
		if err := l.Rule.Validate(); err != nil {
			return err
		}
		if l.Rule.Algorithm == limit.Concurrency && req.Lease == "" {
			return fmt.Errorf("limit: rule %s is a concurrency limit and the request has no lease id", l.Rule.Name)
		}
	}
	return nil
}
