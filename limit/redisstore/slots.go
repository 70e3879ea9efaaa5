package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// Redis Cluster. A script may only touch keys of one slot, and the limits
// of a request rarely share one: a user's key, an IP's and a route's each
// carry their own hash tag. So on a cluster a request's limits are decided
// in groups, one per hash tag:
//
//  1. The most selective group is decided alone: the one whose limits
//     have rejected the largest share of what they decided lately, and
//     until they have, the one that admits the fewest requests per second
//     (a user's 1/10s before a route's 800/s). Most of what a surge sends
//     is rejected here, at the cost of one call to one node, and the other
//     limits are never asked (limit.Decision.Undecided). The order
//     changes only what a decision costs, never its answer.
//  2. The other groups are decided together, each by its own node.
//  3. If one of them rejects the request, or fails, every group that
//     admitted it gives back what it took (mode r of decide.lua), once,
//     however often the give-back were sent. The give-back runs before
//     the answer, so that a caller that asks again sees the quota back,
//     and has a budget of its own: the decision's may be spent.
//
// Between the take and the give-back, a rejected request holds quota that
// others may be refused for: on a cluster the guarantee is "never more than
// the limit", not "exactly the limit". A give-back that fails leaves the
// quota taken until the window ends or the state expires. Batches are not
// used on a cluster: a batch's keys would span slots.

// group is the limits of a request that share a hash tag, and so a slot.
type group struct {
	idx    []int    // the limits' places in the request
	keys   []string // their stored keys
	req    limit.Request
	reject float64     // the highest share of rejections among its limits
	rate   float64     // admissions per µs of its most selective limit
	sc     *scriptCall // set once the group is asked
	res    limit.Result
	err    error

	guard *nodeGuard // of the node that serves the group's slot; nil: not looked up (enterKey)
	probe bool       // the call probes its resting node
}

// rejections counts a rule's recent decisions on a cluster and how many
// rejected, halving both now and then so that the share follows what the
// traffic does now. The counts are a heuristic for the order of slot
// groups: racing updates may lose a count, never an answer.
type rejections struct{ decided, rejected atomic.Int64 }

// rejectionWindow is how many decisions the share looks back over, about.
const rejectionWindow = 1024

// rejectionsOf is r's share, kept with its script arguments: a rule holds
// one value per store package (ruledata.Ext).
func rejectionsOf(r *limit.Rule) *rejections { return &argsOf(r).rejections }

func (x *rejections) add(rejected bool) {
	if rejected {
		x.rejected.Add(1)
	}
	if x.decided.Add(1) > rejectionWindow {
		x.decided.Store(rejectionWindow / 2)
		x.rejected.Store(x.rejected.Load() / 2)
	}
}

func (x *rejections) share() float64 {
	d := x.decided.Load()
	if d == 0 {
		return 0
	}
	return float64(x.rejected.Load()) / float64(d)
}

// tag is the part of a stored key that decides its slot: everything up to
// the end of the hash tag. Keys with the same tag share a slot; keys with
// different tags almost never do, and deciding them apart is only slower.
func tag(key string) string {
	if i := strings.IndexByte(key, '}'); i >= 0 {
		return key[:i+1]
	}
	return key
}

// rate is how many requests per µs a rule admits; the lower, the likelier
// it rejects.
func rate(r *limit.Rule) float64 {
	p := core.Params(r)
	n, window, lease := p.N, p.Window, p.Lease
	if r.Algorithm == limit.Concurrency {
		window = lease
	}
	return float64(n) / float64(max(window, 1))
}

// groups splits req's limits by hash tag, the most selective group first.
// Requests have a few limits, so the tags are compared pairwise, and the
// groups share three arrays.
func (s *Store) groups(req *limit.Request) []*group {
	n := len(req.Limits)
	keys := make([]string, n)
	in := make([]int, n) // the group of each limit
	var tags []string    // of each group
	for i, l := range req.Limits {
		keys[i] = core.StoredKey(s.prefix, l.Rule, l.Key)
		t := tag(keys[i])
		in[i] = slices.Index(tags, t)
		if in[i] < 0 {
			in[i] = len(tags)
			tags = append(tags, t)
		}
	}
	all := make([]group, len(tags))
	size := make([]int, len(tags))
	for _, g := range in {
		size[g]++
	}
	idx, gkeys, limits := make([]int, 0, n), make([]string, 0, n), make([]limit.Limit, 0, n)
	gs := make([]*group, len(tags))
	for g := range all {
		// Each group's slices are its own stretch of the shared arrays.
		all[g] = group{
			idx:  idx[len(idx) : len(idx) : len(idx)+size[g]],
			keys: gkeys[len(gkeys) : len(gkeys) : len(gkeys)+size[g]],
			req:  limit.Request{Now: req.Now, Lease: req.Lease, Hits: req.Hits, Limits: limits[len(limits) : len(limits) : len(limits)+size[g]]},
			rate: math.Inf(1),
		}
		idx, gkeys, limits = idx[:len(idx)+size[g]], gkeys[:len(gkeys)+size[g]], limits[:len(limits)+size[g]]
		gs[g] = &all[g]
	}
	for i, l := range req.Limits {
		g := &all[in[i]]
		g.idx = append(g.idx, i)
		g.keys = append(g.keys, keys[i])
		g.req.Limits = append(g.req.Limits, l)
		// Shadow limits never reject: they leave a group's place alone.
		if !l.Rule.Shadow {
			g.reject = max(g.reject, rejectionsOf(l.Rule).share())
			g.rate = min(g.rate, rate(l.Rule))
		}
	}
	slices.SortStableFunc(gs, func(a, b *group) int {
		switch {
		case a.reject != b.reject:
			return cmp.Compare(b.reject, a.reject)
		default:
			return cmp.Compare(a.rate, b.rate)
		}
	})
	return gs
}

// count records g's decisions in its rules' rejection shares.
func (g *group) count() {
	for _, d := range g.res.Decisions {
		if !d.Rule.Shadow {
			rejectionsOf(d.Rule).add(!d.Allowed)
		}
	}
}

// decideSlots decides req on a cluster, slot group by slot group.
func (s *Store) decideSlots(ctx context.Context, c rueidis.Client, req *limit.Request) (limit.Result, error) {
	gs := s.groups(req)
	if len(gs) == 1 {
		key := gs[0].keys[0]
		g, ok, probe := s.enterKey(key)
		if !ok {
			return limit.Result{}, resting("decide", g)
		}
		sc := calls.Get().(*scriptCall)
		s.decideCall(sc, req)
		start := s.mono()
		res, err := s.decideOne(ctx, c, req, sc)
		s.leaveKey(g, key, probe, s.callerGone(ctx, start, err))
		return res, err
	}
	if err := s.enterGroups(gs); err != nil {
		return limit.Result{}, err
	}
	defer s.leaveGroups(gs)
	// One budget for the whole decision, as for a decision of one call.
	cctx := withTimeout(ctx, s.timeout)
	defer cctx.discard() // its groups' calls may have failed: never pooled
	ctx = cctx
	token := s.token + strconv.FormatUint(s.seq.Add(1), 36)
	first, rest := gs[0], gs[1:]
	s.decideGroup(ctx, c, first, token)
	if first.err != nil {
		first.sc.put()
		return limit.Result{}, first.err
	}
	if !first.res.Allowed {
		res := limit.Result{Decisions: core.Decisions(req, len(req.Limits)), Time: first.res.Time}
		for _, g := range rest {
			for _, i := range g.idx {
				l := req.Limits[i]
				res.Decisions[i] = limit.Decision{Rule: l.Rule, Key: l.Key, Allowed: true, Limit: argsOf(l.Rule).n, Undecided: true}
			}
		}
		first.place(&res)
		first.sc.put()
		return res, nil
	}

	if len(rest) == 1 {
		s.decideGroup(ctx, c, rest[0], token)
	} else {
		var wg sync.WaitGroup
		for _, g := range rest {
			wg.Go(func() { s.decideGroup(ctx, c, g, token) })
		}
		wg.Wait()
	}
	res := limit.Result{Allowed: true, Decisions: core.Decisions(req, len(req.Limits)), Time: first.res.Time}
	var err error
	for _, g := range gs {
		if g.err != nil {
			err, res.Allowed = g.err, false
			continue
		}
		res.Allowed = res.Allowed && g.res.Allowed
		res.Delay = max(res.Delay, g.res.Delay)
	}
	if !res.Allowed {
		res.Delay = 0
		s.giveBack(ctx, c, gs, token)
	}
	for _, g := range gs {
		if g.sc != nil {
			g.sc.put()
		}
		if err == nil {
			g.place(&res)
		}
	}
	if err != nil {
		return limit.Result{}, err
	}
	return res, nil
}

// enterGroups asks the guards of the groups' nodes whether the decision
// may go to them. It needs every group's answer, so it fails at once if one
// of the nodes rests. Groups on one node share its guard's answer: a
// decision that probes a node probes it with all its groups there.
func (s *Store) enterGroups(gs []*group) error {
	if s.failing.Load() == 0 {
		return nil // the guards are found if a group fails (leaveKey)
	}
	for i, g := range gs {
		g.guard = s.guardOf(g.keys[0])
		if slices.ContainsFunc(gs[:i], func(o *group) bool { return o.guard == g.guard }) {
			continue
		}
		ok, probe := s.enter(g.guard)
		if !ok {
			for _, o := range gs[:i] {
				o.guard.noNews(o.probe)
			}
			return resting("decide", g.guard)
		}
		g.probe = probe
	}
	return nil
}

// leaveGroups tells the guards how the groups that were asked fared; a
// group never asked (behind a rejection) is no news of its node.
func (s *Store) leaveGroups(gs []*group) {
	for _, g := range gs {
		switch {
		case g.sc != nil:
			s.leaveKey(g.guard, g.keys[0], g.probe, g.err)
		case g.guard != nil:
			g.guard.noNews(g.probe)
		}
	}
}

// place puts g's decisions at their places in res.
func (g *group) place(res *limit.Result) {
	for j, i := range g.idx {
		res.Decisions[i] = g.res.Decisions[j]
	}
}

// decideGroup decides g's limits in one call, within ctx's deadline, and
// keeps the call's arguments, which a give-back sends again.
func (s *Store) decideGroup(ctx context.Context, c rueidis.Client, g *group, token string) {
	g.sc = calls.Get().(*scriptCall)
	g.sc.keys = append(g.sc.keys[:0], g.keys...)
	s.decideArgs(g.sc, &g.req)
	// Every group of a request has the request's token: it names the
	// give-back's marker and, as in any call, the sliding-window members.
	g.sc.args[2] = token
	v, err := decideScript.Exec(ctx, c, g.sc.keys, g.sc.args).ToArray()
	switch {
	case err != nil:
		g.err = unavailable("decide", err)
	case len(v) != 1+3*len(g.req.Limits):
		g.err = unavailable("decide", fmt.Errorf("script returned %d values for %d limits", len(v), len(g.req.Limits)))
	default:
		g.res, g.err = result(&g.req, v[0], v[1:])
		if g.err == nil {
			g.count()
		}
	}
}

// giveBack returns what the groups that admitted the request took, and
// sets their decisions to what the limits read without it. A give-back
// is not the caller's to cancel: a request that stopped waiting must not
// keep its quota.
func (s *Store) giveBack(ctx context.Context, c rueidis.Client, gs []*group, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, g := range gs {
		if g.err != nil || !g.res.Allowed {
			continue
		}
		wg.Go(func() { s.giveBackGroup(ctx, c, g, token) })
	}
	wg.Wait()
	// While the groups held what they gave back, a key of theirs may have
	// looked used up to another request, here or on another instance,
	// which remembered it so: every instance forgets these keys.
	var back []limit.Limit
	for _, g := range gs {
		if g.err != nil || !g.res.Allowed {
			continue
		}
		for j, l := range g.req.Limits {
			if g.res.Decisions[j].Allowed && l.Rule.Algorithm != limit.Concurrency {
				back = append(back, l)
			}
		}
	}
	for _, l := range back {
		s.forgetLocally(l.Rule.Name, l.Key)
	}
	s.publishForget(ctx, c, back...)
}

func (s *Store) giveBackGroup(ctx context.Context, c rueidis.Client, g *group, token string) {
	keys := append(slices.Clip(g.sc.keys), g.sc.keys[0]+":r:"+token)
	// The call's arguments, limit by limit, with cost 0 for the limits
	// that took nothing (a shadow limit that rejected), then its time.
	args := append(make([]string, 0, len(g.sc.args)+1), "r", g.sc.args[1], token, g.sc.args[3])
	from := base
	for j, l := range g.req.Limits {
		a := argsOf(l.Rule)
		n := len(a.head) + 1 + len(a.tail)
		if a.zone {
			n = len(a.head) + zoneArgs
		}
		args = append(args, g.sc.args[from:from+n]...)
		if !g.res.Decisions[j].Allowed {
			args[len(args)-n+len(a.head)] = "0"
		}
		from += n
	}
	args = append(args, strconv.FormatInt(g.res.Time.UnixMicro(), 10))
	v, err := decideScript.Exec(ctx, c, keys, args).AsIntSlice()
	if err != nil || len(v) != 1+2*len(g.req.Limits) {
		// The quota stays taken until its window ends or its state
		// expires; the request is rejected all the same.
		return
	}
	for j := range g.req.Limits {
		if d := &g.res.Decisions[j]; d.Allowed {
			d.Remaining, d.ResetAfter, d.Delay = v[1+2*j], us(v[2+2*j]), 0
		}
	}
}
