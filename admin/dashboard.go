package admin

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/config"
)

// The dashboard, at /, is one static page that polls /dashboard.json
// every 2 s and draws the history the sampler keeps (history.go). The
// numbers are the ones /metrics exposes, read from the same gatherer, so
// the page and a Prometheus server never disagree; like /metrics, both
// are open to whoever reaches the admin listener.

// dashboardData is what the page draws from: counters since the process
// started, and the breakers' states now.
type dashboardData struct {
	Time int64 `json:"time"` // Unix ms
	// CountedAt is when the counters below were read (Unix ms): the
	// dashboard's sampler reads them every 2 s.
	CountedAt   int64              `json:"counted_at"`
	Routes      []*dashboardRoute  `json:"routes"`
	StoreErrors float64            `json:"store_errors"`
	Reloads     map[string]float64 `json:"reloads"`
	Events      map[string]float64 `json:"events"` // type/result -> count
	Spooled     float64            `json:"spooled"`
	// RLS counts the Envoy rate-limit service's answers: domain -> code
	// (OK, OVER_LIMIT, or a gRPC error code) -> count.
	RLS map[string]map[string]float64 `json:"rls"`
	// Fleet is how many instances share the store, and those that do
	// not run the majority's config or version; nil when the backend
	// cannot tell or the store did not answer.
	Fleet *dashboardFleet `json:"fleet,omitempty"`
	// Overrides are the runtime overrides in force, without who set them
	// or why: the page is open to whoever reaches the listener.
	Overrides []dashboardOverride `json:"overrides"`
	// History holds the last 10 minutes at 2 s: the gateway-wide series,
	// and those of the routes asked with route= (at most maxSeries), newer
	// than since= (Unix ms).
	History historyJSON `json:"-"` // written by its appendJSON, after the rest
	// Reload is the last load or reload of the config.
	Reload *dashboardReload `json:"reload,omitempty"`
	// TokenNeeded says /admin/* needs the admin token: the page asks for
	// it before it reads the top rejected keys.
	TokenNeeded bool `json:"token_needed"`
	// GlobalLimits apply to every route; their history is in
	// History.Global.Limits.
	GlobalLimits []limitView `json:"global_limits"`
}

type dashboardReload struct {
	OK     bool    `json:"ok"`
	Time   float64 `json:"time"`             // Unix seconds
	Detail string  `json:"detail,omitempty"` // what /readyz says besides ok
}

// maxSeries bounds the routes whose series one answer carries: the page
// asks for those it shows, and 1,000 routes' series would be megabytes.
const maxSeries = 50

type dashboardOverride struct {
	Route    string  `json:"route"`
	Limit    string  `json:"limit"`
	Override string  `json:"override"` // "rate=20/10s"
	File     string  `json:"file"`
	TTLLeft  float64 `json:"ttl_left,omitempty"`
	Applied  bool    `json:"applied"`
}

type dashboardFleet struct {
	Instances   int      `json:"instances"`
	Disagreeing []string `json:"disagreeing"`
}

type dashboardRoute struct {
	Route    string             `json:"route"`
	Requests map[string]float64 `json:"requests"` // HTTP status -> count
	Rejected map[string]float64 `json:"rejected"` // limit -> count
	Breaker  *breakerView       `json:"breaker,omitempty"`
	// Now is the route's newest 2 s interval.
	Now *summaryJSON `json:"now,omitempty"`
	// Limits are the route's own limits, in file order.
	Limits []limitView `json:"limits"`
	// Protect is the route's protection now; absent without protect.
	Protect *protectView `json:"protect,omitempty"`
}

// limitView is a limit as the page draws its use: the threshold the
// requests it let through run against.
type limitView struct {
	Name      string   `json:"name"`
	Algorithm string   `json:"algorithm"`
	Rate      string   `json:"rate"` // as a file writes it: "500/s", "1/10s"; the count for concurrency
	PerSecond float64  `json:"per_second,omitempty"`
	Key       []string `json:"key"`
	// Keyed says the limit counts per key (user, IP, path…): its
	// threshold is each key's, and the busiest keys tell its use. A
	// limit keyed by route or global alone is one counter, which the
	// requests its routes' limit steps let through (History's "passed")
	// consume against PerSecond.
	Keyed  bool `json:"keyed"`
	Shadow bool `json:"shadow,omitempty"`
	// Lease says the instances share the limit in leased slices of its
	// window (sync: lease) rather than decide each request in the store.
	Lease bool `json:"lease,omitempty"`
}

func viewLimits(ls []*config.Limit) []limitView {
	out := make([]limitView, 0, len(ls))
	for _, l := range ls {
		v := limitView{Name: l.Name, Algorithm: l.Algorithm.String(), Rate: l.Rate.String(), Shadow: l.Shadow, Lease: l.Sync == config.SyncLease, Key: make([]string, 0, len(l.Key))}
		if l.Rate.Period > 0 {
			v.PerSecond = float64(l.Rate.Count) / l.Rate.Period.Seconds()
		} else {
			v.Rate = strconv.FormatInt(l.Rate.Count, 10)
		}
		for _, p := range l.Key {
			v.Key = append(v.Key, p.String())
			if p.Source != config.SourceGlobal && p.Source != config.SourceRoute {
				v.Keyed = true
			}
		}
		out = append(out, v)
	}
	return out
}

type breakerView struct {
	State      string  `json:"state"`
	Forced     bool    `json:"forced"`
	RetryAfter float64 `json:"retry_after,omitempty"`
	// FailureRate and SlowRate are the shares of the window's calls that
	// failed or were slow; absent without calls.
	FailureRate *float64 `json:"failure_rate,omitempty"`
	SlowRate    *float64 `json:"slow_rate,omitempty"`
	Calls       int64    `json:"calls"`
	Scope       string   `json:"scope,omitempty"`
}

func (h *handler) dashboardJSON(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var since int64
	if v := q.Get("since"); v != "" {
		var err error
		if since, err = strconv.ParseInt(v, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", `parameter "since": want Unix milliseconds`)
			return
		}
	}
	series := q["route"]
	if len(series) > maxSeries {
		writeError(w, http.StatusBadRequest, "bad_request", "at most "+strconv.Itoa(maxSeries)+" route parameters")
		return
	}
	db := &dashboardBuild{h: h, byRoute: map[string]*dashboardRoute{}, d: dashboardData{
		Time:    time.Now().UnixMilli(),
		Reloads: map[string]float64{},
		Events:  map[string]float64{},
		RLS:     map[string]map[string]float64{},
	}}
	globals := db.configured()
	db.breakers()
	db.protection()
	db.fleetAndOverrides(r.Context())
	db.counted()
	d := &db.d
	d.History = h.hist.snapshot(since, series, globals)
	for id, sum := range h.hist.summaries() {
		sum := sum
		if rt := db.byRoute[id]; rt != nil {
			rt.Now = &sum
		}
	}
	db.reload()
	// An empty list, not null, for a gateway without routes (one that
	// only serves the rate-limit service).
	d.Routes = make([]*dashboardRoute, 0, len(db.byRoute))
	for _, rt := range db.byRoute {
		d.Routes = append(d.Routes, rt)
	}
	slices.SortFunc(d.Routes, func(a, b *dashboardRoute) int { return strings.Compare(a.Route, b.Route) })
	body, _ := json.Marshal(d)
	// The history, most of the answer, is written by hand after the
	// rest: json.Marshal would check and compact the output of every
	// series' MarshalJSON again, which took half of a poll's time.
	body = append(body[:len(body)-1], `,"history":`...)
	body = append(d.History.appendJSON(body), '}')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}

// dashboardBuild is one answer of /dashboard.json while it is put
// together, with its routes by id.
type dashboardBuild struct {
	h       *handler
	d       dashboardData
	byRoute map[string]*dashboardRoute
}

// route is the route of id in the answer, added when it is not yet.
func (db *dashboardBuild) route(id string) *dashboardRoute {
	rt := db.byRoute[id]
	if rt == nil {
		rt = &dashboardRoute{Route: id, Requests: map[string]float64{}, Rejected: map[string]float64{}, Limits: []limitView{}}
		db.byRoute[id] = rt
	}
	return rt
}

// configured puts in every configured route, also before its first
// request, and the limits; it returns the global limits' names.
func (db *dashboardBuild) configured() (globals []string) {
	d := &db.d
	d.GlobalLimits = []limitView{}
	cfg := db.h.b.Config()
	if cfg == nil {
		return nil
	}
	for _, rc := range cfg.Routes {
		db.route(rc.ID).Limits = viewLimits(rc.Limits)
	}
	d.GlobalLimits = viewLimits(cfg.GlobalLimits)
	d.TokenNeeded = cfg.Admin.Token != "" || len(cfg.Admin.Tokens) > 0
	for _, l := range cfg.GlobalLimits {
		globals = append(globals, l.Name)
	}
	return globals
}

// breakers puts in each route's breaker.
func (db *dashboardBuild) breakers() {
	for _, b := range db.h.b.Breakers() {
		bv := &breakerView{State: b.State, Forced: b.Forced, RetryAfter: b.RetryAfter, Calls: b.Calls, Scope: b.Scope}
		if b.Calls > 0 {
			f, sl := float64(b.Failures)/float64(b.Calls), float64(b.Slow)/float64(b.Calls)
			bv.FailureRate, bv.SlowRate = &f, &sl
		}
		db.route(b.Route).Breaker = bv
	}
}

// fleetAndOverrides puts in the fleet's size, where the backend knows it,
// and the runtime overrides.
func (db *dashboardBuild) fleetAndOverrides(ctx context.Context) {
	d := &db.d
	if v, ok := db.h.b.(FleetViewer); ok {
		ctx, cancel := context.WithTimeout(ctx, readyTimeout)
		f, err := v.Fleet(ctx)
		cancel()
		if err == nil {
			d.Fleet = &dashboardFleet{Instances: len(f.Instances), Disagreeing: f.Disagreeing}
		}
	}
	d.Overrides = []dashboardOverride{}
	if o, ok := db.h.b.(Overrider); ok {
		for _, st := range o.Overrides().Overrides {
			d.Overrides = append(d.Overrides, dashboardOverride{
				Route: st.Route, Limit: st.Limit, Override: describe(st.Change), File: describe(st.File),
				TTLLeft: st.TTLLeft, Applied: st.Applied,
			})
		}
	}
}

// counted puts in the counters: the sampler's newest reading, at most 2 s
// old. A poll of its own would gather every series of a gateway of 1,000
// routes again, most of a poll's time.
func (db *dashboardBuild) counted() {
	d := &db.d
	db.h.hist.counted(func(s *sample) {
		d.CountedAt = s.at.UnixMilli()
		for id, codes := range s.codes {
			rt := db.route(id)
			for code, n := range codes {
				rt.Requests[code] = n
			}
		}
		for id, lims := range s.rejected {
			rt := db.route(id)
			for lim, n := range lims {
				rt.Rejected[lim] = n
			}
		}
		d.StoreErrors, d.Spooled = s.storeErr, s.spooled
		maps.Copy(d.Reloads, s.reloads)
		maps.Copy(d.Events, s.events)
		for domain, codes := range s.rls {
			d.RLS[domain] = maps.Clone(codes)
		}
	})
}

// reload puts in the last reload's result, with the sampler's counters.
func (db *dashboardBuild) reload() {
	ok, at, known := db.h.hist.reloadInfo()
	if !known {
		return
	}
	db.d.Reload = &dashboardReload{OK: ok, Time: at}
	// The detail is read now, the result with the counters: only a
	// refused reload's, so that the two never tell different reloads in
	// the 2 s between samples.
	if dg, isDg := db.h.b.(interface{ Degraded() string }); isDg && !ok {
		db.d.Reload.Detail = dg.Degraded()
	}
}
