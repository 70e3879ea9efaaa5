package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/limit"
)

// Backend is the running gateway as the admin API sees it.
type Backend interface {
	// Config is the running configuration; nil until one is loaded.
	Config() *config.Config

	// Reload re-reads the configuration file and swaps it in. A file that
	// does not load gives a config.Errors; a config that loads but cannot
	// be built gives another error. Either way the running config stays.
	Reload() error

	// LimitState reads one key of a limit without consuming it; ResetLimit
	// forgets it. route is a route id or "global"; values hold one value
	// per part of the limit's key (of its fallback key with fallback).
	// They return an error wrapping gateway.ErrNoLimit for an unknown route
	// or limit, one wrapping limit.ErrStoreUnavailable when the store
	// failed, and another error for values that do not fit the key.
	LimitState(ctx context.Context, route, limit string, values []string, fallback bool) (limit.State, error)
	ResetLimit(ctx context.Context, route, limit string, values []string, fallback bool) error

	// Ready reports whether the gateway can decide requests.
	Ready(ctx context.Context) error

	// Breakers lists the routes' circuit breakers; ForceBreaker forces
	// one open or closed, for ttl if it is above zero, or gives it back to
	// its window ("auto"). It returns an error wrapping
	// gateway.ErrNoBreaker for a route without a breaker.
	Breakers() []gateway.BreakerStatus
	ForceBreaker(route, state string, ttl time.Duration) error
}

// A FleetBackend is a Backend whose instances share a store, and whose
// resets and forced breakers can reach every instance. Without it, the
// admin API acts on the one instance.
type FleetBackend interface {
	Backend

	// Scope resolves the scope parameter, "fleet", "instance" or empty
	// for the default; it returns an error wrapping gateway.ErrScope for a
	// scope the backend cannot act in.
	Scope(s string) (gateway.Scope, error)

	// FleetResetLimit and FleetForceBreaker are ResetLimit and
	// ForceBreaker carried out on every instance. by names who asked.
	FleetResetLimit(ctx context.Context, by, route, limit string, values []string, fallback bool) error
	FleetForceBreaker(ctx context.Context, by, route, state string, ttl time.Duration) error
}

// An Auditor is a Backend that keeps an audit trail of the admin actions
// (events.audit): the handler hands it every reset and forced breaker it
// carried out, as well as logging them.
type Auditor interface {
	AuditAdmin(gateway.AdminAction)
}

// A FleetViewer is a Backend that can tell which instances share its
// store, for GET /admin/fleet and the dashboard.
type FleetViewer interface {
	// Fleet lists the instances alive; an error wraps
	// limit.ErrStoreUnavailable.
	Fleet(ctx context.Context) (gateway.Fleet, error)
}

// Time budgets of the calls that reach the store, so that a probe or an
// operator's query answers even while Redis does not.
const (
	readyTimeout = time.Second
	limitTimeout = 2 * time.Second
)

//go:embed static/index.html
var dashboard []byte

// The page's script, style and chart library, served from the binary:
// the dashboard needs nothing from outside the admin listener.
//
//go:embed static/dash.js static/dash.css static/uplot/uPlot.iife.min.js static/uplot/uPlot.min.css static/uplot/LICENSE
var static embed.FS

var staticFiles = map[string]struct{ file, kind string }{
	"/static/dash.js":       {"static/dash.js", "text/javascript; charset=utf-8"},
	"/static/dash.css":      {"static/dash.css", "text/css; charset=utf-8"},
	"/static/uplot.js":      {"static/uplot/uPlot.iife.min.js", "text/javascript; charset=utf-8"},
	"/static/uplot.css":     {"static/uplot/uPlot.min.css", "text/css; charset=utf-8"},
	"/static/uplot.LICENSE": {"static/uplot/LICENSE", "text/plain; charset=utf-8"},
}

// dashboardCSP lets the page run its own script and style only: no
// inline script, nothing from elsewhere, no framing. A route id or a key
// that slipped into the page as markup would not run.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// NewHandler returns the handler of the admin listener. gatherer is what
// /metrics exposes (nil: prometheus.DefaultGatherer); log receives the
// problems the handler meets (nil: slog.Default()).
//
// /healthz, /readyz, /metrics and the dashboard (/ and /dashboard.json)
// are open to whoever reaches the listener, as probes and scrapers expect;
// /admin/* needs the bearer token of the running config when it has one.
//
// The handler samples gatherer every 2 s for the dashboard's history of
// the last 10 minutes, from NewHandler until Close.
func NewHandler(b Backend, gatherer prometheus.Gatherer, log *slog.Logger) *Handler {
	if gatherer == nil {
		gatherer = prometheus.DefaultGatherer
	}
	if log == nil {
		log = slog.Default()
	}
	h := &handler{b: b, log: log, gatherer: gatherer}
	h.hist = newHistory(gatherer, func() map[string]int {
		cfg := b.Config()
		if cfg == nil {
			return nil
		}
		out := make(map[string]int, len(cfg.Routes))
		for _, rc := range cfg.Routes {
			out[rc.ID] = rc.Fallback.Status
		}
		return out
	})
	metrics := promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		ErrorLog: promLogger{log},
		// A collector that fails should cost its own series, not the
		// whole scrape: the gateway's counters matter most when
		// something is already wrong.
		ErrorHandling: promhttp.ContinueOnError,
	})
	h.routes = map[string]endpoint{
		"/":                {http.MethodGet: h.dashboard},
		"/dashboard.json":  {http.MethodGet: h.dashboardJSON},
		"/healthz":         {http.MethodGet: h.healthz},
		"/readyz":          {http.MethodGet: h.readyz},
		"/metrics":         {http.MethodGet: metrics.ServeHTTP},
		"/admin/config":    {http.MethodGet: h.config},
		"/admin/reload":    {http.MethodPost: h.reload},
		"/admin/limits":    {http.MethodGet: h.limitState, http.MethodDelete: h.limitReset},
		"/admin/breakers":  {http.MethodGet: h.breakers},
		"/admin/fleet":     {http.MethodGet: h.fleet},
		"/admin/routes":    {http.MethodGet: h.listRoutes},
		"/admin/protect":   {http.MethodGet: h.listProtected},
		"/admin/overrides": {http.MethodGet: h.listOverrides},
		"/admin/top":       {http.MethodGet: h.top},
	}
	for p := range staticFiles {
		h.routes[p] = endpoint{http.MethodGet: h.staticFile}
	}
	return &Handler{h}
}

// Handler is the admin listener's handler.
type Handler struct{ h *handler }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.h.ServeHTTP(w, r) }

// Close stops the dashboard's sampler. The handler still answers after
// it, with the history it has.
func (h *Handler) Close() { h.h.hist.close() }

// An endpoint maps the methods of one path to their handlers.
type endpoint map[string]http.HandlerFunc

// allow is the Allow header of e: its methods, with HEAD where GET is, as
// net/http answers HEAD with GET's handler.
func (e endpoint) allow() string {
	var ms []string
	for m := range e {
		ms = append(ms, m)
		if m == http.MethodGet {
			ms = append(ms, http.MethodHead)
		}
	}
	slices.Sort(ms)
	return strings.Join(ms, ", ")
}

type handler struct {
	b        Backend
	log      *slog.Logger
	gatherer prometheus.Gatherer
	routes   map[string]endpoint
	hist     *history
	// crossOrigin refuses the state-changing calls a browser sends from
	// another site's page (CSRF): without a token, such a page could
	// force breakers and reload through the operator's browser.
	crossOrigin http.CrossOriginProtection
}

// ServeHTTP routes by exact path, then method. It does not use
// http.ServeMux because the mux answers 404 and 405 in plain text, and
// every answer of the admin API but the dashboard and /metrics is JSON.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every answer describes live state or guards it, the refusals too: a
	// cache in between must neither serve yesterday's remaining quota nor
	// keep an admin answer for the next client. Set here, before any
	// handler writes, so that no answer of this listener goes without it.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !h.hostAllowed(r) {
		writeError(w, http.StatusMisdirectedRequest, "misdirected",
			"this admin listener is on a loopback address and answers Host localhost or a loopback address only, not "+strconv.Quote(r.Host))
		return
	}
	if isAdminPath(r.URL.Path) {
		if err := h.crossOrigin.Check(r); err != nil {
			writeError(w, http.StatusForbidden, "cross_origin",
				"a browser sent this "+r.Method+" from another site's page: refused; the dashboard and floodgate ctl send theirs from the listener's own origin")
			return
		}
		var ok bool
		if r, ok = h.authorized(w, r); !ok {
			return
		}
	}
	e, ok := h.routes[r.URL.Path]
	if !ok && strings.HasPrefix(r.URL.Path, breakerPrefix) {
		e, ok = endpoint{http.MethodPost: h.forceBreaker}, true
	}
	if !ok && strings.HasPrefix(r.URL.Path, overridePrefix) {
		e, ok = endpoint{http.MethodGet: h.getOverride, http.MethodPut: h.setOverride, http.MethodDelete: h.removeOverride}, true
	}
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such admin endpoint: "+r.URL.Path)
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	f, ok := e[method]
	if !ok {
		w.Header().Set("Allow", e.allow())
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+"; use "+e.allow())
		return
	}
	f(w, r)
}

// hostAllowed refuses, on a listener bound to a loopback address, a
// request whose Host is a name other than localhost: a page of another
// site whose name an attacker points at 127.0.0.1 (DNS rebinding) would
// otherwise read the listener as its own origin. A listener bound to
// other addresses answers any Host: it is reached by the names and
// addresses the deployment gives it.
func (h *handler) hostAllowed(r *http.Request) bool {
	cfg := h.b.Config()
	if cfg == nil || !isLoopback(hostOnly(cfg.Admin.Listen)) {
		return true
	}
	host := hostOnly(r.Host)
	return host == "" || isLoopback(host)
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// isAdminPath reports whether p is under /admin, the token-protected part.
// It decides on the cleaned path so that /x/../admin/config or
// //admin/config cannot reach an admin endpoint around the token check.
func isAdminPath(p string) bool {
	p = path.Clean("/" + p)
	return p == "/admin" || strings.HasPrefix(p, "/admin/")
}

// authorized checks the bearer token against the running config's
// tokens, read on every request so that a reload that sets, changes or
// removes one takes effect at once. It answers 401 itself when the request
// may not go on, and otherwise returns r with who asked: the name of the
// token it carried ("admin" for admin.token, and when there is none).
func (h *handler) authorized(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	cfg := h.b.Config()
	if cfg == nil {
		writeError(w, http.StatusServiceUnavailable, "not_ready", "no configuration loaded")
		return r, false
	}
	a := cfg.Admin
	if a.Token == "" && len(a.Tokens) == 0 {
		return r, true
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	// The scheme is case-insensitive (RFC 7235 §2.1).
	if ok && strings.EqualFold(scheme, "Bearer") {
		got = strings.TrimSpace(got)
		// Every token is compared, whichever matches, so that the time
		// does not tell which one nearly did.
		name := ""
		if a.Token != "" && tokenEqual(got, a.Token) {
			name = "admin"
		}
		for _, t := range a.Tokens {
			if tokenEqual(got, t.Token) {
				name = t.Name
			}
		}
		if name != "" {
			return r.WithContext(context.WithValue(r.Context(), whoKey{}, name)), true
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate admin"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", `this endpoint needs "Authorization: Bearer <admin token>"`)
	return r, false
}

// whoKey is the context key of the name of the token a call carried.
type whoKey struct{}

// tokenEqual compares in constant time. Hashing first makes the time
// independent of the lengths too, which ConstantTimeCompare alone is not.
func tokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

func (h *handler) dashboard(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", dashboardCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Write(dashboard)
}

type status struct {
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// healthz answers as long as the process serves HTTP: it is the liveness
// probe, and restarting a gateway whose store is down would not help.
func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, status{Status: "ok"})
}

// readyz is the readiness probe: a config is loaded and the gateway can
// decide requests.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.b.Config() == nil {
		writeJSON(w, http.StatusServiceUnavailable, status{Status: "unavailable", Detail: "no configuration loaded"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := h.b.Ready(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, status{Status: "unavailable", Detail: err.Error()})
		return
	}
	// A backend may be ready and still have something to say: an events
	// sink that is down while events wait in the spool does not stop the
	// gateway from serving, but an operator should see it.
	st := status{Status: "ok"}
	if d, ok := h.b.(interface{ Degraded() string }); ok {
		st.Detail = d.Degraded()
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *handler) config(w http.ResponseWriter, r *http.Request) {
	cfg := h.b.Config()
	if cfg == nil {
		writeError(w, http.StatusServiceUnavailable, "not_ready", "no configuration loaded")
		return
	}
	if o, ok := h.b.(Overrider); ok {
		// The file's values are in the config; what overrides them, and
		// the file's value beside it, follows.
		writeJSON(w, http.StatusOK, cfg.RedactedWith("runtime_overrides", o.Overrides()))
		return
	}
	writeJSON(w, http.StatusOK, cfg.Redacted())
}

type reloadErrors struct {
	Status string   `json:"status"`
	Errors []string `json:"errors"`
}

// reload answers 400 with every problem of a file that does not load or
// build. A store that cannot be reached is not the file's fault: 503.
func (h *handler) reload(w http.ResponseWriter, r *http.Request) {
	err := h.b.Reload()
	if err == nil {
		writeJSON(w, http.StatusOK, status{Status: "reloaded"})
		return
	}
	code := http.StatusBadRequest
	if errors.Is(err, limit.ErrStoreUnavailable) {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, reloadErrors{Status: "error", Errors: ErrorLines(err)})
}

// ErrorLines is err as a list of lines: one "FILE:LINE: message" per
// problem of a config.Errors, else the error's text. The reload paths of
// "floodgate serve" log the same list the admin API answers with.
func ErrorLines(err error) []string {
	var errs config.Errors
	if errors.As(err, &errs) && len(errs) > 0 {
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = e.Error()
		}
		return lines
	}
	return []string{err.Error()}
}

// writeJSON sends v as the whole response.
func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only a config value could fail to marshal, and that is a bug;
		// say so rather than send half a document.
		code = http.StatusInternalServerError
		body, _ = json.Marshal(apiError{Status: "error", Code: "internal_error", Message: "cannot encode the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

type apiError struct {
	Status  string `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, apiError{Status: "error", Code: code, Message: message})
}

// promLogger sends promhttp's errors (a collector that failed) to slog.
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Error("serving /metrics", "error", strings.TrimSpace(fmt.Sprintln(v...)))
}

const breakerPrefix = "/admin/breakers/"

// scope reads the scope parameter of a reset or a force, and answers 400
// itself when it is bad. fleet is the backend to call for ScopeFleet.
func (h *handler) scope(w http.ResponseWriter, r *http.Request) (gateway.Scope, FleetBackend, bool) {
	s := r.URL.Query().Get("scope")
	if s != "" && s != string(gateway.ScopeFleet) && s != string(gateway.ScopeInstance) {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf(`parameter "scope" is %q: want fleet (every instance sharing the store) or instance (this one)`, s))
		return "", nil, false
	}
	fleet, ok := h.b.(FleetBackend)
	if !ok {
		if s == string(gateway.ScopeFleet) {
			writeError(w, http.StatusBadRequest, "bad_request", `parameter "scope": this gateway acts on itself only; use scope=instance`)
			return "", nil, false
		}
		return gateway.ScopeInstance, nil, true
	}
	scope, err := fleet.Scope(s)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", `parameter "scope": `+err.Error())
		return "", nil, false
	}
	return scope, fleet, true
}

// who names the operator of an admin call for the logs: the name of the
// admin token it carried, "admin" for admin.token or without one.
func who(r *http.Request) string {
	name, _ := named(r)
	return name
}

// named is who, and whether the name is a named token's (admin.tokens).
func named(r *http.Request) (string, bool) {
	if name, ok := r.Context().Value(whoKey{}).(string); ok && name != "admin" {
		return name, true
	}
	return "admin", false
}

// durationRE is the shape of a Go duration (1h30m, 2.5s), to tell one too
// long for time.ParseDuration from one that is not a duration at all.
var durationRE = regexp.MustCompile(`^(\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))*$`)

func (h *handler) breakers(w http.ResponseWriter, r *http.Request) {
	bs := h.b.Breakers()
	if bs == nil {
		bs = []gateway.BreakerStatus{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"breakers": bs})
}

// forceBreaker serves POST /admin/breakers/ROUTE?state=open|closed|auto
// [&ttl=DURATION], and answers with the breaker as GET /admin/breakers
// shows it.
func (h *handler) forceBreaker(w http.ResponseWriter, r *http.Request) {
	route := strings.TrimPrefix(r.URL.Path, breakerPrefix)
	q := r.URL.Query()
	state := q.Get("state")
	if route == "" || strings.Contains(route, "/") {
		writeError(w, http.StatusNotFound, "not_found", "want /admin/breakers/ROUTE")
		return
	}
	var ttl time.Duration
	if s := q.Get("ttl"); s != "" {
		var err error
		ttl, err = time.ParseDuration(s)
		switch {
		case err != nil && durationRE.MatchString(s):
			// Written as a duration, but past what one holds (292 years).
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("ttl %q is too long: at most %.0fh (7 days)", s, gateway.MaxForceTTL.Hours()))
			return
		case err != nil || ttl <= 0:
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("ttl %q: want a positive duration such as 30m", s))
			return
		case strings.EqualFold(state, "auto"):
			writeError(w, http.StatusBadRequest, "bad_request", "state auto gives the breaker back to its window at once and takes no ttl; a ttl is for open or closed")
			return
		}
	}
	scope, fleet, ok := h.scope(w, r)
	if !ok {
		return
	}
	by := who(r)
	before := breakerState(h.b.Breakers(), route)
	var err error
	if scope == gateway.ScopeFleet {
		ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
		defer cancel()
		err = fleet.FleetForceBreaker(ctx, by, route, state, ttl)
	} else {
		err = h.b.ForceBreaker(route, state, ttl)
	}
	if err != nil {
		switch {
		case errors.Is(err, gateway.ErrNoBreaker):
			writeError(w, http.StatusNotFound, "breaker_not_found", err.Error())
		case errors.Is(err, limit.ErrStoreUnavailable), errors.Is(err, context.DeadlineExceeded):
			h.log.Warn("admin breaker force: store unavailable", "route", route, "scope", scope, "error", err.Error())
			writeError(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
		default:
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		}
		return
	}
	answer := map[string]any{"status": "ok", "route": route, "scope": scope}
	// The log says the state as GET /admin/breakers does (OPEN, CLOSED),
	// whatever the casing of the request.
	args := []any{"route", route}
	for _, b := range h.b.Breakers() {
		if b.Route == route {
			answer["state"], answer["forced"] = b.State, b.Forced
			args = append(args, "state", b.State, "forced", b.Forced)
		}
	}
	if ttl > 0 {
		answer["ttl"] = ttl.Seconds()
		args = append(args, "ttl", ttl.String())
	}
	h.log.Info("circuit breaker forced", append(args, "scope", scope, "by", by)...)
	h.audit(gateway.AdminAction{
		Action: events.ActionForceBreaker, By: by, Scope: scope, Route: route,
		State: state, TTL: ttl, Before: before, After: breakerState(h.b.Breakers(), route),
	})
	writeJSON(w, http.StatusOK, answer)
}

// breakerState is the state of route's breaker in bs, "" without one.
func breakerState(bs []gateway.BreakerStatus, route string) string {
	for _, b := range bs {
		if b.Route == route {
			return b.State
		}
	}
	return ""
}

// audit hands a to the backend's audit trail, when it keeps one.
func (h *handler) audit(a gateway.AdminAction) {
	if au, ok := h.b.(Auditor); ok {
		au.AuditAdmin(a)
	}
}

// fleet serves GET /admin/fleet: the instances alive, and whether they
// run the same config and version.
func (h *handler) fleet(w http.ResponseWriter, r *http.Request) {
	v, ok := h.b.(FleetViewer)
	if !ok {
		writeError(w, http.StatusNotImplemented, "not_implemented", "this gateway does not list its fleet")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), limitTimeout)
	defer cancel()
	f, err := v.Fleet(ctx)
	if err != nil {
		h.log.Warn("admin fleet: store unavailable", "error", err.Error())
		writeError(w, http.StatusServiceUnavailable, "store_unavailable", err.Error())
		return
	}
	if f.Skipped > 0 {
		h.log.Warn("admin fleet: entries of the store skipped", "skipped", f.Skipped)
	}
	writeJSON(w, http.StatusOK, f)
}

func (h *handler) staticFile(w http.ResponseWriter, r *http.Request) {
	f := staticFiles[r.URL.Path]
	body, err := static.ReadFile(f.file)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal_error", err.Error())
		return
	}
	w.Header().Set("Content-Type", f.kind)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write(body)
}
