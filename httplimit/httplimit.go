package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/keycache"
	"github.com/floodgate-gw/floodgate/limit"
)

// Limit is one limit the middleware applies.
type Limit struct {
	// Rule is the limit. Its Name names it in the headers.
	Rule *limit.Rule

	// Key returns the request's key for this limit, and false when the
	// limit does not apply to the request (an anonymous request has no
	// user limit, say). Nil: one key for every request, a global limit.
	Key func(r *http.Request) (string, bool)

	// Status, Code and Message answer a request this limit rejects:
	// 429, "rate_limited" and "Too many requests" when empty.
	Status  int
	Code    string
	Message string

	// NoHeaders keeps this limit out of the rate-limit headers.
	NoHeaders bool

	// KeyOptional lets a request whose Key returns false through this
	// limit unlimited, as the gateway's on_missing: allow does. False (the
	// default, as the gateway's on_missing: deny): such a request is
	// answered 403 key_required before any limit is decided.
	KeyOptional bool
}

// OnError is what a request gets when the store cannot decide.
type OnError int

const (
	// Deny answers 503 with code "limiter_unavailable".
	Deny OnError = iota
	// Allow lets the request through unlimited.
	Allow
)

// Options configure New.
type Options struct {
	// Store decides the limits: the memory store or a Redis one.
	Store limit.Store

	// Limits apply in order; the first that rejects gives the answer.
	Limits []Limit

	// Fallback, when set, decides while Store fails: a memory store with
	// a share of each limit, say. Without it, OnError answers.
	Fallback limit.Store
	OnError  OnError

	// RequestIDHeader carries the request id: the client's when it sent one
	// well-formed value (at most 128 bytes of letters, digits and
	// - _ . : + / =), else a new one, which replaces the client's on the
	// request. The handler finds it there, and every
	// response carries it back in the same header, as the JSON answers do
	// in their body; a handler that sets that response header itself sends
	// its own. Default "X-Request-Id".
	RequestIDHeader string

	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// New returns the middleware, or an error naming the first invalid limit.
func New(o Options) (func(http.Handler) http.Handler, error) {
	if o.Store == nil {
		return nil, errors.New("httplimit: no store")
	}
	if o.RequestIDHeader == "" {
		o.RequestIDHeader = "X-Request-Id"
	}
	o.RequestIDHeader = http.CanonicalHeaderKey(o.RequestIDHeader)
	if o.Now == nil {
		o.Now = time.Now
	}
	ls := make([]preparedLimit, len(o.Limits))
	for i, l := range o.Limits {
		if l.Rule == nil {
			return nil, fmt.Errorf("httplimit: limit %d has no rule", i)
		}
		if err := l.Rule.Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: limit %d: %w", i, err)
		}
		if l.Status == 0 {
			l.Status = http.StatusTooManyRequests
		}
		if l.Status < 400 || l.Status > 599 {
			return nil, fmt.Errorf("httplimit: limit %s: status %d is not an error status", l.Rule.Name, l.Status)
		}
		if l.Code == "" {
			l.Code = "rate_limited"
		}
		if l.Message == "" {
			l.Message = "Too many requests"
		}
		ls[i] = preparedLimit{Limit: l, answer: answer.NewAnswer(l.Status, l.Code, l.Message), report: answer.NewReporter(l.Rule.Name)}
		if l.Key != nil {
			ls[i].keys = keycache.New()
		}
	}
	m := &middleware{o: o, limits: ls, ids: answer.NewIDSource(),
		unavailable: answer.NewAnswer(http.StatusServiceUnavailable, "limiter_unavailable", "The rate limiter is unavailable, try again later"),
		keyRequired: answer.NewAnswer(http.StatusForbidden, "key_required", "The request lacks the value it is limited by")}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
	}, nil
}

// globalKey is the one key of a limit without a key function.
var globalKey = limit.StringKey("")

type preparedLimit struct {
	Limit
	answer *answer.Answer
	report *answer.Reporter
	keys   *keycache.Cache // nil: one key for every request
}

type middleware struct {
	o           Options
	limits      []preparedLimit
	ids         *answer.IDSource
	unavailable *answer.Answer
	keyRequired *answer.Answer
}

// scratch is what serve makes for a request that up to scratchLimits
// limits apply to, used again by the requests after it: a request with
// more grows its slices as usual.
type scratch struct {
	req       limit.Request
	limits    [scratchLimits]limit.Limit
	applied   [scratchLimits]int // the limits' places in m.limits
	decisions [scratchLimits]limit.Decision
}

const scratchLimits = 4

var scratches = sync.Pool{New: func() any { return new(scratch) }}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	id := m.ids.Use(r, w, m.o.RequestIDHeader)

	sc := scratches.Get().(*scratch)
	req := &sc.req
	*req = limit.Request{Now: m.o.Now(), Limits: sc.limits[:0], Into: sc.decisions[:]}
	applied := sc.applied[:0]
	for i := range m.limits {
		l := &m.limits[i]
		k := globalKey
		if l.Key != nil {
			v, ok := l.Key(r)
			if !ok {
				if !l.KeyOptional {
					scratches.Put(sc)
					m.keyRequired.Write(w, id, "")
					return
				}
				continue
			}
			k = l.keys.Key(limit.Part{Kind: "k", Value: v})
		}
		if l.Rule.Algorithm == limit.Concurrency && req.Lease == "" {
			req.Lease = m.ids.Next()
		}
		req.Limits = append(req.Limits, limit.Limit{Rule: l.Rule, Key: k})
		applied = append(applied, i)
	}
	if len(req.Limits) == 0 {
		scratches.Put(sc)
		next.ServeHTTP(w, r)
		return
	}
	store := m.o.Store
	res, err := store.Decide(r.Context(), req)
	if err != nil {
		// A store that failed may still be deciding req (a batch that
		// outlived the request's context): nothing of it is used again,
		// and the fallback writes its decisions elsewhere.
		sc = nil
		req.Into = nil
		if m.o.Fallback != nil && errors.Is(err, limit.ErrStoreUnavailable) {
			store = m.o.Fallback
			res, err = store.Decide(r.Context(), req)
		}
	}
	if sc != nil {
		// Last, after the handler and the release of the leases.
		defer scratches.Put(sc)
	}
	if err != nil {
		if m.o.OnError == Allow {
			next.ServeHTTP(w, r)
			return
		}
		m.unavailable.Write(w, id, "")
		return
	}
	if req.Lease != "" {
		// A lease is freed when the response ends, also when the client
		// left early: its context is done then, so the release gets its
		// own.
		defer store.Release(context.WithoutCancel(r.Context()), req.Lease, req.Limits...)
	}

	first := -1 // the limit that rejected the request and gives the answer
	for j := range res.Decisions {
		if d := &res.Decisions[j]; !d.Allowed && !d.Rule.Shadow {
			first = j
			break
		}
	}
	h := w.Header()
	reportable := func(j int) bool { return m.reportable(&m.limits[applied[j]]) }
	reported := answer.Reported(res.Decisions, first, reportable)
	if first >= 0 {
		if reported >= 0 {
			m.limits[applied[reported]].report.Set(h, &res.Decisions[reported])
		}
		h["Retry-After"] = answer.RetryAfterValue(answer.RetryAfter(res.Decisions))
		m.limits[applied[first]].answer.Write(w, id, "")
		return
	}
	if reported >= 0 {
		// The headers are in the map now, for the handler to read, and
		// the writer puts them back when the response head leaves. With
		// no limit to report, the handler's own rate-limit headers stand:
		// there are none of the same name to replace them.
		lw := &limitWriter{ResponseWriter: w}
		lw.values = m.limits[applied[reported]].report.Values(&res.Decisions[reported], &lw.formatted)
		lw.values.Set(h)
		w = lw
		defer lw.send()
	}
	if res.Delay > 0 {
		// A token bucket with a queue admitted the request against a
		// token due later: wait for it, unless the client leaves.
		t := time.NewTimer(res.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	next.ServeHTTP(w, r)
}

func (m *middleware) reportable(l *preparedLimit) bool {
	return !l.NoHeaders && l.Rule.Algorithm != limit.Concurrency
}
