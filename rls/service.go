package rls

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-gw/floodgate/limit"
)

// Options configure a Service.
type Options struct {
	// Store returns the store to decide in, on every request: the
	// gateway's, which a reload may replace.
	Store func() limit.Store

	// Rules are the first rules; SetRules replaces them. Nil: none.
	Rules *Rules

	// Logger gets one WARN line per store failure. Nil: slog.Default.
	Logger *slog.Logger

	// Registerer gets the service's metrics, gateway_rls_descriptor_hits_total
	// among them (metrics.go). Nil: none registered.
	Registerer prometheus.Registerer

	// Shadow answers OK to every request over a limit, which is counted
	// and reported as when enforced: the statuses of the limits it is
	// over still say OVER_LIMIT (envoyproxy/ratelimit's SHADOW_MODE).
	Shadow bool

	// QuotaMode makes every limit a quota, as quota_mode makes one
	// (envoyproxy/ratelimit's QUOTA_MODE): a request over it is admitted,
	// its status is OK, and the metadata names it.
	QuotaMode bool

	// Metadata answers every call with dynamic metadata that Envoy's
	// filter adds to the request's, under envoy.filters.http.ratelimit:
	// the domain, the descriptors, the hits, the quotas the request is over
	// and whether any limit it matched is one (envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA, in the same shape).
	Metadata bool

	// Headers are the rate-limit headers of every answer; "" or
	// NoHeaders: none.
	Headers Headers

	// NearLimitRatio is the part of a limit above which hits are near
	// it, in Outcome; 0 means DefaultNearLimitRatio.
	NearLimitRatio float64

	// Observe, when set, is called with the Outcome of every descriptor
	// with a limit, once its request is decided, for metrics. It must not
	// keep the Outcome's pointers past the call.
	Observe func(*Outcome)

	// Now is the clock; nil means time.Now. The Redis store decides on
	// Redis TIME whatever it says.
	Now func() time.Time
}

// Service answers envoy.service.ratelimit.v3.RateLimitService.
// ShouldRateLimit: every descriptor of a request is matched against the
// rules of its domain, and the limits they match are decided together in
// one store call, so that, unlike envoyproxy/ratelimit, a request over one
// limit consumes nothing from the others.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store    func() limit.Store
	rules    atomic.Pointer[rulesIn]
	log      *slog.Logger
	now      func() time.Time
	requests *prometheus.CounterVec
	shadowed *prometheus.CounterVec

	shadow    bool
	quota     bool
	meta      bool
	headers   Headers
	nearRatio float64
	observe   func(*Outcome)
	// metrics counts every Outcome when there is a Registerer; called
	// as a method, not through observe, so that the Outcome stays on
	// the stack.
	metrics *descriptorMetrics

	errLogged atomic.Int64 // the Unix second of the last store failure logged
}

// New returns a service; register it on a grpc.Server with
// rlsv3.RegisterRateLimitServiceServer.
func New(o Options) *Service {
	s := &Service{store: o.Store, log: o.Logger, now: o.Now, shadow: o.Shadow, quota: o.QuotaMode, meta: o.Metadata, headers: o.Headers, nearRatio: o.NearLimitRatio, observe: o.Observe}
	if s.nearRatio == 0 {
		s.nearRatio = DefaultNearLimitRatio
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.SetRules(o.Rules)
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_rls_requests_total",
		Help: "ShouldRateLimit calls by domain and answer: OK, OVER_LIMIT, or the gRPC error code.",
	}, []string{"domain", "code"})
	s.shadowed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_rls_shadow_total",
		Help: "ShouldRateLimit calls over a limit answered OK because rls.shadow is on, by domain.",
	}, []string{"domain"})
	if o.Registerer != nil {
		s.metrics = newDescriptorMetrics()
		o.Registerer.MustRegister(s.requests, s.shadowed, s.metrics.hits)
	}
	return s
}

// rulesIn are rules and their domains as a set, for metric labels.
type rulesIn struct {
	*Rules
	domains map[string]bool
}

// SetRules swaps in new rules; calls already running finish on the old.
func (s *Service) SetRules(r *Rules) {
	if r == nil {
		r = &Rules{}
	}
	in := &rulesIn{Rules: r, domains: map[string]bool{}}
	for _, d := range r.Domains() {
		in.domains[d] = true
	}
	s.rules.Store(in)
}

// Rules returns the rules in use.
func (s *Service) Rules() *Rules { return s.rules.Load().Rules }

// MaxDescriptors bounds the descriptors of one request: they are decided
// in one store call, whose size must stay bounded (Envoy sends a handful).
const MaxDescriptors = 256

// MaxEntries bounds the entries of one descriptor: no rule file nests as
// deep, and every entry is matched and hashed.
const MaxEntries = 64

// matched is one descriptor's limit and what the store said of it.
type matched struct {
	lim *Limit
	// hits is what the descriptor counts; 0 checks its limit and counts
	// nothing.
	hits int64
	// at is its place in its store call, or -1 when not decided; an int32
	// (at most MaxDescriptors) so that replaced fits beside it and a
	// call's one slice of matched is no larger for it.
	at int32
	// replaced is whether another limit of the request replaces lim,
	// which then decides nothing and is not reported.
	replaced bool
	// state is the limit's state read without counting, for a limit the
	// store call leaves out: a check, a limit blocked by its hits, or any
	// limit of a request rejected before the store call.
	state *limit.State
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain := req.GetDomain()
	resp, err := s.decide(ctx, req)
	var code string
	if err != nil {
		code = status.Code(err).String()
	} else {
		if s.shadow && resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlsv3.RateLimitResponse_OK
			s.shadowed.WithLabelValues(metricDomain(s.rules.Load(), domain)).Inc()
		}
		code = resp.OverallCode.String()
	}
	s.requests.WithLabelValues(metricDomain(s.rules.Load(), domain), code).Inc()
	return resp, err
}

// metricDomain keeps the label's values to the configured domains, so
// that clients cannot grow the metric without bound.
func metricDomain(r *rulesIn, domain string) string {
	if r.domains[domain] {
		return domain
	}
	return "unknown"
}

// decide answers one call: its descriptors are matched, a limit that
// rejects the request whatever it has counted rejects it first, the
// checks are read, the limits are counted in one store call, what the
// call left out is read, and the answer is written.
func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	d := decision{s: s, req: req, domain: req.GetDomain(), ds: req.GetDescriptors()}
	if err := d.match(); err != nil {
		return nil, err
	}
	markReplaced(d.ms)
	d.rejectBlocked()
	d.store, d.now = s.store(), s.now()
	if err := d.readChecks(ctx); err != nil {
		return nil, err
	}
	call, err := d.request()
	if err != nil {
		return nil, err
	}
	if err := d.count(ctx, call); err != nil {
		return nil, err
	}
	d.readLeftOut(ctx)
	return d.answer(), nil
}

// checkRequest rejects a request without a domain, or with no
// descriptors or more than MaxDescriptors.
func checkRequest(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(ds) > MaxDescriptors {
		return status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d in one request", len(ds), MaxDescriptors)
	}
	return nil
}

// decision is one ShouldRateLimit call on its way: the limits its
// descriptors matched and what the store said of them.
type decision struct {
	s      *Service
	req    *rlsv3.RateLimitRequest
	domain string
	ds     []*rlsv3ext.RateLimitDescriptor
	ms     []matched // one per descriptor

	store limit.Store
	now   time.Time
	// over is whether a limit rejects the request before the store call,
	// which then counts nothing.
	over     bool
	res      limit.Result // the store call's, when there is one
	admitted bool         // whether the store counted the request's hits
}

// match finds the limit of every descriptor and the hits it counts.
func (d *decision) match() error {
	rules := d.s.rules.Load()
	// The request's hits_addend is a plain number, and 0 means 1, as
	// Envoy documents.
	hits := int64(d.req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	d.ms = make([]matched, len(d.ds))
	entries := make([]Entry, 0, 8)
	for i, desc := range d.ds {
		if desc.GetIsNegativeHits() {
			return status.Errorf(codes.InvalidArgument, "descriptor %d: negative hits are not supported", i)
		}
		if n := len(desc.GetEntries()); n > MaxEntries {
			return status.Errorf(codes.InvalidArgument, "descriptor %d: %d entries: at most %d in one descriptor", i, n, MaxEntries)
		}
		entries = entries[:0]
		for _, e := range desc.GetEntries() {
			entries = append(entries, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		m := &d.ms[i]
		*m = matched{hits: hits, at: -1}
		if o := desc.GetLimit(); o != nil && rules.domains[d.domain] {
			l, err := override(d.domain, o, d.s.quota)
			if err != nil {
				return status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
			m.lim = l
		} else {
			m.lim = rules.Match(d.domain, entries)
		}
		// A descriptor's own hits_addend, when set, overrides the
		// request's. It is a wrapper, so that 0 differs from unset:
		// envoyproxy/ratelimit reads 0 as a check that counts nothing.
		if h := desc.GetHitsAddend(); h != nil {
			m.hits = int64(min(h.GetValue(), math.MaxInt64))
		}
	}
	return nil
}

// markReplaced marks the limits of ms that another limit of ms replaces.
// The names are in a map of this function's own, not one kept with the
// call's other state: that would escape to the heap with it, since escape
// analysis does not tell a struct's fields apart.
func markReplaced(ms []matched) {
	replaced := map[string]bool{}
	for i := range ms {
		if l := ms[i].lim; l != nil {
			for _, name := range l.Replaces {
				replaced[name] = true
			}
		}
	}
	if len(replaced) == 0 {
		return
	}
	for i := range ms {
		if m := &ms[i]; m.lim != nil {
			m.replaced = m.lim.Name != "" && replaced[m.lim.Name]
		}
	}
}

// rejectBlocked marks the request over when a limit rejects it whatever
// it has counted: a limit of 0, or one asked for more hits than its
// count.
func (d *decision) rejectBlocked() {
	// Such a limit rejects the request before anything is counted: the
	// request's other limits are not decided, so they consume nothing.
	for i := range d.ms {
		d.over = d.over || blocked(&d.ms[i]) && d.ms[i].lim.rejects(d.s.quota)
	}
}

// readChecks reads the limits of the descriptors that count nothing,
// and marks the request over when one of them is used up.
func (d *decision) readChecks(ctx context.Context) error {
	// Checks are read before anything is counted, so that one whose limit
	// is used up rejects the request with nothing consumed. The store
	// cannot decide them with the others: a rule costs at least 1 (a cost
	// of 0 means 1). A request decided between the read and the store call
	// may use the limit up: a check is as exact as a read, no more.
	if d.over {
		return nil
	}
	if err := peek(ctx, d.store, d.now, d.ds, d.ms, func(m *matched) bool { return m.hits == 0 }); err != nil {
		return d.s.unavailable(d.domain, err)
	}
	for i := range d.ms {
		if m := &d.ms[i]; m.state != nil && m.state.Remaining <= 0 && m.lim.rejects(d.s.quota) {
			d.over = true
		}
	}
	return nil
}

// request is the store call that counts the request's hits: every limit
// with hits to count, or none when the request is over.
func (d *decision) request() (*limit.Request, error) {
	// The limits to decide, in one store call, so that the request is
	// admitted or rejected by all of them at once. A call has one hits
	// count; descriptors whose own hits_addend differ are each counted
	// under a copy of their rule that costs their hits (the copy shares
	// the rule's counters: they depend on its name and window, not its
	// cost).
	call := &limit.Request{}
	for i, desc := range d.ds {
		m := &d.ms[i]
		if d.over || m.hits == 0 || m.lim == nil || m.lim.Rule == nil || m.replaced || blocked(m) {
			continue // nothing to count: no limit, unlimited, replaced, blocked or a check
		}
		if call.Hits == 0 {
			call.Hits = m.hits
		}
		if call.Limits == nil {
			call.Limits = make([]limit.Limit, 0, len(d.ds)-i) // one allocation, not one per growth
		}
		m.at = int32(len(call.Limits))
		call.Limits = append(call.Limits, limit.Limit{Rule: m.lim.storeRule(d.s.quota), Key: key(m.lim, desc.GetEntries())})
	}
	for i := range d.ms {
		if m := &d.ms[i]; m.at >= 0 && m.hits != call.Hits {
			if err := costed(call, d.ms); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "%v", err)
			}
			break
		}
	}
	return call, nil
}

// count makes the store call, when it has limits, and notes whether the
// store admitted the request.
func (d *decision) count(ctx context.Context, call *limit.Request) error {
	d.admitted = !d.over
	if len(call.Limits) == 0 {
		return nil
	}
	call.Now = d.now
	res, err := d.store.Decide(ctx, call)
	if err != nil {
		return d.s.unavailable(d.domain, err)
	}
	d.res = res
	for _, dec := range res.Decisions {
		d.admitted = d.admitted && (dec.Allowed || dec.Rule.Shadow)
	}
	return nil
}

// readLeftOut reads the limits the store call left out, counting
// nothing, for their statuses.
func (d *decision) readLeftOut(ctx context.Context) {
	// The limits the store call left out, because the request was
	// rejected first or their hits are above their count, are read without
	// counting, so that their statuses say what they have left and when
	// they reset, as those of a request the store rejects do. A request
	// that the store call decides reads nothing more, unless a shadow
	// limit is blocked by its hits. The answer does not depend on the
	// reads: one that fails leaves its status without them.
	if err := peek(ctx, d.store, d.now, d.ds, d.ms, func(m *matched) bool { return m.at < 0 && m.state == nil }); err != nil {
		d.s.warn("rate-limit store failed; ShouldRateLimit answers without the remaining counts of limits it did not decide", d.domain, err)
	}
}

// answer is the response to the call: the status of every descriptor,
// the overall code, the rate-limit headers and the metadata.
func (d *decision) answer() *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(d.ds)),
	}
	// The answer's statuses, current limits and resets are each made in
	// one allocation for the whole call rather than one per descriptor:
	// they are written once and live as long as the answer.
	var (
		statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, len(d.ds))
		current  []rlsv3.RateLimitResponse_RateLimit
		resets   []durationpb.Duration
	)
	var quotas []int // the descriptors over a quota, for the metadata
	for i := range d.ds {
		m := &d.ms[i]
		st := &statuses[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		l := m.lim
		if l == nil {
			continue
		}
		if l.Unlimited {
			// What envoyproxy/ratelimit reports for an unlimited
			// descriptor, with no current limit.
			st.LimitRemaining = math.MaxUint32
			continue
		}
		if m.replaced {
			continue
		}
		if current == nil {
			current = make([]rlsv3.RateLimitResponse_RateLimit, len(d.ds))
		}
		cl := &current[i]
		cl.Name, cl.RequestsPerUnit, cl.Unit = l.Name, l.RequestsPerUnit, l.Unit
		st.CurrentLimit = cl
		v := d.judge(m)
		if d.s.observe != nil || d.s.metrics != nil {
			d.report(i, v)
		}
		if !v.allowed {
			// What envoyproxy/ratelimit reports of a limit that
			// rejects, even when hits above what it has left leave
			// some: nothing for this request.
			v.left = 0
		}
		if v.known {
			st.LimitRemaining = uint32(min(max(v.left, 0), math.MaxUint32))
			if resets == nil {
				resets = make([]durationpb.Duration, len(d.ds))
			}
			resets[i].Seconds = wholeSeconds(v.reset)
			st.DurationUntilReset = &resets[i]
		}
		// A shadow limit is decided and reported, never enforced; a
		// quota is reported in the metadata.
		switch {
		case v.allowed || l.Shadow:
		case l.quota(d.s.quota):
			quotas = append(quotas, i)
		default:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	addHeaders(d.s.headers, resp, d.ms)
	if d.s.meta {
		resp.DynamicMetadata = metadataOf(d.req, quotas, d.ms, d.s.quota)
	}
	return resp
}

// verdict is what one descriptor's limit says of the request.
type verdict struct {
	allowed bool
	known   bool // whether left and reset are
	left    int64
	reset   time.Duration
}

// judge is what m's limit says of the request: its decision in the store
// call, or its state read without counting; over, whatever it has left,
// when it is blocked.
func (d *decision) judge(m *matched) verdict {
	v := verdict{allowed: true}
	switch {
	case m.at >= 0:
		// Undecided on Redis Cluster: a limit in another slot,
		// asked first, rejected the request, and this one was not
		// asked (limit.Decision.Undecided), so that a surge costs
		// one call; what it has left is unknown.
		if dec := d.res.Decisions[m.at]; !dec.Undecided {
			v = verdict{allowed: dec.Allowed, known: true, left: dec.Remaining, reset: dec.ResetAfter}
		}
	case m.state != nil:
		// Read, not counted: it admits what it has room for, as
		// the store would have judged it.
		v = verdict{known: true, left: m.state.Remaining, reset: m.state.ResetAfter}
		v.allowed = v.left >= max(m.hits, 1)
	}
	if blocked(m) {
		v.allowed = false
		if !v.known {
			// requests_per_unit 0, or a read that failed: over
			// until the end of the window at least.
			p := m.lim.Period
			v.known, v.reset = true, p-time.Duration(d.now.UnixNano()%int64(p))
		}
	}
	return v
}

// report gives the Outcome of descriptor i, judged v, to the metrics and
// to Options.Observe.
func (d *decision) report(i int, v verdict) {
	m := &d.ms[i]
	o := Outcome{Domain: d.domain, Descriptor: d.ds[i], Limit: m.lim, TotalHits: m.hits}
	if v.known {
		// A limit that rejected counted nothing: left is before the hits.
		o.count(d.s.nearRatio, v.allowed, v.allowed && m.at >= 0 && d.admitted, v.left)
	}
	if d.s.metrics != nil {
		d.s.metrics.observe(&o)
	}
	if d.s.observe != nil {
		oc := o // on the heap only when observed
		d.s.observe(&oc)
	}
}

// wholeSeconds is a duration until reset as envoyproxy/ratelimit sends
// it, in whole seconds, rounded up: Envoy's filter writes X-RateLimit-Reset
// from the seconds alone, so that a reset 0.4s away would read 0 and one
// 59.6s away 59. Rounded up, it is the number envoyproxy/ratelimit sends
// for an epoch-aligned window (the unit's seconds less those elapsed).
func wholeSeconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

// unavailable is the answer to a request the store could not decide.
func (s *Service) unavailable(domain string, err error) error {
	s.warn("rate-limit store failed; ShouldRateLimit answers UNAVAILABLE", domain, err)
	return status.Errorf(codes.Unavailable, "rate-limit store: %v", err)
}

// warn logs a store failure, one line a second at most: while the store
// is down, every call fails.
func (s *Service) warn(msg, domain string, err error) {
	if sec := time.Now().Unix(); s.errLogged.Swap(sec) != sec {
		s.log.Warn(msg, "domain", domain, "error", err.Error())
	}
}

// peek reads the state of the limits of ms that pick chooses (among those
// with something to count and not replaced) into their state, counting
// nothing. Several reads run at once, so that on Redis they share round
// trips. It returns the first error; the other reads are kept.
func peek(ctx context.Context, store limit.Store, now time.Time, ds []*rlsv3ext.RateLimitDescriptor, ms []matched, pick func(*matched) bool) error {
	var idx []int
	for i := range ms {
		if m := &ms[i]; m.lim != nil && m.lim.Rule != nil && !m.replaced && pick(m) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	errs := make([]error, len(idx))
	read := func(j int) {
		i := idx[j]
		st, err := store.Peek(ctx, now, ms[i].lim.Rule, key(ms[i].lim, ds[i].GetEntries()))
		if err != nil {
			errs[j] = err
			return
		}
		ms[i].state = &st
	}
	if len(idx) == 1 {
		read(0)
	} else {
		var wg sync.WaitGroup
		for j := range idx {
			wg.Go(func() { read(j) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// costed makes req count every limit at its descriptor's own hits: req
// counts one hit, and a limit of other hits (at most its count: more are
// blocked) gets a copy of its rule that costs them.
func costed(req *limit.Request, ms []matched) error {
	req.Hits = 1
	for i := range ms {
		m := &ms[i]
		if m.at < 0 || m.hits == 1 {
			continue
		}
		c := req.Limits[m.at].Rule.WithCost(m.hits)
		if err := c.Validate(); err != nil {
			return err
		}
		req.Limits[m.at].Rule = c
	}
	return nil
}

// key is the counter of one descriptor that matched l: every entry's key
// and value, so that a rule that matches any value counts each value
// apart, as envoyproxy/ratelimit does, but where share_threshold has the
// values of a wildcard share one.
func key(l *Limit, es []*rlsv3ext.RateLimitDescriptor_Entry) limit.Key {
	parts := make([]limit.Part, 0, 2*len(es))
	for i, e := range es {
		parts = append(parts, limit.Part{Kind: "k", Value: e.GetKey()}, limit.Part{Kind: "v", Value: l.CounterValue(i, e.GetValue())})
	}
	return limit.NewKey(parts...)
}

// blocked reports whether m's limit rejects the request whatever it has
// counted, and is not replaced by another: a limit of 0, or hits above the
// limit's count.
func blocked(m *matched) bool {
	l := m.lim
	if l == nil || l.Unlimited || l.Period <= 0 || m.replaced {
		return false
	}
	return l.Rule == nil || m.hits > int64(l.RequestsPerUnit)
}
