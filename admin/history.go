package admin

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The dashboard's history: every sampleEvery the sampler reads the same
// gatherer /metrics exposes and keeps, per route, the rates and latency
// quantiles of the interval since the previous sample, for the last
// historyLen samples (10 minutes), so that the page draws charts the
// moment it opens. Values are float32: a chart needs three digits, and it
// halves the memory. With 1,000 routes of two limits each a sample is
// 1,000 × (9 + 2×1) × 4 B = 44 KB, and the ring of 300 samples 13 MB;
// a route that leaves the config leaves the ring at the next sample. A
// protected route keeps 4 values more (dashprotect.go), 5 KB a route.
const (
	sampleEvery = 2 * time.Second
	historyLen  = 300
)

// routePoint is one route's interval between two samples.
type routePoint struct {
	Admitted, Limited, Breaker, Upstream, Client4xx, Other float32 // requests/s
	P50, P99                                               float32 // seconds; NaN without requests
	BreakerState                                           float32 // 0 closed, 1 open, 2 half-open, NaN without a breaker
	// Passed are the requests/s the limit step let through, NaN for a
	// route without limits: what each limit of the route consumed, since
	// a rejected request consumes nothing from any limit.
	Passed float32
}

// globalPoint is the interval's gateway-wide numbers.
type globalPoint struct {
	StoreP99, StoreErrors, LocalShare      float32
	EventsRecorded, EventsDropped, Spooled float32
	Passed                                 float32 // summed over the routes: what a global limit consumed
}

// sample is what one reading of the gatherer keeps: the counters, to
// difference with the next one.
type sample struct {
	at                         time.Time
	codes                      map[string]map[string]float64 // route -> code -> count
	rejected                   map[string]map[string]float64 // route -> limit -> count
	decided                    map[string]map[string]float64 // route -> limit -> decisions, whatever the result
	refused                    map[string]float64            // route -> requests the open breaker answered
	buckets                    map[string][]bucket           // route -> cumulative buckets
	store                      []bucket
	storeErr, decisions, local float64
	recorded, dropped, spooled float64
	reloadOK, reloadTime       float64
	haveReload                 bool
	// What the dashboard's answer shows as counted, besides.
	reloads map[string]float64            // result -> count
	events  map[string]float64            // type/result -> count
	rls     map[string]map[string]float64 // domain -> code -> count
	// Protection (dashprotect.go): route -> its limit, what it admits
	// now, its refusals.
	protLimit, protAdmitting, protRefused map[string]float64
}

type bucket struct{ le, n float64 }

type routeRing struct {
	points  []routePoint         // ring, aligned with history.times
	limits  map[string][]float32 // limit -> 429/s it answered
	protect []protectPoint       // ring; nil for a route without protection
}

type history struct {
	gatherer prometheus.Gatherer
	// fallback gives each route's breaker fallback status, under which
	// the breaker's answers are counted in gateway_http_requests_total;
	// nil: 503.
	fallback func() map[string]int
	mu       sync.Mutex
	last     *sample
	times    []int64 // Unix ms of each point's end; ring of historyLen
	next     int     // where the next point goes
	n        int     // points held
	global   []globalPoint
	routes   map[string]*routeRing
	// named sums each limit name over the routes: a global limit's
	// rates, whichever route the requests took.
	named map[string][]float32
	// latest are the rates of the newest interval, for the summary.
	latest map[string]routePoint
	stop   chan struct{}
	done   chan struct{}
}

func newHistory(g prometheus.Gatherer, fallback func() map[string]int) *history {
	h := &history{
		gatherer: g, fallback: fallback, times: make([]int64, historyLen), global: make([]globalPoint, historyLen),
		routes: map[string]*routeRing{}, named: map[string][]float32{}, latest: map[string]routePoint{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	h.take(time.Now())
	go h.run()
	return h
}

func (h *history) run() {
	defer close(h.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			h.take(now)
		}
	}
}

func (h *history) close() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// read gathers one sample.
func read(g prometheus.Gatherer, now time.Time) *sample {
	s := &sample{
		at: now, codes: map[string]map[string]float64{}, rejected: map[string]map[string]float64{},
		decided: map[string]map[string]float64{}, refused: map[string]float64{}, buckets: map[string][]bucket{},
		reloads: map[string]float64{}, events: map[string]float64{}, rls: map[string]map[string]float64{},
		protLimit: map[string]float64{}, protAdmitting: map[string]float64{}, protRefused: map[string]float64{},
	}
	families, _ := g.Gather() // what it could: a failing collector costs its own numbers
	for _, f := range families {
		name := f.GetName()
		for _, m := range f.GetMetric() {
			switch name {
			case "gateway_http_requests_total":
				route, code := label(m, "route"), label(m, "code")
				if s.codes[route] == nil {
					s.codes[route] = map[string]float64{}
				}
				s.codes[route][code] += m.GetCounter().GetValue()
			case "gateway_rate_limited_total":
				route := label(m, "route")
				if s.rejected[route] == nil {
					s.rejected[route] = map[string]float64{}
				}
				s.rejected[route][label(m, "limit")] += m.GetCounter().GetValue()
			case "gateway_request_duration_seconds":
				s.buckets[label(m, "route")] = buckets(m.GetHistogram())
			case "gateway_ratelimit_store_duration_seconds":
				s.store = buckets(m.GetHistogram())
			case "gateway_circuit_breaker_refused_total":
				s.refused[label(m, "route")] += m.GetCounter().GetValue()
			case "gateway_ratelimit_store_errors_total":
				s.storeErr += m.GetCounter().GetValue()
			case "gateway_ratelimit_decisions_total":
				s.decisions += m.GetCounter().GetValue()
				route := label(m, "route")
				if s.decided[route] == nil {
					s.decided[route] = map[string]float64{}
				}
				s.decided[route][label(m, "limit")] += m.GetCounter().GetValue()
			case "gateway_ratelimit_local_answers_total":
				s.local += m.GetCounter().GetValue()
			case "gateway_config_reloads_total":
				s.reloads[label(m, "result")] += m.GetCounter().GetValue()
			case "gateway_rls_requests_total":
				d := label(m, "domain")
				if s.rls[d] == nil {
					s.rls[d] = map[string]float64{}
				}
				s.rls[d][label(m, "code")] += m.GetCounter().GetValue()
			case "gateway_events_total":
				s.events[label(m, "type")+"/"+label(m, "result")] += m.GetCounter().GetValue()
				switch label(m, "result") {
				case "recorded":
					s.recorded += m.GetCounter().GetValue()
				case "dropped":
					s.dropped += m.GetCounter().GetValue()
				}
			case "gateway_events_spooled":
				s.spooled += m.GetGauge().GetValue()
			case "gateway_config_last_reload_success":
				s.reloadOK, s.haveReload = m.GetGauge().GetValue(), true
			case "gateway_config_last_reload_timestamp_seconds":
				s.reloadTime = m.GetGauge().GetValue()
			case "gateway_protect_limit":
				s.protLimit[label(m, "route")] = m.GetGauge().GetValue()
			case "gateway_protect_admitting":
				s.protAdmitting[label(m, "route")] = m.GetGauge().GetValue()
			case "gateway_protect_refused_total":
				s.protRefused[label(m, "route")] += m.GetCounter().GetValue()
			}
		}
	}
	return s
}

func label(m *dto.Metric, name string) string {
	for _, p := range m.GetLabel() {
		if p.GetName() == name {
			return p.GetValue()
		}
	}
	return ""
}

func buckets(hg *dto.Histogram) []bucket {
	bs := make([]bucket, 0, len(hg.GetBucket())+1)
	for _, b := range hg.GetBucket() {
		bs = append(bs, bucket{b.GetUpperBound(), float64(b.GetCumulativeCount())})
	}
	return append(bs, bucket{math.Inf(1), float64(hg.GetSampleCount())})
}

// quantile interpolates q linearly within the bucket of the interval's
// deltas (cur - prev) that holds it, as Prometheus' histogram_quantile
// does; NaN without observations. A quantile in the +Inf bucket is the
// highest finite bound.
func quantile(q float64, cur, prev []bucket) float64 {
	if len(cur) == 0 {
		return math.NaN()
	}
	delta := func(i int) float64 {
		d := cur[i].n
		if len(prev) == len(cur) {
			d -= prev[i].n
		}
		return max(d, 0)
	}
	total := delta(len(cur) - 1)
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	lo, below := 0.0, 0.0
	for i := range cur {
		n := delta(i)
		if n >= rank {
			if math.IsInf(cur[i].le, 1) {
				return lo
			}
			if n == below {
				return cur[i].le
			}
			return lo + (cur[i].le-lo)*(rank-below)/(n-below)
		}
		lo, below = cur[i].le, n
	}
	return lo
}

func diff(cur, prev float64, secs float64) float32 {
	return float32(max(cur-prev, 0) / secs)
}

// total is every answer of the interval, per second.
func (p *routePoint) total() float32 {
	return p.Admitted + p.Limited + p.Breaker + p.Upstream + p.Client4xx + p.Other
}

// class is the outcome an HTTP status counts under: Upstream holds the
// 5xx, the upstream's own and those the gateway sends for it (502, 504)
// or for its store (503 under on_error: deny). The breaker's
// answers are not told by their status, which an upstream may send too:
// take moves them from their status's outcome to Breaker.
func (p *routePoint) class(code string) *float32 {
	switch {
	case code == "429":
		return &p.Limited
	case strings.HasPrefix(code, "5"):
		return &p.Upstream
	case strings.HasPrefix(code, "2") || strings.HasPrefix(code, "3"):
		return &p.Admitted
	case strings.HasPrefix(code, "4"):
		return &p.Client4xx
	}
	return &p.Other
}

// take reads the gatherer at now and adds the interval since the last
// sample to the ring. breakers are read by the caller of points, not here:
// a breaker's state is the backend's, and its series is 0/1/2 on /metrics.
func (h *history) take(now time.Time) {
	s := read(h.gatherer, now)
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.last
	h.last = s
	if prev == nil {
		return
	}
	secs := s.at.Sub(prev.at).Seconds()
	if secs <= 0 {
		return
	}
	i := h.next
	h.times[i] = now.UnixMilli()
	h.next = (i + 1) % historyLen
	h.n = min(h.n+1, historyLen)
	g := globalOf(s, prev, secs)
	var fallbacks map[string]int
	if h.fallback != nil {
		fallbacks = h.fallback()
	}
	seen := s.routes()
	latest := make(map[string]routePoint, len(seen))
	named := map[string]float32{}
	for route := range seen {
		p := routeOf(s, prev, route, secs, fallbacks)
		rr := h.ring(route)
		p.Passed = rr.takeLimits(s, prev, route, secs, i, named)
		if !isNaN32(p.Passed) {
			g.Passed += p.Passed
		}
		rr.takeProtect(s, prev, route, &p, secs, i)
		rr.points[i] = p
		latest[route] = p
	}
	for route := range h.routes {
		if !seen[route] {
			delete(h.routes, route)
		}
	}
	h.global[i] = g
	h.keepNamed(named, i)
	h.latest = latest
}

// globalOf is the gateway-wide point of the interval from prev to s, but
// for Passed, which the routes add up.
func globalOf(s, prev *sample, secs float64) globalPoint {
	g := globalPoint{
		StoreP99:       float32(quantile(.99, s.store, prev.store)),
		StoreErrors:    diff(s.storeErr, prev.storeErr, secs),
		LocalShare:     float32(math.NaN()),
		EventsRecorded: diff(s.recorded, prev.recorded, secs),
		EventsDropped:  diff(s.dropped, prev.dropped, secs),
		Spooled:        float32(s.spooled),
	}
	if d := s.decisions - prev.decisions; d > 0 {
		g.LocalShare = float32(max(s.local-prev.local, 0) / d)
	}
	return g
}

// routes are the routes the sample has answers or latencies of, and the
// protected ones, whose limit is drawn before their first request.
func (s *sample) routes() map[string]bool {
	seen := map[string]bool{}
	for route := range s.codes {
		seen[route] = true
	}
	for route := range s.buckets {
		seen[route] = true
	}
	for route := range s.protLimit {
		seen[route] = true
	}
	return seen
}

// routeOf is route's point of the interval from prev to s, but for
// Passed; fallbacks give each route's breaker fallback status.
func routeOf(s, prev *sample, route string, secs float64, fallbacks map[string]int) routePoint {
	var p routePoint
	for code, n := range s.codes[route] {
		*p.class(code) += diff(n, prev.codes[route][code], secs)
	}
	if b := diff(s.refused[route], prev.refused[route], secs); b > 0 {
		status := "503"
		if st, ok := fallbacks[route]; ok {
			status = strconv.Itoa(st)
		}
		c := p.class(status)
		b = min(b, *c)
		*c -= b
		p.Breaker = b
	}
	p.P50 = float32(quantile(.5, s.buckets[route], prev.buckets[route]))
	p.P99 = float32(quantile(.99, s.buckets[route], prev.buckets[route]))
	p.BreakerState = float32(math.NaN())
	return p
}

// ring is route's ring, made when first needed.
func (h *history) ring(route string) *routeRing {
	rr := h.routes[route]
	if rr == nil {
		rr = &routeRing{points: make([]routePoint, historyLen), limits: map[string][]float32{}}
		nan := routePoint{Admitted: nan32, Limited: nan32, Breaker: nan32, Upstream: nan32, Client4xx: nan32, Other: nan32, P50: nan32, P99: nan32, BreakerState: nan32, Passed: nan32}
		for j := range rr.points {
			rr.points[j] = nan
		}
		h.routes[route] = rr
	}
	return rr
}

// takeLimits puts each limit's 429/s of the interval at i, adds them to
// named, and returns the requests/s the route's limit step let through
// (NaN for a route without limits).
func (rr *routeRing) takeLimits(s, prev *sample, route string, secs float64, i int, named map[string]float32) float32 {
	for _, ring := range rr.limits {
		ring[i] = nan32
	}
	var stopped float32
	for lim, n := range s.rejected[route] {
		r := diff(n, prev.rejected[route][lim], secs)
		rr.limit(lim)[i] = r
		named[lim] += r
		stopped += r
	}
	// Every limit of a request that reaches the limit step is
	// decided, so any one limit's decisions count the requests that
	// reached it; the most decided one stands for them, in case a
	// Cluster's slot-by-slot calls skipped some.
	passed := nan32
	for lim, n := range s.decided[route] {
		if d := diff(n, prev.decided[route][lim], secs); isNaN32(passed) || d > passed {
			passed = d
		}
	}
	if isNaN32(passed) {
		return passed
	}
	return max(passed-stopped, 0)
}

// keepNamed puts each limit name's 429/s summed over the routes at i,
// and forgets the names no route has any more.
func (h *history) keepNamed(named map[string]float32, i int) {
	for lim, sum := range named {
		ring := h.named[lim]
		if ring == nil {
			ring = nanRing()
			h.named[lim] = ring
		}
		ring[i] = sum
	}
	for lim := range h.named {
		if _, ok := named[lim]; !ok {
			delete(h.named, lim)
		}
	}
}

// limit is the ring of the limit name, made when first needed.
func (rr *routeRing) limit(name string) []float32 {
	ring := rr.limits[name]
	if ring == nil {
		ring = nanRing()
		rr.limits[name] = ring
	}
	return ring
}

func isNaN32(f float32) bool { return f != f }

var nan32 = float32(math.NaN())

func nanRing() []float32 {
	r := make([]float32, historyLen)
	for i := range r {
		r[i] = nan32
	}
	return r
}

// order is the ring's indexes from oldest to newest, newer than since
// (Unix ms).
func (h *history) order(since int64) []int {
	idx := make([]int, 0, h.n)
	for k := range h.n {
		i := (h.next - h.n + k + historyLen) % historyLen
		if h.times[i] > since {
			idx = append(idx, i)
		}
	}
	return idx
}

// seriesJSON is one route's history as the page reads it: one array per
// line, aligned with the times of the answer; null where nothing was
// measured.
type seriesJSON struct {
	Admitted  series            `json:"admitted"`
	Limited   series            `json:"limited"`
	Breaker   series            `json:"breaker"`
	Upstream  series            `json:"upstream"`
	Client4xx series            `json:"client_4xx"`
	Other     series            `json:"other"`
	P50       series            `json:"p50"`
	P99       series            `json:"p99"`
	Passed    series            `json:"passed"`   // what the route's limits consumed
	Rejected  map[string]series `json:"rejected"` // limit -> 429/s it answered
	// Protect is a protected route's protection (dashprotect.go).
	Protect *protectJSON `json:"protect,omitempty"`
}

type globalJSON struct {
	StoreP99       series `json:"store_p99"`
	StoreErrors    series `json:"store_errors"`
	LocalShare     series `json:"local_share"`
	EventsRecorded series `json:"events_recorded"`
	EventsDropped  series `json:"events_dropped"`
	Spooled        series `json:"spooled"`
	Passed         series `json:"passed"` // what a global limit consumed
	// Limits are the global limits' 429/s, summed over the routes.
	Limits map[string]series `json:"limits"`
}

// jf is a float32 that marshals as a short number, or null for NaN.
type jf float32

func (f jf) MarshalJSON() ([]byte, error) { return f.append(nil), nil }

func (f jf) append(b []byte) []byte {
	if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, float64(f), 'g', 4, 32)
}

// series is one line of a chart. It marshals into one buffer: a value at
// a time through jf's MarshalJSON costs an allocation per point.
type series []jf

func (s series) MarshalJSON() ([]byte, error) { return s.appendJSON(make([]byte, 0, 2+8*len(s))), nil }

func (s series) appendJSON(b []byte) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, f := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = f.append(b)
	}
	return append(b, ']')
}

// appendJSON writes h as encoding/json would, field for field in the
// order of the structs' tags, without its second pass over the output.
func (h *historyJSON) appendJSON(b []byte) []byte {
	b = append(b, `{"interval":`...)
	b = strconv.AppendFloat(b, h.Interval, 'g', -1, 64)
	b = append(b, `,"times":[`...)
	for i, t := range h.Times {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, t, 10)
	}
	g := &h.Global
	b = append(b, `],"global":{`...)
	b = field(b, "store_p99", g.StoreP99, false)
	b = field(b, "store_errors", g.StoreErrors, true)
	b = field(b, "local_share", g.LocalShare, true)
	b = field(b, "events_recorded", g.EventsRecorded, true)
	b = field(b, "events_dropped", g.EventsDropped, true)
	b = field(b, "spooled", g.Spooled, true)
	b = field(b, "passed", g.Passed, true)
	b = append(b, `,"limits":`...)
	b = appendSeriesMap(b, g.Limits)
	b = append(b, `},"series":{`...)
	first := true
	for _, route := range slices.Sorted(maps.Keys(h.Series)) {
		s := h.Series[route]
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, route)
		b = append(b, ":{"...)
		b = field(b, "admitted", s.Admitted, false)
		b = field(b, "limited", s.Limited, true)
		b = field(b, "breaker", s.Breaker, true)
		b = field(b, "upstream", s.Upstream, true)
		b = field(b, "client_4xx", s.Client4xx, true)
		b = field(b, "other", s.Other, true)
		b = field(b, "p50", s.P50, true)
		b = field(b, "p99", s.P99, true)
		b = field(b, "passed", s.Passed, true)
		b = append(b, `,"rejected":`...)
		b = appendSeriesMap(b, s.Rejected)
		if s.Protect != nil {
			b = append(b, `,"protect":`...)
			b = s.Protect.appendJSON(b)
		}
		b = append(b, '}')
	}
	return append(b, "}}"...)
}

func field(b []byte, name string, s series, comma bool) []byte {
	if comma {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	b = append(b, `":`...)
	return s.appendJSON(b)
}

func appendSeriesMap(b []byte, m map[string]series) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = m[k].appendJSON(b)
	}
	return append(b, '}')
}

// appendString writes s as a JSON string, escaped as encoding/json does:
// a route id or a limit name is the config's, but the page is HTML.
func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

type historyJSON struct {
	Interval float64                `json:"interval"` // seconds between samples
	Times    []int64                `json:"times"`    // Unix ms
	Global   globalJSON             `json:"global"`
	Series   map[string]*seriesJSON `json:"series"`
}

// snapshot returns the points newer than since for the routes asked, and
// for the global limits named.
func (h *history) snapshot(since int64, routes, globals []string) historyJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	idx := h.order(since)
	out := historyJSON{Interval: sampleEvery.Seconds(), Times: make([]int64, len(idx)), Series: map[string]*seriesJSON{}}
	g := &out.Global
	g.Limits = map[string]series{}
	for _, name := range globals {
		if ring := h.named[name]; ring != nil {
			g.Limits[name] = pick(ring, idx)
		}
	}
	for k, i := range idx {
		out.Times[k] = h.times[i]
		p := h.global[i]
		g.StoreP99 = append(g.StoreP99, jf(p.StoreP99))
		g.StoreErrors = append(g.StoreErrors, jf(p.StoreErrors))
		g.LocalShare = append(g.LocalShare, jf(p.LocalShare))
		g.EventsRecorded = append(g.EventsRecorded, jf(p.EventsRecorded))
		g.EventsDropped = append(g.EventsDropped, jf(p.EventsDropped))
		g.Spooled = append(g.Spooled, jf(p.Spooled))
		g.Passed = append(g.Passed, jf(p.Passed))
	}
	for _, route := range routes {
		rr := h.routes[route]
		if rr == nil {
			continue
		}
		s := &seriesJSON{Rejected: map[string]series{}}
		for _, i := range idx {
			p := rr.points[i]
			s.Admitted = append(s.Admitted, jf(p.Admitted))
			s.Limited = append(s.Limited, jf(p.Limited))
			s.Breaker = append(s.Breaker, jf(p.Breaker))
			s.Upstream = append(s.Upstream, jf(p.Upstream))
			s.Client4xx = append(s.Client4xx, jf(p.Client4xx))
			s.Other = append(s.Other, jf(p.Other))
			s.P50 = append(s.P50, jf(p.P50))
			s.P99 = append(s.P99, jf(p.P99))
			s.Passed = append(s.Passed, jf(p.Passed))
		}
		for lim, ring := range rr.limits {
			s.Rejected[lim] = pick(ring, idx)
		}
		s.Protect = rr.protectSeries(idx)
		out.Series[route] = s
	}
	return out
}

// pick is the ring's points at idx.
func pick(ring []float32, idx []int) series {
	vs := make(series, len(idx))
	for k, i := range idx {
		vs[k] = jf(ring[i])
	}
	return vs
}

// summaryJSON is a route's newest interval, for the table of all routes.
type summaryJSON struct {
	Rate     jf `json:"rate"` // every answer, per second
	Admitted jf `json:"admitted"`
	Limited  jf `json:"limited"`
	Breaker  jf `json:"breaker"`
	Upstream jf `json:"upstream"`
	P99      jf `json:"p99"`
}

func (h *history) summaries() map[string]summaryJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]summaryJSON, len(h.latest))
	for route, p := range h.latest {
		out[route] = summaryJSON{
			Rate:     jf(p.total()),
			Admitted: jf(p.Admitted), Limited: jf(p.Limited), Breaker: jf(p.Breaker), Upstream: jf(p.Upstream), P99: jf(p.P99),
		}
	}
	return out
}

// counted calls f with the newest sample, under the history's lock: f
// must copy what it keeps.
func (h *history) counted(f func(s *sample)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last != nil {
		f(h.last)
	}
}

// reloadInfo is the last load or reload of the config, from its gauges.
func (h *history) reloadInfo() (ok bool, at float64, known bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last == nil {
		return false, 0, false
	}
	return h.last.reloadOK == 1, h.last.reloadTime, h.last.haveReload
}
