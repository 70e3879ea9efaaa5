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
	at   int // its place in its store call, or -1 when not decided
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

func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain := req.GetDomain()
	if domain == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if len(ds) > MaxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d in one request", len(ds), MaxDescriptors)
	}
	rules := s.rules.Load()
	// The request's hits_addend is a plain number, and 0 means 1, as
	// Envoy documents.
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	ms := make([]matched, len(ds))
	replaced := map[string]bool{}
	entries := make([]Entry, 0, 8)
	for i, d := range ds {
		if d.GetIsNegativeHits() {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: negative hits are not supported", i)
		}
		if n := len(d.GetEntries()); n > MaxEntries {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %d entries: at most %d in one descriptor", i, n, MaxEntries)
		}
		entries = entries[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		ms[i] = matched{hits: hits, at: -1}
		if o := d.GetLimit(); o != nil && rules.domains[domain] {
			l, err := override(domain, o, s.quota)
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
			ms[i].lim = l
		} else {
			ms[i].lim = rules.Match(domain, entries)
		}
		// A descriptor's own hits_addend, when set, overrides the
		// request's. It is a wrapper, so that 0 differs from unset:
		// envoyproxy/ratelimit reads 0 as a check that counts nothing.
		if h := d.GetHitsAddend(); h != nil {
			ms[i].hits = int64(min(h.GetValue(), math.MaxInt64))
		}
		if l := ms[i].lim; l != nil {
			for _, name := range l.Replaces {
				replaced[name] = true
			}
		}
	}

	// A limit of 0, or one asked for more hits than its count, rejects the
	// request before anything is counted: the request's other limits are
	// not decided, so they consume nothing.
	over := false
	for i := range ms {
		over = over || blocked(&ms[i], replaced) && ms[i].lim.rejects(s.quota)
	}

	store := s.store()
	now := s.now()
	// Checks are read before anything is counted, so that one whose limit
	// is used up rejects the request with nothing consumed. The store
	// cannot decide them with the others: a rule costs at least 1 (a cost
	// of 0 means 1). A request decided between the read and the store call
	// may use the limit up: a check is as exact as a read, no more.
	if !over {
		if err := peek(ctx, store, now, ds, ms, replaced, func(m *matched) bool { return m.hits == 0 }); err != nil {
			return nil, s.unavailable(domain, err)
		}
		for i := range ms {
			if m := &ms[i]; m.state != nil && m.state.Remaining <= 0 && m.lim.rejects(s.quota) {
				over = true
			}
		}
	}

	// The limits to decide, in one store call, so that the request is
	// admitted or rejected by all of them at once. A call has one hits
	// count; descriptors whose own hits_addend differ are each counted
	// under a copy of their rule that costs their hits (the copy shares
	// the rule's counters: they depend on its name and window, not its
	// cost).
	call := &limit.Request{}
	for i, d := range ds {
		m := &ms[i]
		if over || m.hits == 0 || m.lim == nil || m.lim.Rule == nil || isReplaced(m.lim, replaced) || blocked(m, replaced) {
			continue // nothing to count: no limit, unlimited, replaced, blocked or a check
		}
		if call.Hits == 0 {
			call.Hits = m.hits
		}
		if call.Limits == nil {
			call.Limits = make([]limit.Limit, 0, len(ds)-i) // one allocation, not one per growth
		}
		m.at = len(call.Limits)
		call.Limits = append(call.Limits, limit.Limit{Rule: m.lim.storeRule(s.quota), Key: key(m.lim, d.GetEntries())})
	}
	for i := range ms {
		if m := &ms[i]; m.at >= 0 && m.hits != call.Hits {
			if err := costed(call, ms); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "%v", err)
			}
			break
		}
	}
	var res limit.Result
	admitted := !over // whether the store counted the request's hits
	if len(call.Limits) > 0 {
		call.Now = now
		var err error
		res, err = store.Decide(ctx, call)
		if err != nil {
			return nil, s.unavailable(domain, err)
		}
		for _, d := range res.Decisions {
			admitted = admitted && (d.Allowed || d.Rule.Shadow)
		}
	}
	// The limits the store call left out, because the request was
	// rejected first or their hits are above their count, are read without
	// counting, so that their statuses say what they have left and when
	// they reset, as those of a request the store rejects do. A request
	// that the store call decides reads nothing more, unless a shadow
	// limit is blocked by its hits. The answer does not depend on the
	// reads: one that fails leaves its status without them.
	if err := peek(ctx, store, now, ds, ms, replaced, func(m *matched) bool { return m.at < 0 && m.state == nil }); err != nil {
		s.warn("rate-limit store failed; ShouldRateLimit answers without the remaining counts of limits it did not decide", domain, err)
	}

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	// The answer's statuses, current limits and resets are each made in
	// one allocation for the whole call rather than one per descriptor:
	// they are written once and live as long as the answer.
	var (
		statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, len(ds))
		current  []rlsv3.RateLimitResponse_RateLimit
		resets   []durationpb.Duration
	)
	var quotas []int // the descriptors over a quota, for the metadata
	for i := range ds {
		m := &ms[i]
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
		if isReplaced(l, replaced) {
			continue
		}
		if current == nil {
			current = make([]rlsv3.RateLimitResponse_RateLimit, len(ds))
		}
		cl := &current[i]
		cl.Name, cl.RequestsPerUnit, cl.Unit = l.Name, l.RequestsPerUnit, l.Unit
		st.CurrentLimit = cl
		var (
			allowed, known = true, false
			left           int64
			reset          time.Duration
		)
		switch {
		case m.at >= 0:
			// Undecided on Redis Cluster: a limit in another slot,
			// asked first, rejected the request, and this one was not
			// asked (limit.Decision.Undecided), so that a surge costs
			// one call; what it has left is unknown.
			if d := res.Decisions[m.at]; !d.Undecided {
				allowed, known, left, reset = d.Allowed, true, d.Remaining, d.ResetAfter
			}
		case m.state != nil:
			// Read, not counted: it admits what it has room for, as
			// the store would have judged it.
			known, left, reset = true, m.state.Remaining, m.state.ResetAfter
			allowed = left >= max(m.hits, 1)
		}
		if blocked(m, replaced) {
			allowed = false
			if !known {
				// requests_per_unit 0, or a read that failed: over
				// until the end of the window at least.
				known, reset = true, l.Period-time.Duration(now.UnixNano()%int64(l.Period))
			}
		}
		// A limit that rejected counted nothing: left is before the hits.
		if s.observe != nil || s.metrics != nil {
			o := Outcome{Domain: domain, Descriptor: ds[i], Limit: l, TotalHits: m.hits}
			if known {
				o.count(s.nearRatio, allowed, allowed && m.at >= 0 && admitted, left)
			}
			if s.metrics != nil {
				s.metrics.observe(&o)
			}
			if s.observe != nil {
				oc := o // on the heap only when observed
				s.observe(&oc)
			}
		}
		if !allowed {
			// What envoyproxy/ratelimit reports of a limit that
			// rejects, even when hits above what it has left leave
			// some: nothing for this request.
			left = 0
		}
		if known {
			st.LimitRemaining = uint32(min(max(left, 0), math.MaxUint32))
			if resets == nil {
				resets = make([]durationpb.Duration, len(ds))
			}
			resets[i].Seconds = wholeSeconds(reset)
			st.DurationUntilReset = &resets[i]
		}
		// A shadow limit is decided and reported, never enforced; a
		// quota is reported in the metadata.
		switch {
		case allowed || l.Shadow:
		case l.quota(s.quota):
			quotas = append(quotas, i)
		default:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	addHeaders(s.headers, resp, ms)
	if s.meta {
		resp.DynamicMetadata = metadataOf(req, quotas, ms, s.quota)
	}
	return resp, nil
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
func peek(ctx context.Context, store limit.Store, now time.Time, ds []*rlsv3ext.RateLimitDescriptor, ms []matched, replaced map[string]bool, pick func(*matched) bool) error {
	var idx []int
	for i := range ms {
		if m := &ms[i]; m.lim != nil && m.lim.Rule != nil && !isReplaced(m.lim, replaced) && pick(m) {
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
func blocked(m *matched, replaced map[string]bool) bool {
	l := m.lim
	if l == nil || l.Unlimited || l.Period <= 0 || isReplaced(l, replaced) {
		return false
	}
	return l.Rule == nil || m.hits > int64(l.RequestsPerUnit)
}

// isReplaced reports whether another limit of the request replaces l.
func isReplaced(l *Limit, replaced map[string]bool) bool { return l.Name != "" && replaced[l.Name] }
