package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/limit"
)

// fakeBackend stands in for the gateway: these tests are about the admin
// HTTP layer, and the gateway's own tests cover LimitState and the rest
// against real stores.
type fakeBackend struct {
	forced string // the last ForceBreaker: route=state[/ttl]
	cfg    atomic.Pointer[config.Config]

	mu        sync.Mutex
	reloadErr error
	readyErr  error
	state     limit.State
	limitErr  error
	calls     []limitCall
	readyCtx  context.Context
	reloads   int
}

// limitCall records what a LimitState or ResetLimit received.
type limitCall struct {
	op, route, limit string
	values           []string
	fallback         bool
	deadline         bool
}

func (f *fakeBackend) Config() *config.Config { return f.cfg.Load() }

func (f *fakeBackend) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reloads++
	return f.reloadErr
}

func (f *fakeBackend) LimitState(ctx context.Context, route, name string, values []string, fallback bool) (limit.State, error) {
	f.record(ctx, "state", route, name, values, fallback)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.limitErr
}

func (f *fakeBackend) ResetLimit(ctx context.Context, route, name string, values []string, fallback bool) error {
	f.record(ctx, "reset", route, name, values, fallback)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limitErr
}

func (f *fakeBackend) record(ctx context.Context, op, route, name string, values []string, fallback bool) {
	_, ok := ctx.Deadline()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, limitCall{op, route, name, values, fallback, ok})
}

func (f *fakeBackend) Breakers() []gateway.BreakerStatus {
	switch {
	case strings.HasPrefix(f.forced, "coupon=closed"):
		return []gateway.BreakerStatus{{Route: "coupon", State: "CLOSED", Forced: true}}
	case strings.HasPrefix(f.forced, "coupon=open"):
		return []gateway.BreakerStatus{{Route: "coupon", State: "OPEN", Value: 1, Forced: true}}
	}
	return []gateway.BreakerStatus{{Route: "coupon", State: "OPEN", Value: 1, RetryAfter: 2.5}}
}

func (f *fakeBackend) ForceBreaker(route, state string, ttl time.Duration) error {
	if route != "coupon" {
		return fmt.Errorf("%w: %q", gateway.ErrNoBreaker, route)
	}
	state = strings.ToLower(state)
	if state != "open" && state != "closed" && state != "auto" {
		return fmt.Errorf("state %q: want open, closed or auto", state)
	}
	f.forced = route + "=" + state
	if ttl > 0 {
		f.forced += "/" + ttl.String()
	}
	return nil
}

func (f *fakeBackend) Ready(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readyCtx = ctx
	return f.readyErr
}

const testConfig = `
admin:
  listen: 127.0.0.1:9090
  token: %s
store:
  redis:
    password: hunter2
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - name: user
        key: [header:X-User-Id]
        rate: 1/10s
`

// parseConfig builds a real config, so that /admin/config is tested on
// what Redacted really returns.
func parseConfig(t testing.TB, token string) *config.Config {
	t.Helper()
	if token == "" {
		token = `""`
	}
	cfg, err := config.Parse("floodgate.yaml", fmt.Appendf(nil, testConfig, token))
	if err != nil {
		t.Fatalf("parsing the test config: %v", err)
	}
	return cfg
}

func newTest(t *testing.T, token string) (*fakeBackend, http.Handler) {
	t.Helper()
	b := &fakeBackend{}
	b.cfg.Store(parseConfig(t, token))
	return b, NewHandler(b, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
}

type response struct {
	code   int
	header http.Header
	body   string
}

// do serves one request, to the test config's listener address unless
// header names another Host; header holds name-value pairs.
func do(t *testing.T, h http.Handler, method, target string, header ...string) response {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	r.Host = "127.0.0.1:9090"
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			r.Host = header[i+1]
			continue
		}
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return response{w.Code, w.Result().Header, w.Body.String()}
}

// wantJSON checks the status, the content type and the body, compared as
// JSON values so that key order and spacing do not matter.
func wantJSON(t *testing.T, r response, code int, body string) {
	t.Helper()
	if r.code != code {
		t.Errorf("status %d, want %d; body %s", r.code, code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var got, want any
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Fatalf("bad expected JSON %s: %v", body, err)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("body\n %s\nwant\n %s", g, w)
	}
}

// wantError checks an error answer's status and code, and that it has a
// message.
func wantError(t *testing.T, r response, code int, errCode string) map[string]any {
	t.Helper()
	if r.code != code {
		t.Errorf("status %d, want %d; body %s", r.code, code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	if got["status"] != "error" || got["code"] != errCode || got["message"] == "" || got["message"] == nil {
		t.Errorf("body %s, want status error, code %q and a message", r.body, errCode)
	}
	return got
}

func TestHealthz(t *testing.T) {
	_, h := newTest(t, "")
	wantJSON(t, do(t, h, "GET", "/healthz"), 200, `{"status":"ok"}`)
	if r := do(t, h, "HEAD", "/healthz"); r.code != 200 {
		t.Errorf("HEAD /healthz: status %d, want 200", r.code)
	}
}

func TestReadyz(t *testing.T) {
	t.Run("ready", func(t *testing.T) {
		b, h := newTest(t, "")
		wantJSON(t, do(t, h, "GET", "/readyz"), 200, `{"status":"ok"}`)
		// Ready is given a deadline, so that a hung store cannot hang
		// the probe.
		dl, ok := b.readyCtx.Deadline()
		if !ok || time.Until(dl) > readyTimeout {
			t.Errorf("Ready called without a deadline of at most %v", readyTimeout)
		}
	})
	t.Run("store down", func(t *testing.T) {
		b, h := newTest(t, "")
		b.readyErr = errors.New("store unavailable and limit user of route api has on_error deny")
		wantJSON(t, do(t, h, "GET", "/readyz"), 503,
			`{"status":"unavailable","detail":"store unavailable and limit user of route api has on_error deny"}`)
	})
	t.Run("no config", func(t *testing.T) {
		b, h := newTest(t, "")
		b.cfg.Store(nil)
		wantJSON(t, do(t, h, "GET", "/readyz"), 503, `{"status":"unavailable","detail":"no configuration loaded"}`)
	})
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_config_reloads_total", Help: "h"}, []string{"result"})
	reg.MustRegister(c)
	c.WithLabelValues("error").Add(2)
	b := &fakeBackend{}
	b.cfg.Store(parseConfig(t, "s3cret"))
	h := NewHandler(b, reg, nil)

	// Scrapers carry no admin token: /metrics stays open.
	r := do(t, h, "GET", "/metrics")
	if r.code != 200 {
		t.Fatalf("status %d, want 200; body %s", r.code, r.body)
	}
	if !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Errorf("Content-Type %q, want the Prometheus text format", r.header.Get("Content-Type"))
	}
	if want := `gateway_config_reloads_total{result="error"} 2`; !strings.Contains(r.body, want) {
		t.Errorf("metrics do not contain %q:\n%s", want, r.body)
	}
}

func TestConfig(t *testing.T) {
	_, h := newTest(t, "s3cret")
	r := do(t, h, "GET", "/admin/config", "Authorization", "Bearer s3cret")
	if r.code != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q; want 200 JSON; body %s", r.code, r.header.Get("Content-Type"), r.body)
	}
	var got struct {
		Admin struct {
			Listen string `json:"listen"`
			Token  string `json:"token"`
		} `json:"admin"`
		Store struct {
			Redis struct {
				Password string `json:"password"`
			} `json:"redis"`
		} `json:"store"`
		Routes []struct {
			ID     string `json:"id"`
			Limits []struct {
				Rate string `json:"rate"`
			} `json:"limits"`
		} `json:"routes"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatalf("body is not JSON: %v\n%s", err, r.body)
	}
	if got.Admin.Token != "***" || got.Store.Redis.Password != "***" {
		t.Errorf("secrets shown: token %q, password %q; want ***", got.Admin.Token, got.Store.Redis.Password)
	}
	if strings.Contains(r.body, "s3cret") || strings.Contains(r.body, "hunter2") {
		t.Errorf("a secret appears in the body:\n%s", r.body)
	}
	if got.Admin.Listen != "127.0.0.1:9090" || len(got.Routes) != 1 || got.Routes[0].ID != "api" ||
		len(got.Routes[0].Limits) != 1 || got.Routes[0].Limits[0].Rate != "1/10s" {
		t.Errorf("config JSON does not hold the running config:\n%s", r.body)
	}
}

func TestReload(t *testing.T) {
	_, fileErr := config.Parse("floodgate.yaml", []byte("routes:\n  - id: api\n    match: {path: /api}\n    upstream: {targets: [\"ftp://x\"]}\n    bogus: 1\n"))
	var errs config.Errors
	if !errors.As(fileErr, &errs) || len(errs) < 2 {
		t.Fatalf("want a config with several errors, got %v", fileErr)
	}
	var lines []string
	for _, e := range errs {
		lines = append(lines, e.Error())
	}
	linesJSON, _ := json.Marshal(lines)

	tests := []struct {
		name string
		err  error
		code int
		body string
	}{
		{"ok", nil, 200, `{"status":"reloaded"}`},
		{"invalid file", fileErr, 400, `{"status":"error","errors":` + string(linesJSON) + `}`},
		{"build error", errors.New("store.redis: redisstore: 2 addresses given; a standalone Redis has one"), 400,
			`{"status":"error","errors":["store.redis: redisstore: 2 addresses given; a standalone Redis has one"]}`},
		{"store unreachable", fmt.Errorf("connecting to redis: %w", limit.ErrStoreUnavailable), 503,
			`{"status":"error","errors":["connecting to redis: limit: store unavailable"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, h := newTest(t, "")
			b.reloadErr = tt.err
			wantJSON(t, do(t, h, "POST", "/admin/reload"), tt.code, tt.body)
			if b.reloads != 1 {
				t.Errorf("Reload called %d times, want 1", b.reloads)
			}
		})
	}
	// Each problem is its own FILE:LINE: line.
	for _, l := range lines {
		if !strings.HasPrefix(l, "floodgate.yaml:") {
			t.Errorf("error line %q does not start with FILE:LINE", l)
		}
	}
}

func TestLimitState(t *testing.T) {
	tests := []struct {
		name  string
		state limit.State
		body  string
	}{
		{"fixed window",
			limit.State{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Minute, Remaining: 42, ResetAfter: 17 * time.Second},
			`{"algorithm":"fixed_window","limit":100,"window":60,"remaining":42,"reset_after":17}`},
		{"token bucket, fractional reset",
			limit.State{Algorithm: limit.TokenBucket, Limit: 800, Window: time.Second, Remaining: 799, ResetAfter: 1250 * time.Microsecond},
			`{"algorithm":"token_bucket","limit":800,"window":1,"remaining":799,"reset_after":0.001}`},
		{"sliding window",
			limit.State{Algorithm: limit.SlidingWindow, Limit: 10, Window: 10 * time.Second, Remaining: 0, ResetAfter: 2500 * time.Millisecond},
			`{"algorithm":"sliding_window","limit":10,"window":10,"remaining":0,"reset_after":2.5}`},
		{"concurrency adds in_flight",
			limit.State{Algorithm: limit.Concurrency, Limit: 5, Remaining: 5, InFlight: 0},
			`{"algorithm":"concurrency","limit":5,"window":0,"remaining":5,"reset_after":0,"in_flight":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, h := newTest(t, "")
			b.state = tt.state
			wantJSON(t, do(t, h, "GET", "/admin/limits?route=api&limit=user&key=u1"), 200, tt.body)
		})
	}
}

func TestLimitParameters(t *testing.T) {
	tests := []struct {
		query string
		want  limitCall
	}{
		{"route=api&limit=user&key=u1", limitCall{route: "api", limit: "user", values: []string{"u1"}}},
		// A composite key gives its parts in order; values are decoded.
		{"route=api&limit=user&key=u1&key=%2Fapi%2Fx", limitCall{route: "api", limit: "user", values: []string{"u1", "/api/x"}}},
		{"route=api&limit=user&key=10.0.0.1&fallback=true", limitCall{route: "api", limit: "user", values: []string{"10.0.0.1"}, fallback: true}},
		{"route=global&limit=all&key=x&fallback=false", limitCall{route: "global", limit: "all", values: []string{"x"}}},
	}
	for _, tt := range tests {
		for _, method := range []string{"GET", "DELETE"} {
			t.Run(method+" "+tt.query, func(t *testing.T) {
				b, h := newTest(t, "")
				r := do(t, h, method, "/admin/limits?"+tt.query)
				if r.code != 200 {
					t.Fatalf("status %d, want 200; body %s", r.code, r.body)
				}
				if len(b.calls) != 1 {
					t.Fatalf("backend called %d times, want 1", len(b.calls))
				}
				c := b.calls[0]
				tt.want.op = map[string]string{"GET": "state", "DELETE": "reset"}[method]
				if c.op != tt.want.op || c.route != tt.want.route || c.limit != tt.want.limit ||
					!slices.Equal(c.values, tt.want.values) || c.fallback != tt.want.fallback {
					t.Errorf("backend got %+v, want %+v", c, tt.want)
				}
				if !c.deadline {
					t.Error("backend called without a deadline")
				}
			})
		}
	}
}

func TestLimitReset(t *testing.T) {
	_, h := newTest(t, "")
	wantJSON(t, do(t, h, "DELETE", "/admin/limits?route=api&limit=user&key=u1"), 200, `{"status":"reset","scope":"instance"}`)
}

func TestLimitErrors(t *testing.T) {
	tests := []struct {
		name    string
		query   string
		err     error // what the backend returns
		code    int
		errCode string
		called  bool
	}{
		{"missing route", "limit=user&key=u1", nil, 400, "bad_request", false},
		{"missing limit", "route=api&key=u1", nil, 400, "bad_request", false},
		{"missing key", "route=api&limit=user", nil, 400, "bad_request", false},
		{"bad fallback", "route=api&limit=user&key=u1&fallback=maybe", nil, 400, "bad_request", false},
		{"unknown limit", "route=api&limit=nope&key=u1",
			fmt.Errorf("%w: route %q, limit %q", gateway.ErrNoLimit, "api", "nope"), 404, "limit_not_found", true},
		{"key parts mismatch", "route=api&limit=user&key=u1&key=u2",
			errors.New(`limit "user" has 1 key parts; 2 values given`), 400, "bad_request", true},
		{"store down", "route=api&limit=user&key=u1",
			fmt.Errorf("redis: %w", limit.ErrStoreUnavailable), 503, "store_unavailable", true},
		{"store too slow", "route=api&limit=user&key=u1", context.DeadlineExceeded, 503, "store_unavailable", true},
	}
	for _, tt := range tests {
		for _, method := range []string{"GET", "DELETE"} {
			t.Run(method+" "+tt.name, func(t *testing.T) {
				b, h := newTest(t, "")
				b.limitErr = tt.err
				got := wantError(t, do(t, h, method, "/admin/limits?"+tt.query), tt.code, tt.errCode)
				if called := len(b.calls) > 0; called != tt.called {
					t.Errorf("backend called: %v, want %v", called, tt.called)
				}
				if tt.err != nil && got["message"] != tt.err.Error() {
					t.Errorf("message %q, want the backend's %q", got["message"], tt.err.Error())
				}
			})
		}
	}
}

func TestMethodNotAllowed(t *testing.T) {
	tests := []struct {
		method, path, allow string
	}{
		{"POST", "/healthz", "GET, HEAD"},
		{"POST", "/readyz", "GET, HEAD"},
		{"DELETE", "/metrics", "GET, HEAD"},
		{"POST", "/", "GET, HEAD"},
		{"PUT", "/admin/config", "GET, HEAD"},
		{"GET", "/admin/reload", "POST"},
		{"POST", "/admin/limits", "DELETE, GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			_, h := newTest(t, "s3cret")
			r := do(t, h, tt.method, tt.path, "Authorization", "Bearer s3cret")
			wantError(t, r, 405, "method_not_allowed")
			if got := r.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestNotFound(t *testing.T) {
	_, h := newTest(t, "")
	for _, p := range []string{"/nope", "/admin/nope", "/healthz/", "/admin"} {
		wantError(t, do(t, h, "GET", p), 404, "not_found")
	}
}

func TestToken(t *testing.T) {
	tests := []struct {
		name   string
		token  string // in the config
		path   string
		auth   string // the Authorization header
		wantOK bool
	}{
		{"no token configured", "", "/admin/config", "", true},
		{"no token configured, any header", "", "/admin/config", "Bearer whatever", true},
		{"token accepted", "s3cret", "/admin/config", "Bearer s3cret", true},
		{"scheme is case-insensitive", "s3cret", "/admin/config", "bearer s3cret", true},
		{"header missing", "s3cret", "/admin/config", "", false},
		{"wrong token", "s3cret", "/admin/config", "Bearer s3cre", false},
		{"longer token", "s3cret", "/admin/config", "Bearer s3cret2", false},
		{"wrong scheme", "s3cret", "/admin/config", "Basic s3cret", false},
		{"token alone", "s3cret", "/admin/config", "s3cret", false},
		{"reload protected", "s3cret", "/admin/reload", "", false},
		{"limits protected", "s3cret", "/admin/limits?route=api&limit=user&key=u1", "", false},
		{"unknown admin path protected", "s3cret", "/admin/nope", "", false},
		{"dot segments do not bypass", "s3cret", "/x/../admin/config", "", false},
		{"double slash does not bypass", "s3cret", "//admin/config", "", false},
		{"healthz open", "s3cret", "/healthz", "", true},
		{"readyz open", "s3cret", "/readyz", "", true},
		{"metrics open", "s3cret", "/metrics", "", true},
		{"dashboard open", "s3cret", "/", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, h := newTest(t, tt.token)
			method := "GET"
			if strings.HasPrefix(tt.path, "/admin/reload") {
				method = "POST"
			}
			var r response
			if tt.auth == "" {
				r = do(t, h, method, tt.path)
			} else {
				r = do(t, h, method, tt.path, "Authorization", tt.auth)
			}
			if !tt.wantOK {
				wantError(t, r, 401, "unauthorized")
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate %q, want a Bearer challenge", r.header.Get("WWW-Authenticate"))
				}
				return
			}
			if r.code == 401 || r.code >= 500 {
				t.Errorf("status %d, want the request let through; body %s", r.code, r.body)
			}
		})
	}
}

// The token is the running config's: a reload that changes it applies to
// the next request.
func TestTokenFollowsReload(t *testing.T) {
	b, h := newTest(t, "old")
	if r := do(t, h, "GET", "/admin/config", "Authorization", "Bearer old"); r.code != 200 {
		t.Fatalf("old token: status %d, want 200", r.code)
	}
	b.cfg.Store(parseConfig(t, "new"))
	if r := do(t, h, "GET", "/admin/config", "Authorization", "Bearer old"); r.code != 401 {
		t.Errorf("old token after reload: status %d, want 401", r.code)
	}
	if r := do(t, h, "GET", "/admin/config", "Authorization", "Bearer new"); r.code != 200 {
		t.Errorf("new token after reload: status %d, want 200", r.code)
	}
	b.cfg.Store(parseConfig(t, ""))
	if r := do(t, h, "GET", "/admin/config"); r.code != 200 {
		t.Errorf("token removed by reload: status %d, want 200", r.code)
	}
}

func TestDashboard(t *testing.T) {
	_, h := newTest(t, "")
	r := do(t, h, "GET", "/")
	if r.code != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, Content-Type %q; want 200 HTML", r.code, r.header.Get("Content-Type"))
	}
	for _, link := range []string{`href="metrics"`, `href="admin/config"`} {
		if !strings.Contains(r.body, link) {
			t.Errorf("dashboard has no %s", link)
		}
	}
}

func TestBreakers(t *testing.T) {
	f, h := newTest(t, "tok")
	auth := []string{"Authorization", "Bearer tok"}
	r := do(t, h, "GET", "/admin/breakers", auth...)
	wantJSON(t, r, 200, `{"breakers":[{"route":"coupon","state":"OPEN","value":1,"forced":false,"calls":0,"failures":0,"slow":0,"retry_after":2.5}]}`)
	if r := do(t, h, "POST", "/admin/breakers/coupon?state=closed"); r.code != 401 {
		t.Fatalf("force without the token: %d", r.code)
	}
	// The answer shows the breaker as GET does, in its casing.
	r = do(t, h, "POST", "/admin/breakers/coupon?state=closed", auth...)
	wantJSON(t, r, 200, `{"status":"ok","route":"coupon","scope":"instance","state":"CLOSED","forced":true}`)
	if f.forced != "coupon=closed" {
		t.Fatalf("forced %q", f.forced)
	}
	r = do(t, h, "POST", "/admin/breakers/coupon?state=OPEN&ttl=30m", auth...)
	wantJSON(t, r, 200, `{"status":"ok","route":"coupon","scope":"instance","state":"OPEN","forced":true,"ttl":1800}`)
	if f.forced != "coupon=open/30m0s" {
		t.Fatalf("forced %q", f.forced)
	}
	for _, bad := range []string{"soon", "-5m", "0s"} {
		if r := do(t, h, "POST", "/admin/breakers/coupon?state=open&ttl="+bad, auth...); r.code != 400 || !strings.Contains(r.body, "positive duration") {
			t.Fatalf("ttl %q: %d %s", bad, r.code, r.body)
		}
	}
	if r := do(t, h, "POST", "/admin/breakers/coupon?state=sideways", auth...); r.code != 400 {
		t.Fatalf("bad state: %d", r.code)
	}
	if r := do(t, h, "POST", "/admin/breakers/nope?state=open", auth...); r.code != 404 {
		t.Fatalf("unknown route: %d", r.code)
	}
	if r := do(t, h, "GET", "/admin/breakers/coupon", auth...); r.code != 405 {
		t.Fatalf("GET on a force path: %d", r.code)
	}
}

// /dashboard.json holds what the page draws: the counters of /metrics per
// route (also a configured route without traffic), the breakers' states,
// store errors and reloads; it is open like the page.
func TestDashboardJSON(t *testing.T) {
	b := &fakeBackend{}
	b.cfg.Store(parseConfig(t, "tok"))
	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_http_requests_total"}, []string{"route", "code"})
	limited := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_rate_limited_total"}, []string{"route", "limit"})
	storeErrs := prometheus.NewCounter(prometheus.CounterOpts{Name: "gateway_ratelimit_store_errors_total"})
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_config_reloads_total"}, []string{"result"})
	rls := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_rls_requests_total"}, []string{"domain", "code"})
	reg.MustRegister(requests, limited, storeErrs, reloads, rls)
	rls.WithLabelValues("edge", "OVER_LIMIT").Add(5)
	requests.WithLabelValues("coupon", "200").Add(7)
	requests.WithLabelValues("coupon", "429").Add(3)
	requests.WithLabelValues("coupon", "503").Add(2)
	limited.WithLabelValues("coupon", "user").Add(3)
	storeErrs.Add(4)
	reloads.WithLabelValues("ok").Inc()
	h := NewHandler(b, reg, slog.New(slog.DiscardHandler))

	r := do(t, h, "GET", "/dashboard.json")
	var d struct {
		Time   int64
		Routes []struct {
			Route    string
			Requests map[string]float64
			Rejected map[string]float64
			Breaker  *struct {
				State      string
				RetryAfter float64 `json:"retry_after"`
			}
		}
		StoreErrors float64 `json:"store_errors"`
		Reloads     map[string]float64
		RLS         map[string]map[string]float64
	}
	if r.code != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", r.code, r.header.Get("Content-Type"))
	}
	if err := json.Unmarshal([]byte(r.body), &d); err != nil {
		t.Fatalf("%v\n%s", err, r.body)
	}
	if d.Time <= 0 || d.StoreErrors != 4 || d.Reloads["ok"] != 1 || len(d.Routes) != 2 || d.RLS["edge"]["OVER_LIMIT"] != 5 {
		t.Fatalf("dashboard data: %s", r.body)
	}
	api, coupon := d.Routes[0], d.Routes[1]
	if api.Route != "api" || len(api.Requests) != 0 || api.Breaker != nil {
		t.Errorf("configured route without traffic: %+v", api)
	}
	if coupon.Route != "coupon" || coupon.Requests["200"] != 7 || coupon.Requests["429"] != 3 || coupon.Requests["503"] != 2 ||
		coupon.Rejected["user"] != 3 || coupon.Breaker == nil || coupon.Breaker.State != "OPEN" || coupon.Breaker.RetryAfter != 2.5 {
		t.Errorf("coupon: %+v", coupon)
	}
}

// noRoutes is a gateway that only serves the rate-limit service.
type noRoutes struct{ *fakeBackend }

func (noRoutes) Breakers() []gateway.BreakerStatus { return nil }

// Without routes the dashboard still gets a list to draw, empty.
func TestDashboardJSONNoRoutes(t *testing.T) {
	cfg, err := config.Parse("rls.yaml", []byte("rls: {listen: \"127.0.0.1:8081\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := noRoutes{&fakeBackend{}}
	b.cfg.Store(cfg)
	r := do(t, NewHandler(b, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)), "GET", "/dashboard.json")
	if r.code != 200 || !strings.Contains(r.body, `"routes":[]`) {
		t.Fatalf("status %d, body %s; want an empty routes list", r.code, r.body)
	}
}

// Every answer of the admin listener carries Cache-Control: no-store: each
// endpoint the handler routes, plus paths it does not know, under every
// method, with and without the token, from a backend that works and from
// one that fails, and before a config is loaded.
func TestNoStore(t *testing.T) {
	targets := []string{
		"/nope", "/admin", "/admin/nope", "/x/../admin/config",
		breakerPrefix + "coupon?state=open", breakerPrefix + "coupon?state=sideways",
		breakerPrefix + "nope?state=open", breakerPrefix + "a/b", breakerPrefix,
		"/admin/limits?route=api&limit=user&key=u1",
	}
	_, probe := newTest(t, "")
	for p := range probe.(*Handler).h.routes {
		targets = append(targets, p)
	}
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
	auths := map[string][]string{
		"no token":    nil,
		"wrong token": {"Authorization", "Bearer wrong"},
		"the token":   {"Authorization", "Bearer tok"},
	}
	backends := map[string]func(*fakeBackend){
		"working": func(*fakeBackend) {},
		"failing": func(b *fakeBackend) {
			b.reloadErr = fmt.Errorf("redis: %w", limit.ErrStoreUnavailable)
			b.readyErr = errors.New("store unavailable")
			b.limitErr = fmt.Errorf("redis: %w", limit.ErrStoreUnavailable)
		},
		"without a config": func(b *fakeBackend) { b.cfg.Store(nil) },
	}
	seen := map[int]bool{}
	for bname, setup := range backends {
		for aname, auth := range auths {
			b, h := newTest(t, "tok")
			setup(b)
			for _, target := range targets {
				for _, m := range methods {
					r := do(t, h, m, target, auth...)
					seen[r.code] = true
					if got := r.header.Values("Cache-Control"); len(got) != 1 || got[0] != "no-store" {
						t.Errorf("%s backend, %s: %s %s: %d with Cache-Control %q, want no-store", bname, aname, m, target, r.code, got)
					}
				}
			}
		}
	}
	// The walk reached every kind of answer.
	for _, code := range []int{200, 400, 401, 404, 405, 503} {
		if !seen[code] {
			t.Errorf("no answer had status %d", code)
		}
	}
}

// tokenEqual is the one comparison of a presented token with the
// configured one.
func TestTokenEqual(t *testing.T) {
	tests := []struct {
		got, want string
		equal     bool
	}{
		{"s3cret", "s3cret", true},
		{"s3cre", "s3cret", false},
		{"s3cret2", "s3cret", false},
		{"S3CRET", "s3cret", false},
		{"", "s3cret", false},
		{"s3cret\x00", "s3cret", false},
	}
	for _, tt := range tests {
		if got := tokenEqual(tt.got, tt.want); got != tt.equal {
			t.Errorf("tokenEqual(%q, %q) = %v, want %v", tt.got, tt.want, got, tt.equal)
		}
	}
}
