package rls

import (
	"context"
	"log/slog"
	"math"
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

	// Registerer gets the service's metrics. Nil: none registered.
	Registerer prometheus.Registerer

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

	errLogged atomic.Int64 // the Unix second of the last store failure logged
}

// New returns a service; register it on a grpc.Server with
// rlsv3.RegisterRateLimitServiceServer.
func New(o Options) *Service {
	s := &Service{store: o.Store, log: o.Logger, now: o.Now}
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
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.requests)
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

// matched is one descriptor's limit and what the decision said of it.
type matched struct {
	lim  *Limit
	hits int64
	at   int // its place in its store call, or -1 when not decided
}

// ShouldRateLimit implements rlsv3.RateLimitServiceServer.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	domain := req.GetDomain()
	resp, err := s.decide(ctx, req)
	var code string
	if err != nil {
		code = status.Code(err).String()
	} else {
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
		entries = entries[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		ms[i] = matched{lim: rules.Match(domain, entries), hits: hits, at: -1}
		// A descriptor's own hits_addend overrides the request's; 0
		// means 1 in both, as Envoy documents for the request's.
		if h := d.GetHitsAddend().GetValue(); h > 0 {
			ms[i].hits = int64(min(h, math.MaxInt64))
		}
		if l := ms[i].lim; l != nil {
			for _, name := range l.Replaces {
				replaced[name] = true
			}
		}
	}

	// A limit of 0, or one asked for more hits than its count, rejects the
	// request before anything is counted: the request's other limits are
	// not asked, so they consume nothing.
	over := false
	for i := range ms {
		over = over || blocked(&ms[i], replaced) && !ms[i].lim.Shadow
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
		if over || m.lim == nil || m.lim.Rule == nil || isReplaced(m.lim, replaced) || blocked(m, replaced) {
			continue // nothing to count: no limit, unlimited, replaced, or blocked
		}
		if call.Hits == 0 {
			call.Hits = m.hits
		}
		m.at = len(call.Limits)
		call.Limits = append(call.Limits, limit.Limit{Rule: m.lim.Rule, Key: key(d.GetEntries())})
	}
	for i := range ms {
		if m := &ms[i]; m.at >= 0 && m.hits != call.Hits {
			if err := costed(call, ms); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "%v", err)
			}
			break
		}
	}
	now := s.now()
	var res limit.Result
	if len(call.Limits) > 0 {
		call.Now = now
		var err error
		res, err = s.store().Decide(ctx, call)
		if err != nil {
			// One line a second at most: while the store is down,
			// every call fails.
			if sec := time.Now().Unix(); s.errLogged.Swap(sec) != sec {
				s.log.Warn("rate-limit store failed; ShouldRateLimit answers UNAVAILABLE", "domain", domain, "error", err.Error())
			}
			return nil, status.Errorf(codes.Unavailable, "rate-limit store: %v", err)
		}
	}

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds)),
	}
	for i := range ds {
		m := &ms[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		if blocked(m, replaced) {
			// requests_per_unit 0, or fewer than the hits: over, until
			// the end of the window at least; what remains is not asked.
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: m.lim.Name, RequestsPerUnit: m.lim.RequestsPerUnit, Unit: m.lim.Unit}
			st.DurationUntilReset = durationpb.New(m.lim.Period - time.Duration(now.UnixNano()%int64(m.lim.Period)))
			if !m.lim.Shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			}
			continue
		}
		counted := m.lim != nil && m.lim.Rule != nil && !isReplaced(m.lim, replaced)
		var d limit.Decision
		asked := false
		if counted && m.at >= 0 {
			d = res.Decisions[m.at]
			asked = !d.Undecided
		}
		if counted && !asked {
			// Not asked, because another limit rejected the request
			// first: reported with its limit, its remaining unknown.
			st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: m.lim.Name, RequestsPerUnit: m.lim.RequestsPerUnit, Unit: m.lim.Unit}
			continue
		}
		if m.at < 0 {
			continue
		}
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
			Name:            m.lim.Name,
			RequestsPerUnit: m.lim.RequestsPerUnit,
			Unit:            m.lim.Unit,
		}
		st.LimitRemaining = uint32(min(d.Remaining, math.MaxUint32))
		st.DurationUntilReset = durationpb.New(d.ResetAfter)
		// A shadow limit is decided and reported, never enforced.
		if !d.Allowed && !m.lim.Shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	return resp, nil
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
		c := m.lim.Rule.WithCost(m.hits)
		if err := c.Validate(); err != nil {
			return err
		}
		req.Limits[m.at].Rule = c
	}
	return nil
}

// key is the counter of one descriptor: every entry's key and value, so
// that a rule that matches any value counts each value apart, as
// envoyproxy/ratelimit does.
func key(es []*rlsv3ext.RateLimitDescriptor_Entry) limit.Key {
	parts := make([]limit.Part, 0, 2*len(es))
	for _, e := range es {
		parts = append(parts, limit.Part{Kind: "k", Value: e.GetKey()}, limit.Part{Kind: "v", Value: e.GetValue()})
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
