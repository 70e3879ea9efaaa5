package admin

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
)

// historyFixture is a handler whose sampler reads counters the test
// moves, sampled by hand at the times the test gives.
type historyFixture struct {
	t                          *testing.T
	h                          *Handler
	requests, limited, decided *prometheus.CounterVec
	refused                    *prometheus.CounterVec
	duration                   *prometheus.HistogramVec
	protLimit, protAdmitting   *prometheus.GaugeVec
	protRefused                *prometheus.CounterVec
	now                        time.Time
}

const historyConfig = `
admin: {listen: 127.0.0.1:9090, token: tok}
global_limits:
  - {name: everyone, key: [global], rate: 100/s, sync: lease}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - {name: user, key: [header:X-User-Id], rate: 1/10s}
      - {name: whole, key: [route], rate: 50/s}
  - id: open
    match: {path: /open}
    upstream: {targets: ["http://127.0.0.1:9000"]}
`

func newHistoryFixture(t *testing.T) *historyFixture {
	t.Helper()
	return newHistoryFixtureOf(t, func(fb *fakeBackend) Backend { return fb })
}

// newHistoryFixtureOf is newHistoryFixture with the backend backend
// makes of the fake.
func newHistoryFixtureOf(t *testing.T, backend func(*fakeBackend) Backend) *historyFixture {
	t.Helper()
	cfg, err := config.Parse("floodgate.yaml", []byte(historyConfig))
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBackend{}
	fb.cfg.Store(cfg)
	reg := prometheus.NewRegistry()
	f := &historyFixture{
		t:        t,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_http_requests_total"}, []string{"route", "code"}),
		limited:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_rate_limited_total"}, []string{"route", "limit"}),
		decided:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_ratelimit_decisions_total"}, []string{"route", "limit", "result"}),
		refused:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_circuit_breaker_refused_total"}, []string{"route"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gateway_request_duration_seconds",
			Buckets: []float64{.001, .01, .1, 1}}, []string{"route"}),
		protLimit:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gateway_protect_limit"}, []string{"route"}),
		protAdmitting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gateway_protect_admitting"}, []string{"route"}),
		protRefused:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_protect_refused_total"}, []string{"route"}),
		now:           time.Now(),
	}
	reg.MustRegister(f.requests, f.limited, f.decided, f.refused, f.duration, f.protLimit, f.protAdmitting, f.protRefused)
	f.h = NewHandler(backend(fb), reg, slog.New(slog.DiscardHandler))
	t.Cleanup(f.h.Close)
	return f
}

// step moves the clock one sample on and samples.
func (f *historyFixture) step() {
	f.now = f.now.Add(sampleEvery)
	f.h.h.hist.take(f.now)
}

func (f *historyFixture) poll(query string) dashboardJSONForTest {
	f.t.Helper()
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, httptest.NewRequest("GET", "http://127.0.0.1:9090/dashboard.json"+query, nil))
	if w.Code != 200 {
		f.t.Fatalf("dashboard.json%s: %d %s", query, w.Code, w.Body)
	}
	var d dashboardJSONForTest
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		f.t.Fatalf("dashboard.json: %v\n%s", err, w.Body)
	}
	return d
}

type dashboardJSONForTest struct {
	TokenNeeded  bool        `json:"token_needed"`
	GlobalLimits []limitView `json:"global_limits"`
	Routes       []struct {
		Route   string       `json:"route"`
		Limits  []limitView  `json:"limits"`
		Protect *protectView `json:"protect"`
	} `json:"routes"`
	History struct {
		Times  []int64 `json:"times"`
		Global struct {
			Passed []*float64            `json:"passed"`
			Limits map[string][]*float64 `json:"limits"`
		} `json:"global"`
		Series map[string]struct {
			Admitted []*float64            `json:"admitted"`
			Limited  []*float64            `json:"limited"`
			Breaker  []*float64            `json:"breaker"`
			Upstream []*float64            `json:"upstream"`
			P99      []*float64            `json:"p99"`
			Passed   []*float64            `json:"passed"`
			Rejected map[string][]*float64 `json:"rejected"`
			Protect  *struct {
				Limit, Admitting, Forwarded, Refused []*float64
			} `json:"protect"`
		} `json:"series"`
	} `json:"history"`
}

func near(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil || math.Abs(*got-want) > want/100+1e-9 {
		g := "null"
		if got != nil {
			g = string(must(json.Marshal(*got)))
		}
		t.Errorf("%s = %s, want %g", what, g, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// One interval of traffic: the rates by outcome, the latency quantile,
// each limit's 429s and the requests the limit step let through, which
// a limit counted as one (by route or global) consumed.
func TestHistoryRatesOfAnInterval(t *testing.T) {
	f := newHistoryFixture(t)
	f.step()
	// In 2 s, 100 requests on api: 6 turned away by the open breaker
	// with its 503, before the limits; of the 94 that reach the limits,
	// each of which decides all 94, 30 are rejected by user and 10 by
	// everyone; of the 54 that pass, the upstream answers 50 with 200, 2
	// with 502 and 2 with its own 503.
	add := func(c *prometheus.CounterVec, n float64, labels ...string) { c.WithLabelValues(labels...).Add(n) }
	add(f.requests, 50, "api", "200")
	add(f.requests, 40, "api", "429")
	add(f.requests, 8, "api", "503")
	add(f.requests, 2, "api", "502")
	add(f.refused, 6, "api")
	add(f.limited, 30, "api", "user")
	add(f.limited, 10, "api", "everyone")
	for _, l := range []string{"everyone", "user", "whole"} {
		add(f.decided, 94, "api", l, "allowed")
	}
	for range 99 {
		f.duration.WithLabelValues("api").Observe(.005)
	}
	f.duration.WithLabelValues("api").Observe(.5)
	add(f.requests, 20, "open", "200")
	f.step()

	d := f.poll("?route=api&route=open")
	if !d.TokenNeeded {
		t.Error("token_needed is false with admin.token set")
	}
	// The handler sampled once when it started, so the first interval
	// is the quiet one before the traffic.
	if len(d.History.Times) != 2 {
		t.Fatalf("%d points, want 2", len(d.History.Times))
	}
	const i = 1
	api := d.History.Series["api"]
	near(t, "admitted/s", api.Admitted[i], 25)
	near(t, "limited/s", api.Limited[i], 20)
	near(t, "breaker/s", api.Breaker[i], 3)
	near(t, "upstream/s", api.Upstream[i], 2)
	near(t, "user 429/s", api.Rejected["user"][i], 15)
	near(t, "passed/s", api.Passed[i], 27) // (94 - 40) / 2 s
	if p := api.P99[i]; p == nil || *p < .01 || *p > .1 {
		t.Errorf("p99 = %v, want within the 10-100 ms bucket", p)
	}
	if p := d.History.Series["open"].Passed[i]; p != nil {
		t.Errorf("passed of a route without limits = %v, want null", *p)
	}
	near(t, "global passed/s", d.History.Global.Passed[i], 27)
	near(t, "everyone 429/s", d.History.Global.Limits["everyone"][i], 5)
	if _, ok := d.History.Global.Limits["user"]; ok {
		t.Error("global.limits holds user, a route's limit")
	}

	// The limits as the page draws their use.
	if len(d.GlobalLimits) != 1 || d.GlobalLimits[0].Keyed || d.GlobalLimits[0].PerSecond != 100 || !d.GlobalLimits[0].Lease {
		t.Errorf("global_limits = %+v, want everyone, one counter of 100/s", d.GlobalLimits)
	}
	var lims []limitView
	for _, r := range d.Routes {
		if r.Route == "api" {
			lims = r.Limits
		}
	}
	if len(lims) != 2 || lims[0].Name != "user" || !lims[0].Keyed || lims[0].Rate != "1/10s" ||
		lims[0].Lease || lims[1].Name != "whole" || lims[1].Keyed || lims[1].PerSecond != 50 || lims[1].Key[0] != "route" {
		t.Errorf("api's limits = %+v", lims)
	}
}

// The ring keeps 10 minutes, since= answers only what is newer, and a
// route that leaves the metrics leaves the history.
func TestHistoryRingAndSince(t *testing.T) {
	f := newHistoryFixture(t)
	for range historyLen + 20 {
		f.requests.WithLabelValues("api", "200").Add(2)
		f.step()
	}
	d := f.poll("?route=api")
	if n := len(d.History.Times); n != historyLen {
		t.Fatalf("%d points after %d samples, want %d", n, historyLen+21, historyLen)
	}
	for i := 1; i < len(d.History.Times); i++ {
		if d.History.Times[i] <= d.History.Times[i-1] {
			t.Fatalf("times out of order at %d: %d after %d", i, d.History.Times[i], d.History.Times[i-1])
		}
	}
	near(t, "admitted/s", d.History.Series["api"].Admitted[historyLen-1], 1)
	since := d.History.Times[historyLen-3]
	d = f.poll("?route=api&since=" + string(must(json.Marshal(since))))
	if len(d.History.Times) != 2 || len(d.History.Series["api"].Admitted) != 2 {
		t.Errorf("since the third newest: %d points, want 2", len(d.History.Times))
	}

	f.requests.DeleteLabelValues("api", "200")
	f.step()
	if d = f.poll("?route=api"); d.History.Series["api"].Admitted != nil {
		t.Error("a route gone from the metrics still has a history")
	}
}

// The history written by hand is what encoding/json writes of the same
// value (the struct tags and MarshalJSON methods are its reference),
// escapes included: a route id reaches the page.
func TestHistoryJSONByHand(t *testing.T) {
	f := newHistoryFixture(t)
	for k := range 5 {
		f.requests.WithLabelValues("api", "200").Add(float64(k))
		f.requests.WithLabelValues("a<b>&\"c\"", "503").Add(1)
		f.limited.WithLabelValues("api", "user").Add(float64(k))
		f.limited.WithLabelValues("api", "everyone").Add(1)
		f.protLimit.WithLabelValues("api").Set(40 + float64(k))
		f.protRefused.WithLabelValues("api").Add(float64(k))
		f.step()
	}
	h := f.h.h.hist.snapshot(0, []string{"api", "a<b>&\"c\"", "gone"}, []string{"everyone", "missing"})
	want, err := json.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.appendJSON(nil); string(got) != string(want) {
		t.Errorf("by hand:\n%s\nencoding/json:\n%s", got, want)
	}
	empty := f.h.h.hist.snapshot(math.MaxInt64, nil, nil)
	want, _ = json.Marshal(&empty)
	if got := empty.appendJSON(nil); string(got) != string(want) {
		t.Errorf("nothing newer than since, by hand:\n%s\nencoding/json:\n%s", got, want)
	}
}
