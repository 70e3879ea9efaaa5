package admin

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
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
	d := dashboardData{
		Time:    time.Now().UnixMilli(),
		Reloads: map[string]float64{},
		Events:  map[string]float64{},
		RLS:     map[string]map[string]float64{},
	}
	byRoute := map[string]*dashboardRoute{}
	route := func(id string) *dashboardRoute {
		rt := byRoute[id]
		if rt == nil {
			rt = &dashboardRoute{Route: id, Requests: map[string]float64{}, Rejected: map[string]float64{}, Limits: []limitView{}}
			byRoute[id] = rt
		}
		return rt
	}
	// Every configured route shows, also before its first request.
	d.GlobalLimits = []limitView{}
	var globals []string
	if cfg := h.b.Config(); cfg != nil {
		for _, rc := range cfg.Routes {
			route(rc.ID).Limits = viewLimits(rc.Limits)
		}
		d.GlobalLimits = viewLimits(cfg.GlobalLimits)
		d.TokenNeeded = cfg.Admin.Token != "" || len(cfg.Admin.Tokens) > 0
		for _, l := range cfg.GlobalLimits {
			globals = append(globals, l.Name)
		}
	}
	for _, b := range h.b.Breakers() {
		bv := &breakerView{State: b.State, Forced: b.Forced, RetryAfter: b.RetryAfter, Calls: b.Calls, Scope: b.Scope}
		if b.Calls > 0 {
			f, sl := float64(b.Failures)/float64(b.Calls), float64(b.Slow)/float64(b.Calls)
			bv.FailureRate, bv.SlowRate = &f, &sl
		}
		route(b.Route).Breaker = bv
	}
	if v, ok := h.b.(FleetViewer); ok {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		f, err := v.Fleet(ctx)
		cancel()
		if err == nil {
			d.Fleet = &dashboardFleet{Instances: len(f.Instances), Disagreeing: f.Disagreeing}
		}
	}
	d.Overrides = []dashboardOverride{}
	if o, ok := h.b.(Overrider); ok {
		for _, st := range o.Overrides().Overrides {
			d.Overrides = append(d.Overrides, dashboardOverride{
				Route: st.Route, Limit: st.Limit, Override: describe(st.Change), File: describe(st.File),
				TTLLeft: st.TTLLeft, Applied: st.Applied,
			})
		}
	}
	// The counters are the sampler's newest reading, at most 2 s old: a
	// poll of its own would gather every series of a gateway of 1,000
	// routes again, most of a poll's time.
	h.hist.counted(func(s *sample) {
		d.CountedAt = s.at.UnixMilli()
		for id, codes := range s.codes {
			rt := route(id)
			for code, n := range codes {
				rt.Requests[code] = n
			}
		}
		for id, lims := range s.rejected {
			rt := route(id)
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
	d.History = h.hist.snapshot(since, series, globals)
	for id, sum := range h.hist.summaries() {
		sum := sum
		if rt := byRoute[id]; rt != nil {
			rt.Now = &sum
		}
	}
	if ok, at, known := h.hist.reloadInfo(); known {
		d.Reload = &dashboardReload{OK: ok, Time: at}
		// The detail is read now, the result with the counters: only a
		// refused reload's, so that the two never tell different
		// reloads in the 2 s between samples.
		if dg, isDg := h.b.(interface{ Degraded() string }); isDg && !ok {
			d.Reload.Detail = dg.Degraded()
		}
	}
	// An empty list, not null, for a gateway without routes (one that
	// only serves the rate-limit service).
	d.Routes = make([]*dashboardRoute, 0, len(byRoute))
	for _, rt := range byRoute {
		d.Routes = append(d.Routes, rt)
	}
	slices.SortFunc(d.Routes, func(a, b *dashboardRoute) int {
		switch {
		case a.Route < b.Route:
			return -1
		case a.Route > b.Route:
			return 1
		}
		return 0
	})
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
