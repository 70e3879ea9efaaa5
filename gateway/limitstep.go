package gateway

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/keycache"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/internal/spec"
	"github.com/floodgate-gw/floodgate/internal/topk"
	"github.com/floodgate-gw/floodgate/limit"
)

// limitSpec is one configured limit of a route, or a global limit, ready
// to decide requests.
type limitSpec struct {
	spec.Limit
	reject       *answer.Answer
	report       *answer.Reporter // the rate-limit headers, as name
	keys         *keycache.Cache  // recent keys of key, nil with a constKey
	fallbackKeys *keycache.Cache  // and of fallback
	metrics      *limitMetrics
	sampler      *logsample.Sampler
	top          *topk.Sketch // its most rejected keys; nil in a replay
}

func (l *limitSpec) reportable() bool {
	return l.Headers && l.Rule.Algorithm != limit.Concurrency
}

// overrideTakes reports whether o gives x's request, whose key values are
// values, its rule.
func overrideTakes(o *spec.Override, x *exchange, values []string) bool {
	if o.Claim != "" {
		return x.claim(o.Claim) == o.ClaimValue
	}
	if o.Header != "" {
		for _, v := range x.r.Header[o.Header] {
			if v == o.HeaderValue {
				return true
			}
		}
		return false
	}
	return o.MatchesValues(values)
}

// matchesValues reports whether the resolved key values are among the
// override's (never, for an override by header).
// verdict is the outcome of the limit step.
type verdict struct {
	res      limit.Result
	specs    []*limitSpec
	limits   []limit.Limit
	values   [][]string     // each limit's key values, for the log
	reject   *answer.Answer // nil: admitted
	reason   int            // index of the limit that gave the status, or -1
	leases   []limit.Limit
	store    limit.Store // where the leases are held
	lease    string      // the id the leases are held under
	missing  bool
	shadowed bool // a shadow limit would have rejected the request
	remote   bool // a store across the network answered (set when traced)

	buf *stepBuffers // what specs, limits, values and res.Decisions are in, to free
}

// stepBuffers hold what the limit step of a request with up to
// stepLimits limits makes, made once and used again by request after
// request; a route with more limits grows the slices as usual.
type stepBuffers struct {
	specs     [stepLimits]*limitSpec
	limits    [stepLimits]limit.Limit
	values    [stepLimits][]string
	parts     [2 * stepLimits]string
	req       limit.Request
	decisions [stepLimits]limit.Decision // req.Into
}

const stepLimits = 6

var stepPool = sync.Pool{New: func() any { return new(stepBuffers) }}

// free gives the verdict's buffers back, once nothing reads the verdict
// any more: after the response, and any lease, is done with.
func (v *verdict) free() {
	if v.buf != nil {
		stepPool.Put(v.buf)
		v.buf = nil
	}
}

// decide runs the limit step of one request: every limit that applies,
// global ones first, decided together in one store call.
func (g *Gateway) decide(ctx context.Context, x *exchange) (verdict, error) {
	v := verdict{reason: -1}
	if len(x.route.limits) == 0 {
		return v, nil
	}
	b := stepPool.Get().(*stepBuffers)
	v.buf = b
	if !x.keyLimits(&v, b) {
		v.missing = true
		v.reject = x.gen.keyRequired
		return v, nil
	}
	if len(v.limits) == 0 {
		return v, nil
	}
	req := &b.req
	*req = limit.Request{Limits: v.limits, Now: g.now(), Into: b.decisions[:]}
	for _, l := range v.limits {
		if l.Rule.Algorithm == limit.Concurrency {
			// The lease id is the gateway's own: a request id may come
			// from the client, and two requests sharing one would share
			// one lease, letting a client past a concurrency limit.
			v.lease = g.ids.Next()
			req.Lease = v.lease
			break
		}
	}
	res, failed, err := g.ask(ctx, x, &v, req)
	if err != nil {
		return v, err
	}
	v.res = res
	v.tally(req, failed)
	return v, nil
}

// keyLimits makes the key of each of the route's limits and picks its
// rule (an override's, if one matches), into v, with b's buffers. It
// reports false when a limit whose key is required has none; a limit
// with on_missing allow and no key is left out.
func (x *exchange) keyLimits(v *verdict, b *stepBuffers) bool {
	gen := x.gen
	v.specs, v.limits, v.values = b.specs[:0], b.limits[:0], b.values[:0]
	all := b.parts[:0] // every limit's key values, one after the other
	for _, l := range x.route.limits {
		from := len(all)
		var key limit.Key
		var ok bool
		if l.UsesIP && x.clientIP == "" {
			x.clientIP = gen.ipKeys.key(x.client)
		}
		if l.ConstKey != "" {
			key, all, ok = l.ConstKey, append(all, l.ConstValues...), true
		} else {
			key, all, ok = x.resolveCached(l.Key, false, all, l.keys)
		}
		if !ok && len(l.Fallback) > 0 {
			key, all, ok = x.resolveCached(l.Fallback, true, all[:from], l.fallbackKeys)
		}
		if !ok {
			all = all[:from]
			if l.AllowMissing {
				continue
			}
			return false
		}
		values := all[from:len(all):len(all)]
		rule := l.Rule
		for i := range l.Overrides {
			if overrideTakes(&l.Overrides[i], x, values) {
				rule = l.Overrides[i].Rule
				break
			}
		}
		v.specs = append(v.specs, l)
		v.limits = append(v.limits, limit.Limit{Rule: rule, Key: key})
		v.values = append(v.values, values)
	}
	return true
}

// ask decides req in the store, or, when the store is unavailable, as
// each limit's on_error says (decideLocally); failed says the store
// failed.
func (g *Gateway) ask(ctx context.Context, x *exchange, v *verdict, req *limit.Request) (res limit.Result, failed bool, err error) {
	gen := x.gen
	var traced time.Time
	if x.rec {
		traced = time.Now() // the span's clock, not the gateway's
	}
	start := g.now()
	res, err = gen.store.Decide(ctx, req)
	g.metrics.storeDuration.Observe(g.now().Sub(start).Seconds())
	if x.rec {
		x.traceStore(v, &res, err, traced)
	}
	v.store = gen.store
	if err == nil {
		g.storeAnswered()
		return res, false, nil
	}
	// A store that failed may still be deciding req (a batch that
	// outlived the request's context) and write in its buffers: they are
	// not used again.
	v.buf = nil
	if !errors.Is(err, limit.ErrStoreUnavailable) {
		return res, true, err
	}
	g.metrics.storeErrors.Inc()
	g.releaseUnknown(gen.store, req)
	res, err = g.decideLocally(ctx, gen, v, req, err)
	return res, true, err
}

// tally counts each limit's decision, notes the rejecting limit, the
// shadow limits that would have rejected and the concurrency leases
// taken. A decision is counted once: by its result here, or, when the
// store failed, as an error (decideLocally counted it).
func (v *verdict) tally(req *limit.Request, failed bool) {
	for i, d := range v.res.Decisions {
		l := v.specs[i]
		switch {
		case d.Undecided:
			// Never asked (on a cluster, a limit asked before it
			// rejected the request; on a store failure, a limit that
			// on_error allow dropped): no decision to count.
		case d.Allowed:
			if !failed {
				l.metrics.allowed.Inc()
			}
		case l.Rule.Shadow:
			if !failed {
				l.metrics.shadow.Inc()
			}
			v.shadowed = true
		default:
			if !failed {
				l.metrics.rejected.Inc()
			}
			if d.Local {
				l.metrics.local.Inc()
			}
			l.countRejected(req.Now, v.values[i])
			if v.reason < 0 {
				v.reason = i
				v.reject = l.reject
				l.metrics.rateLimited.Inc()
			}
		}
		if d.Allowed && !d.Undecided && v.res.Allowed && d.Rule.Algorithm == limit.Concurrency {
			v.leases = append(v.leases, v.limits[i])
		}
	}
}

// releaseUnknown releases the concurrency leases a failed decision may
// have taken: a script that timed out may still have run, and its leases
// would otherwise hold quota until they expire. The lease id is ours, and
// releasing a lease that was never taken does nothing.
func (g *Gateway) releaseUnknown(store limit.Store, req *limit.Request) {
	var leases []limit.Limit
	for _, l := range req.Limits {
		if l.Rule.Algorithm == limit.Concurrency {
			leases = append(leases, l)
		}
	}
	if len(leases) == 0 {
		return
	}
	lease := req.Lease // req is the caller's to use again
	go func() {
		// Once now, and once more later for a script that Redis ran after
		// the release (it was stuck behind a pause or a slow command, or on
		// a connection the release overtook). A script later still holds
		// its lease until the lease expires.
		for _, wait := range []time.Duration{0, lateRelease} {
			time.Sleep(wait)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			store.Release(ctx, lease, leases...)
			cancel()
		}
	}()
}

// lateRelease is how long after a failed decision its leases are released
// a second time.
const lateRelease = time.Second

// errStoreDenied makes a request fail with 503 limiter_unavailable.
var errStoreDenied = errors.New("store unavailable and on_error is deny")

// decideLocally decides a request whose store call failed, limit by limit
// as each one's on_error says: allow drops the limit, deny refuses the
// request, local decides it in the process's own memory store with a share
// of the limit, so that a fleet in fallback does not multiply each limit
// by its size.
//
// Every limit of the request counts one decision with result "error". A
// limit that allow drops is Undecided: it has no state to report, so no
// header shows it.
func (g *Gateway) decideLocally(ctx context.Context, gen *generation, v *verdict, req *limit.Request, cause error) (limit.Result, error) {
	for _, l := range v.specs {
		l.metrics.errored.Inc()
	}
	local := &limit.Request{Now: req.Now, Lease: req.Lease}
	var idx []int
	for i, l := range v.specs {
		switch l.OnError {
		case spec.OnErrorDeny:
			return limit.Result{}, errStoreDenied
		case spec.OnErrorLocal:
			local.Limits = append(local.Limits, limit.Limit{Rule: gen.localRule(req.Limits[i].Rule), Key: req.Limits[i].Key})
			idx = append(idx, i)
		}
	}
	g.logStoreError(cause)
	res := limit.Result{Allowed: true, Time: req.Now, Decisions: make([]limit.Decision, len(v.specs))}
	for i := range v.specs {
		res.Decisions[i] = limit.Decision{Rule: req.Limits[i].Rule, Key: req.Limits[i].Key, Allowed: true, Undecided: true}
	}
	if len(local.Limits) == 0 {
		return res, nil
	}
	lr, err := gen.local.Decide(ctx, local)
	if err != nil {
		return limit.Result{}, errStoreDenied
	}
	res.Allowed, res.Delay = lr.Allowed, lr.Delay
	for j, i := range idx {
		d := lr.Decisions[j]
		d.Rule = req.Limits[i].Rule
		res.Decisions[i] = d
	}
	v.store = gen.local
	v.limits = make([]limit.Limit, len(req.Limits))
	copy(v.limits, req.Limits)
	for j, i := range idx {
		v.limits[i] = local.Limits[j]
	}
	return res, nil
}

// localOwner keys the scaled rules cached on a rule: they hold for one
// generation and one share.
type localOwner struct {
	gen   *generation
	share float64
}

// localRule is r scaled to this instance's share of it.
func (gen *generation) localRule(r *limit.Rule) *limit.Rule {
	share := gen.localShare()
	return ruledata.Ext(r, localOwner{gen, share}, func(r *limit.Rule) any {
		scaled := &limit.Rule{
			Name: r.Name, Algorithm: r.Algorithm, Rate: r.Rate, Burst: r.Burst, Cost: r.Cost,
			Queue: r.Queue, Align: r.Align, Location: r.Location, Shadow: r.Shadow, LeaseTTL: r.LeaseTTL,
		}
		scale := func(n int64) int64 { return max(int64(math.Ceil(float64(n)*share)), 1) }
		scaled.Rate.Count = scale(r.Rate.Count)
		if r.Burst > 0 {
			scaled.Burst = scale(r.Burst)
		}
		if scaled.Validate() != nil {
			return r // cost above the scaled count: keep the whole limit
		}
		return scaled
	}).(*limit.Rule)
}

func (g *Gateway) logStoreError(err error) {
	now := g.now()
	g.storeFailedAt.Store(now.UnixNano())
	g.storeDown.Store(true)
	if g.storeErrLog.Allow(now.Unix()) {
		g.log.Error("rate-limit store failed; deciding by on_error", "error", err.Error())
	}
}

// storeRecovered is how long the store must answer without a failure to
// be said to answer again: on a cluster with one master down, the others
// answer between its failures, and the line would be written with every
// one of them.
const storeRecovered = time.Second

// storeAnswered notes a decision the store made, and says so once after
// it failed, when no decision failed for storeRecovered.
func (g *Gateway) storeAnswered() {
	if !g.storeDown.Load() || g.now().UnixNano()-g.storeFailedAt.Load() < int64(storeRecovered) {
		return
	}
	if g.storeDown.CompareAndSwap(true, false) {
		g.log.Info("rate-limit store answers again")
	}
}

// setHeaders sets the rate-limit headers of a request, and Retry-After
// of a rejected one.
func (v *verdict) setHeaders(h http.Header) {
	if len(v.res.Decisions) == 0 {
		return
	}
	reportable := func(i int) bool { return v.specs[i].reportable() }
	if i := answer.Reported(v.res.Decisions, v.reason, reportable); i >= 0 {
		// After an upstream's headers: none of its rate-limit family
		// stays beside the gateway's.
		v.specs[i].report.Replace(h, &v.res.Decisions[i])
	}
	if v.reject != nil && v.reason >= 0 {
		answer.SetRetryAfter(h, answer.RetryAfter(v.res.Decisions))
	}
}

// logRejection writes the one WARN line of a rejection, sampled per route
// and limit (docs/configuration.md, Logs).
func (g *Gateway) logRejection(x *exchange, v *verdict) {
	g.logLimit(x, v, v.reason, "rate limited")
}

// logShadowed writes the WARN line of each shadow limit that would have
// rejected the request (a shadow limit is decided, counted and logged,
// never enforced), sampled as rejections are.
func (g *Gateway) logShadowed(x *exchange, v *verdict) {
	for i := range v.res.Decisions {
		if d := &v.res.Decisions[i]; !d.Allowed && !d.Undecided && v.specs[i].Rule.Shadow {
			g.logLimit(x, v, i, "rate limited (shadow: not enforced)")
		}
	}
}

// logLimit writes the WARN line of limit i's rejection, sampled per route
// and limit. What only the line needs (the client's ip key part) is made
// only for a line that is written.
func (g *Gateway) logLimit(x *exchange, v *verdict, i int, msg string) {
	l := v.specs[i]
	if !l.sampler.Allow(g.now().Unix()) {
		g.metrics.logsSuppressed.Inc()
		return
	}
	d := &v.res.Decisions[i]
	g.log.LogAttrs(context.Background(), slog.LevelWarn, msg,
		slog.String("request_id", x.rid),
		slog.String("route", x.route.id),
		slog.String("limit", l.Name),
		// A copy: the values are in buffers the next request uses, and
		// a handler may keep the record.
		slog.Any("key", slices.Clone(v.values[i])),
		slog.Int64("limit_value", d.Limit),
		slog.Float64("window", d.Rule.Window().Seconds()),
		slog.Int64("remaining", d.Remaining),
		slog.Float64("retry_after", d.RetryAfter.Seconds()),
		slog.String("client_ip", x.ipKey()),
	)
}

// resolveCached is resolve, with the key taken from c when c made it
// before: c is the cache of parts' keys.
func (x *exchange) resolveCached(parts []spec.Part, fallback bool, values []string, c *keycache.Cache) (limit.Key, []string, bool) {
	var buf [4]limit.Part
	ps, values, ok := x.parts(parts, fallback, values, buf[:0])
	if !ok {
		return "", values, false
	}
	return c.Key(ps...), values, true
}
