package gateway

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/internal/jwtverify"
)

// Metrics are the gateway's Prometheus series (docs/metrics.md). One Metrics
// lives as long as the process: a reload keeps every counter.
type Metrics struct {
	requests       *prometheus.CounterVec
	grpcResponses  *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	rateLimited    *prometheus.CounterVec
	decisions      *prometheus.CounterVec
	storeDuration  prometheus.Histogram
	storeErrors    prometheus.Counter
	reloads        *prometheus.CounterVec
	reloadSuccess  prometheus.Gauge
	reloadTime     prometheus.Gauge
	logsSuppressed prometheus.Counter
	breakerState   *prometheus.GaugeVec
	breakerChanges *prometheus.CounterVec
	// protectLimit, protectBaseline and protectRefused are the routes'
	// protection: the limit learned, the healthy latency, and the requests
	// turned away.
	protectLimit, protectBaseline *prometheus.GaugeVec
	protectRefused                *prometheus.CounterVec
	// protectAdmitting, protectInFlight and protectFallback are what this
	// instance admits of the limit, its requests in flight, and 1 while
	// a fleet's protection decides alone.
	protectAdmitting, protectInFlight, protectFallback *prometheus.GaugeVec
	// protectQueued and protectRefusedLevel: with priority, the requests
	// waiting for room, and those turned away by level.
	protectQueued       *prometheus.GaugeVec
	protectRefusedLevel *prometheus.CounterVec
	// breakerRefused counts the requests an open breaker answered.
	breakerRefused *prometheus.CounterVec
	// breakerFallback is 1 for a fleet breaker deciding on this
	// instance's window.
	breakerFallback *prometheus.GaugeVec
	jwtFailures     map[jwtverify.Reason]prometheus.Counter
	framingRefused  *prometheus.CounterVec
	localAnswers    *prometheus.CounterVec
	accessDropped   prometheus.Counter
	spansDropped    prometheus.Counter
	fleetIgnored    *prometheus.CounterVec

	overrides, overridesVersion prometheus.Gauge
}

// NewMetrics registers the gateway's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_http_requests_total", Help: "Requests answered, by route and HTTP status.",
		}, []string{"route", "code"}),
		grpcResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_grpc_responses_total", Help: "gRPC requests answered, by route and the grpc-status sent (its code name; other: none, or not a known code).",
		}, []string{"route", "grpc_status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_request_duration_seconds", Help: "Time from a request's arrival to the end of its response.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rate_limited_total", Help: "Requests rejected, by the limit that gave the status.",
		}, []string{"route", "limit"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_ratelimit_decisions_total", Help: "Limit decisions: allowed, rejected, shadow_rejected (a shadow limit that would have rejected) or error (decided by on_error).",
		}, []string{"route", "limit", "result"}),
		storeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_ratelimit_store_duration_seconds", Help: "Time of one store decision (one round trip for Redis).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_ratelimit_store_errors_total", Help: "Store decisions that failed and were decided by on_error.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_config_reloads_total", Help: "Configuration reloads, by result (ok or error).",
		}, []string{"result"}),
		reloadSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_config_last_reload_success", Help: "1 when the last load or reload of the configuration succeeded, 0 when it was refused and the previous configuration still serves.",
		}),
		reloadTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_config_last_reload_timestamp_seconds", Help: "Unix time of the last load or reload attempt of the configuration, whatever its result.",
		}),
		logsSuppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_rejection_logs_suppressed_total", Help: "Rejection log lines not written because of the per-route, per-limit sampling.",
		}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_circuit_breaker_state", Help: "Circuit breaker state by route: 0 closed, 1 open, 2 half-open.",
		}, []string{"route"}),
		breakerChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_circuit_breaker_transitions_total", Help: "Circuit breaker transitions.",
		}, []string{"route", "from", "to"}),
		breakerRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_circuit_breaker_refused_total", Help: "Requests the route's open breaker answered with its fallback instead of the upstream.",
		}, []string{"route"}),
		protectLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_protect_limit", Help: "The requests a second a route's protection admits to its upstream: what it learned the upstream can take now (protect).",
		}, []string{"route"}),
		protectBaseline: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_protect_baseline_seconds", Help: "A protected route's upstream's healthy latency: the lowest median of the last minute's intervals; 0 until learned.",
		}, []string{"route"}),
		protectAdmitting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_protect_admitting", Help: "The requests a second this instance admits to a protected route's upstream: the limit, less during a warm-up; with the Redis store, this instance's share of the fleet's limit.",
		}, []string{"route"}),
		protectInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_protect_in_flight", Help: "Requests this instance admitted to a protected route's upstream that have not been answered yet, at the last interval's end.",
		}, []string{"route"}),
		protectFallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_protect_fleet_fallback", Help: "1 while a protected route on the Redis store protects on this instance's own because the fleet's reports, in Redis, are out of reach; 0 while it shares the fleet's limit.",
		}, []string{"route"}),
		protectQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_protect_queued", Help: "Requests waiting for room under a protected route's limit (protect.priority, at most max_wait each), at the last interval's end.",
		}, []string{"route"}),
		protectRefusedLevel: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_protect_refused_by_level_total", Help: "Requests a protected route with priority turned away, by level (protect.priority.levels): the lowest levels are turned away first.",
		}, []string{"route", "level"}),
		protectRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_protect_refused_total", Help: "Requests a route's protection turned away (503 overloaded) because its upstream was at the limit learned for it.",
		}, []string{"route"}),
		breakerFallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_breaker_fleet_fallback", Help: "1 while a breaker of scope fleet decides on this instance's own window because the fleet's, in Redis, is out of reach; 0 while it follows the fleet.",
		}, []string{"route"}),
		framingRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_framing_refused_total", Help: "Requests refused because their framing was in doubt (Transfer-Encoding with Content-Length, a bad chunk, obs-fold...), by reason; their connections were closed.",
		}, []string{"reason"}),
		localAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_ratelimit_local_answers_total", Help: "Rejections the instance answered without a store call, by the limit that rejected: from its memory of keys known to be exhausted (store.local_rejects), or from a leased slice of a window with nothing left (sync: lease); each is also a rejected decision.",
		}, []string{"route", "limit"}),
	}
	m.accessDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gateway_access_log_dropped_total", Help: "Access log lines dropped because the queue to the writer was full (a file that could not keep up).",
	})
	m.spansDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gateway_trace_spans_dropped_total", Help: "Trace spans not exported: the export queue was full, the OTLP endpoint failed or refused them, or shutdown left them queued.",
	})
	m.fleetIgnored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_fleet_messages_ignored_total", Help: "Messages on the store's control channel not carried out because they were not floodgate's fleet actions, by reason: too_large, malformed, unknown_kind.",
	}, []string{"reason"})
	m.overrides = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gateway_overrides", Help: "Runtime overrides in force on this instance.",
	})
	m.overridesVersion = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gateway_overrides_version", Help: "Version of the set of runtime overrides this instance applied; instances that agree show the same.",
	})
	jwtFailures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_jwt_failures_total", Help: "Bearer tokens not accepted for jwt: key parts and claim overrides, by reason; their parts are missing.",
	}, []string{"reason"})
	reg.MustRegister(m.requests, m.grpcResponses, m.duration, m.rateLimited, m.decisions, m.storeDuration,
		m.storeErrors, m.reloads, m.reloadSuccess, m.reloadTime, m.logsSuppressed, m.breakerState, m.breakerChanges, m.breakerRefused, m.breakerFallback, m.protectLimit, m.protectBaseline, m.protectRefused, m.protectAdmitting, m.protectInFlight, m.protectFallback, m.protectQueued, m.protectRefusedLevel, jwtFailures, m.framingRefused, m.localAnswers, m.accessDropped, m.spansDropped, m.fleetIgnored, m.overrides, m.overridesVersion)
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	for _, r := range []string{"too_large", "malformed", "unknown_kind"} {
		m.fleetIgnored.WithLabelValues(r)
	}
	// Every reason's series exists from the start, so that a rate over it
	// is 0 rather than absent before the first failure.
	m.jwtFailures = map[jwtverify.Reason]prometheus.Counter{}
	for _, r := range jwtverify.Reasons() {
		m.jwtFailures[r] = jwtFailures.WithLabelValues(string(r))
	}
	return m
}

// loaded sets the gauges that say how the last load or reload of the
// configuration, at now, went.
func (m *Metrics) loaded(ok bool, now time.Time) {
	success := 0.0
	if ok {
		success = 1
	}
	m.reloadSuccess.Set(success)
	m.reloadTime.Set(float64(now.UnixNano()) / 1e9)
}

// reloaded counts a reload attempt at now, and sets the gauges.
func (m *Metrics) reloaded(ok bool, now time.Time) {
	result := "error"
	if ok {
		result = "ok"
	}
	m.reloads.WithLabelValues(result).Inc()
	m.loaded(ok, now)
}

// routeMetrics holds one route's series, resolved once so that a request
// never looks a label set up in a map.
type routeMetrics struct {
	m        *Metrics
	route    string
	duration prometheus.Observer
	codes    [600]atomic.Pointer[prometheus.Counter]
	grpc     [grpcOther + 1]atomic.Pointer[prometheus.Counter] // by grpcCodeIndex
	refused  atomic.Pointer[prometheus.Counter]                // by the open breaker; made with the first
}

func (m *Metrics) forRoute(route string) *routeMetrics {
	return &routeMetrics{m: m, route: route, duration: m.duration.WithLabelValues(route)}
}

func (rm *routeMetrics) count(status int) {
	if status < 100 || status >= 600 {
		status = 599
	}
	c := rm.codes[status].Load()
	if c == nil {
		cc := rm.m.requests.WithLabelValues(rm.route, strconv.Itoa(status))
		rm.codes[status].Store(&cc)
		c = &cc
	}
	(*c).Inc()
}

// countRefused counts a request the open breaker answered.
func (rm *routeMetrics) countRefused() {
	c := rm.refused.Load()
	if c == nil {
		cc := rm.m.breakerRefused.WithLabelValues(rm.route)
		rm.refused.Store(&cc)
		c = &cc
	}
	(*c).Inc()
}

// count counts the answer of x, sent on w with status, in rm: by its
// status, and a gRPC request's by its grpc-status too.
func (x *exchange) count(w http.ResponseWriter, rm *routeMetrics, status int) {
	rm.count(status)
	if x.grpc {
		rm.countGRPC(grpcStatusOf(w.Header()))
	}
}

// countGRPC counts a gRPC request's answer by the grpc-status v it was
// sent with ("" for none).
func (rm *routeMetrics) countGRPC(v string) {
	i := grpcCodeIndex(v)
	c := rm.grpc[i].Load()
	if c == nil {
		name := "other"
		if i < grpcOther {
			name = grpcCodeNames[i]
		}
		cc := rm.m.grpcResponses.WithLabelValues(rm.route, name)
		rm.grpc[i].Store(&cc)
		c = &cc
	}
	(*c).Inc()
}

// limitMetrics holds one limit's series on one route.
type limitMetrics struct {
	rateLimited prometheus.Counter
	allowed     prometheus.Counter
	rejected    prometheus.Counter
	shadow      prometheus.Counter
	errored     prometheus.Counter
	local       prometheus.Counter
}

func (m *Metrics) forLimit(route, name string) *limitMetrics {
	return &limitMetrics{
		rateLimited: m.rateLimited.WithLabelValues(route, name),
		allowed:     m.decisions.WithLabelValues(route, name, "allowed"),
		rejected:    m.decisions.WithLabelValues(route, name, "rejected"),
		shadow:      m.decisions.WithLabelValues(route, name, "shadow_rejected"),
		errored:     m.decisions.WithLabelValues(route, name, "error"),
		local:       m.localAnswers.WithLabelValues(route, name),
	}
}
