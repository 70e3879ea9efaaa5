package config

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/wantlines"
	"github.com/floodgate-gw/floodgate/limit"
)

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\nsource:\n%s", err, wantlines.Numbered(src))
	}
	return c
}

func parseErrors(t *testing.T, src string) Errors {
	t.Helper()
	_, err := Parse("test.yaml", []byte(src))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse error %v (%T), want Errors", err, err)
	}
	return errs
}

// Whole-file problems: each is one error, at the parser's line.
func TestParseFile(t *testing.T) {
	tests := []struct {
		name, src string
		line      int
		want      string
	}{
		{"empty", "", 1, "empty config"},
		{"only comments", "# nothing yet\n\n# still nothing\n", 1, "empty config"},
		{"only a document marker", "---\n", 1, "empty config"},
		{"null", "~\n", 1, "empty config"},
		{"not a mapping", "- a\n- b\n", 1, "the config must be a mapping"},
		{"a scalar", "hello\n", 1, "the config must be a mapping"},
		{"bad indentation", "server:\n  listen: x\n    admin: y\n", 3, "invalid YAML: mapping values are not allowed in this context"},
		{"unclosed flow", "routes: [\n", 1, "invalid YAML: did not find expected node content"},
		{"unclosed quote", "server:\n  listen: \"x\n", 2, "invalid YAML: found unexpected end of stream"},
		{"tab indentation", "server:\n\tlisten: x\n", 2, "invalid YAML: found character that cannot start any token"},
		{"unknown anchor", "server:\n  listen: x\nadmin:\n  listen: *nope\n", 4, "invalid YAML: unknown anchor 'nope' referenced"},
		{"entry after a block sequence", "routes:\n  - id: x\n    match: {path: /a}\n  bogus: 1\n", 4, "invalid YAML: did not find expected '-' indicator"},
		{"two documents", "server: {}\n---\nadmin: {}\n", 2, "a config file holds one YAML document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := parseErrors(t, tt.src)
			if len(errs) != 1 {
				t.Fatalf("got %d errors, want 1:\n%v", len(errs), errs)
			}
			if errs[0].Line != tt.line || !strings.Contains(errs[0].Msg, tt.want) {
				t.Errorf("got %v, want line %d with %q", errs[0], tt.line, tt.want)
			}
		})
	}
}

func TestEveryErrorAtOnce(t *testing.T) {
	src := `server:
  listen: ":8080"
  shutdown_timout: 10s
  ipv6_prefix: 200
routes:
  - id: lucky-meal
    match: {path: /api/activities/lucky-meal/receive, methods: [POST]}
    upstream:
      targets: ["127.0.0.1:9000"]
      timeout: 3
    limits:
      - name: user
        key: [header:X-User-Id, user]
        rate: 0/s
    breaker:
      failure_rate: 1.5
`
	want := `floodgate.yaml:3: server: unknown key "shutdown_timout" (did you mean "shutdown_timeout"?)
floodgate.yaml:4: server.ipv6_prefix: 200 is outside 0..128
floodgate.yaml:9: routes[0].upstream.targets[0]: "127.0.0.1:9000" is not an absolute http(s) URL (write it as http://127.0.0.1:9000)
floodgate.yaml:10: routes[0].upstream.timeout: "3" is not a duration (write it as 250ms, 10s or 1m)
floodgate.yaml:13: routes[0].limits[0].key[1]: unknown key source "user" (global, route, path, method, host, ip, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, tls:subject)
floodgate.yaml:14: routes[0].limits[0].rate: rate "0/s": count 0 must be positive
floodgate.yaml:16: routes[0].breaker.failure_rate: 1.5 is outside (0,1]`
	_, err := Parse("floodgate.yaml", []byte(src))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	if err.Error() != want {
		t.Errorf("errors:\n%v\nwant:\n%s", err, want)
	}
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 7 {
		t.Fatalf("errors.As(Errors) = %v with %d errors, want 7", errs, len(errs))
	}
	var one Error
	if !errors.As(err, &one) || one.Line != 3 {
		t.Errorf("errors.As(Error) = %+v, want the first, at line 3", one)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "missing.yaml"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Line != 0 {
		t.Fatalf("Load(missing) = %v, want one Errors entry without a line", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want errors.Is fs.ErrNotExist", err)
	}
	if want := filepath.Join(dir, "missing.yaml") + ": cannot read: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load(missing) = %q, want prefix %q", err, want)
	}

	path := filepath.Join(dir, "fg.yaml")
	if err := os.WriteFile(path, []byte(okRoute), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.File != path || c.Routes[0].ID != "ok" {
		t.Errorf("Load: File %q, routes %v", c.File, c.Routes)
	}
}

// Every default, as docs/configuration.md lists them.
func TestDefaults(t *testing.T) {
	c := mustParse(t, `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - name: l
        key: [ip]
        rate: 10/s
      - name: tb
        key: [ip]
        algorithm: token_bucket
        rate: 6000/min
`)
	want := Server{
		Listen:          ":8080",
		IPv6Prefix:      64,
		ShutdownTimeout: 10 * time.Second,
		RequestIDHeader: "X-Request-Id",
		MaxHeaderBytes:  65536,
		BodyTimeout:     time.Minute,
		SendTimeout:     time.Minute,
		AccessLog:       "off",
		TLS:             ServerTLS{MinVersion: "1.2", ClientAuth: "none"},
		HTTP2: HTTP2{MaxConcurrentStreams: 100, MaxReadFrameSize: 1 << 20,
			InitialStreamWindow: 1 << 20, InitialConnWindow: 1 << 20},
	}
	if !reflect.DeepEqual(c.Server, want) {
		t.Errorf("Server = %+v, want %+v", c.Server, want)
	}
	if !reflect.DeepEqual(c.Admin, Admin{Listen: "127.0.0.1:9090"}) {
		t.Errorf("Admin = %+v", c.Admin)
	}
	if c.RLS != (RLS{}) {
		t.Errorf("RLS = %+v", c.RLS)
	}
	wantStore := Store{
		Type:    StoreMemory,
		Redis:   Redis{Mode: RedisStandalone, Prefix: "fg:", Timeout: 50 * time.Millisecond},
		Memory:  Memory{MaxKeys: 1000000},
		OnError: OnErrorLocal,

		LocalRejects: true, LocalRejectsMax: 1000000,
	}
	if !reflect.DeepEqual(c.Store, wantStore) || !c.Store.LocalShare.Auto() {
		t.Errorf("Store = %+v, want %+v", c.Store, wantStore)
	}
	r := c.Routes[0]
	wantUp := Upstream{ConnectTimeout: 2 * time.Second, Timeout: 3 * time.Second, IdleTimeout: 60 * time.Second,
		Balance:  BalanceRoundRobin,
		Health:   Health{Timeout: time.Second, HealthyAfter: 2, UnhealthyAfter: 3},
		Eject:    Eject{ConsecutiveFailures: 5, BaseTime: 5 * time.Second, MaxTime: time.Minute},
		Protocol: ProtocolHTTP1}
	wantUp.Targets = r.Upstream.Targets
	if !reflect.DeepEqual(r.Upstream, wantUp) {
		t.Errorf("Upstream = %+v", r.Upstream)
	}
	wantBreaker := Breaker{
		Window: 10 * time.Second, MinCalls: 20, FailureRate: 0.5, SlowCallRate: 1.0,
		FailureStatuses: []int{500, 502, 503, 504}, OpenFor: 30 * time.Second, HalfOpenCalls: 10, Scope: BreakerInstance,
	}
	if !reflect.DeepEqual(r.Breaker, wantBreaker) {
		t.Errorf("Breaker = %+v, want %+v", r.Breaker, wantBreaker)
	}
	if r.Fallback != (Fallback{Status: 503, Code: "service_unavailable"}) {
		t.Errorf("Fallback = %+v", r.Fallback)
	}
	l := r.Limits[0]
	if l.OnMissing != OnMissingDeny || l.Algorithm != limit.FixedWindow || l.Align != limit.AlignEpoch ||
		l.TZ != nil || !l.Headers || l.Shadow || l.OnError != "" || l.Cost != 1 || l.Burst != 0 || l.Queue != 0 ||
		l.Reject != (Reject{Status: 429, Code: "rate_limited"}) {
		t.Errorf("limit defaults: %+v", l)
	}
	// burst defaults to the count as written: 6000/min has burst 6000.
	if tb := r.Limits[1]; tb.Burst != 6000 || tb.Rule.Burst != 6000 || tb.Rule.Algorithm != limit.TokenBucket {
		t.Errorf("token bucket burst = %d (rule %d), want 6000", tb.Burst, tb.Rule.Burst)
	}
	e := c.Events
	wantEvents := Events{
		Sink:          SinkNone,
		Redis:         EventsRedis{Stream: "fg:events", MaxLen: 1000000},
		NATS:          EventsNATS{URL: "nats://127.0.0.1:4222", Subject: "floodgate.events"},
		Kafka:         EventsKafka{Topic: "floodgate-events", ClientID: "floodgate", Acks: "all", Compression: "none"},
		File:          EventsFile{Path: "floodgate-events.jsonl"},
		SpoolMaxBytes: 1 << 30,
		Audit:         AuditNone,
		MaxBody:       65536,
		Headers:       []string{"Content-Type", "X-User-Id", "Authorization"},
	}
	if !reflect.DeepEqual(e, wantEvents) {
		t.Errorf("Events = %+v, want %+v", e, wantEvents)
	}
}

// Leaving a key's value empty ("timeout:") is leaving it out.
func TestNullKeepsDefault(t *testing.T) {
	c := mustParse(t, `
server:
  listen:
  shutdown_timeout: ~
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"], timeout: }
`)
	if c.Server.Listen != ":8080" || c.Server.ShutdownTimeout != 10*time.Second || c.Routes[0].Upstream.Timeout != 3*time.Second {
		t.Errorf("null values changed defaults: %+v %+v", c.Server, c.Routes[0].Upstream)
	}
}

const fullConfig = `
server:
  listen: "0.0.0.0:8080"
  trusted_proxies: [10.0.0.0/8, 192.168.1.7, "2001:db8::/32", "::ffff:10.1.1.1"]
  ipv6_prefix: 56
  shutdown_timeout: 15s
  request_id_header: X-Trace-Id
  max_header_bytes: 32768
  max_body_bytes: 1048576
admin:
  listen: "127.0.0.1:9191"
  token_env: FG_TEST_ADMIN_TOKEN
rls:
  listen: ":8081"
  config_dir: /etc/ratelimit
store:
  type: redis
  redis:
    mode: sentinel
    addrs: ["10.0.0.1:26379", "10.0.0.2:26379"]
    master_name: mymaster
    username: floodgate
    password_env: FG_TEST_REDIS_PASSWORD
    db: 3
    tls: true
    prefix: "gw:"
    timeout: 80ms
  memory: {max_keys: 5000}
  on_error: deny
  local_share: 0.25
global_limits:
  - name: global
    key: [global]
    rate: 2000/s
    reject: {code: system_busy, message: "Too busy, try again later"}
  - name: inflight
    key: [global]
    algorithm: concurrency
    limit: 500
routes:
  - id: lucky-meal
    match:
      path: /api/activities/lucky-meal/receive
      methods: [post, Get]
      host: Coupons.Example.COM
    upstream:
      targets: ["http://127.0.0.1:9000", "https://coupons.internal:8443/base"]
      connect_timeout: 500ms
      timeout: 2s
      idle_timeout: 30s
    limits:
      - name: user
        key: [header:X-User-Id, path]
        fallback: [ip]
        on_missing: allow
        algorithm: fixed_window
        align: epoch
        tz: Asia/Shanghai
        shadow: true
        headers: false
        on_error: allow
        limit: 1
        window: 10s
        reject: {status: 429, code: repeat_apply, message: "You have already taken part"}
        overrides:
          - values: [[vip-1, /api/activities/lucky-meal/receive], [vip-2, /api/activities/lucky-meal/receive]]
            rate: 5/10s
      - name: api
        key: [route]
        algorithm: token_bucket
        rate: 800/s
        burst: 1000
        queue: 250ms
        cost: 2
        reject: {code: system_busy}
        overrides:
          - header: {name: X-User-Tier, value: vip}
            rate: 1600/s
      - name: ip
        key: [ip]
        algorithm: sliding_window
        rate: "100:60"
        overrides:
          - values: ["10.1.2.3"]
            rate: 1000/min
      - name: first
        key: ["query:user[id]", cookie:sid, method, host]
        align: first
        rate: 10/h
      - name: conc
        key: [route]
        algorithm: concurrency
        limit: 50
        overrides:
          - values: [lucky-meal]
            limit: 80
    breaker:
      enabled: true
      window: 20s
      min_calls: 5
      failure_rate: 0.25
      slow_call_duration: 1500ms
      slow_call_rate: 0.8
      failure_statuses: [500, 503]
      open_for: 45s
      half_open_calls: 3
    fallback:
      status: 202
      code: queued
      message: "Your entry is recorded"
      record: true
  - id: orders
    match: {path: /api/orders/**}
    upstream:
      targets: ["http://127.0.0.1:9001"]
      strip_prefix: /api
      connect_timeout: 3s
      timeout: 30s
responses:
  system_busy: "Too busy, try again later"
  ip_busy: "Too many requests from your address"
events:
  sink: nats
  redis: {stream: "gw:events", maxlen: 5000, addrs: ["10.0.0.9:6379"]}
  nats: {url: "nats://events:secretpw@10.0.0.5:4222", subject: "gw.events"}
  file: {path: /var/log/fg.jsonl}
  spool_dir: /var/spool/floodgate
  spool_max_bytes: 1048576
  audit: rejected
  max_body: 0
  headers: [Content-Type]
`

func TestFullConfig(t *testing.T) {
	t.Setenv("FG_TEST_ADMIN_TOKEN", "admin-token-value")
	t.Setenv("FG_TEST_REDIS_PASSWORD", "redis-password-value")
	c := mustParse(t, fullConfig)

	s := c.Server
	wantProxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("10.1.1.1/32"),
	}
	if !reflect.DeepEqual(s.TrustedProxies, wantProxies) {
		t.Errorf("TrustedProxies = %v, want %v", s.TrustedProxies, wantProxies)
	}
	if s.Listen != "0.0.0.0:8080" || s.IPv6Prefix != 56 || s.ShutdownTimeout != 15*time.Second ||
		s.RequestIDHeader != "X-Trace-Id" || s.MaxHeaderBytes != 32768 || s.MaxBodyBytes != 1048576 {
		t.Errorf("Server = %+v", s)
	}
	if c.Admin.Token != "admin-token-value" || c.Admin.TokenEnv != "FG_TEST_ADMIN_TOKEN" || c.Admin.Listen != "127.0.0.1:9191" {
		t.Errorf("Admin = %+v", c.Admin)
	}
	if c.RLS != (RLS{Listen: ":8081", ConfigDir: "/etc/ratelimit"}) {
		t.Errorf("RLS = %+v", c.RLS)
	}
	r := c.Store.Redis
	if c.Store.Type != StoreRedis || r.Mode != RedisSentinel || len(r.Addrs) != 2 || r.MasterName != "mymaster" ||
		r.Username != "floodgate" || r.Password != "redis-password-value" || r.DB != 3 || !r.TLS ||
		r.Prefix != "gw:" || r.Timeout != 80*time.Millisecond {
		t.Errorf("Redis = %+v", r)
	}
	if c.Store.Memory.MaxKeys != 5000 || c.Store.OnError != OnErrorDeny || c.Store.LocalShare != 0.25 {
		t.Errorf("Store = %+v", c.Store)
	}

	g := c.GlobalLimits
	if g[0].Rule.Name != "global:global" || g[0].Rule.Rate != (limit.Rate{Count: 2000, Period: time.Second}) {
		t.Errorf("global rule = %+v", g[0].Rule)
	}
	// A global concurrency lease outlives the slowest route: orders,
	// 3s + 30s, plus 5s.
	if g[1].Rule.LeaseTTL != 38*time.Second || g[1].Rule.Rate.Count != 500 || g[1].Limit != 500 || g[1].Cost != 0 {
		t.Errorf("global concurrency = %+v, rule %+v", g[1], g[1].Rule)
	}

	lm := c.Routes[0]
	if lm.Line != 41 {
		t.Errorf("route line = %d, want 41", lm.Line)
	}
	if !reflect.DeepEqual(lm.Match.Methods, []string{"POST", "GET"}) || lm.Match.Host != "coupons.example.com" {
		t.Errorf("Match = %+v", lm.Match)
	}
	if got := lm.Upstream.Targets[1]; got.Scheme != "https" || got.Host != "coupons.internal:8443" || got.Path != "/base" {
		t.Errorf("target = %v", got)
	}
	if u := lm.Upstream; u.ConnectTimeout != 500*time.Millisecond || u.Timeout != 2*time.Second || u.IdleTimeout != 30*time.Second {
		t.Errorf("Upstream = %+v", u)
	}

	user := lm.Limits[0]
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	if user.Line != 52 || user.Rule.Name != "lucky-meal:user" || user.Rate != (limit.Rate{Count: 1, Period: 10 * time.Second}) ||
		user.Limit != 0 || user.Window != 0 || user.TZ.String() != shanghai.String() || user.Rule.Location == nil ||
		!user.Shadow || !user.Rule.Shadow || user.Headers || user.OnError != OnErrorAllow || user.OnMissing != OnMissingAllow {
		t.Errorf("user = %+v, rule %+v", user, user.Rule)
	}
	if want := []KeyPart{{SourceHeader, "X-User-Id"}, {SourcePath, ""}}; !reflect.DeepEqual(user.Key, want) {
		t.Errorf("Key = %v, want %v", user.Key, want)
	}
	if user.Key[0].Kind() != "header:x-user-id" || user.Key[0].String() != "header:X-User-Id" {
		t.Errorf("KeyPart Kind %q String %q", user.Key[0].Kind(), user.Key[0])
	}
	if want := []KeyPart{{SourceIP, ""}}; !reflect.DeepEqual(user.Fallback, want) {
		t.Errorf("Fallback = %v", user.Fallback)
	}
	o := user.Overrides[0]
	if want := []KeyValues{{"vip-1", "/api/activities/lucky-meal/receive"}, {"vip-2", "/api/activities/lucky-meal/receive"}}; !reflect.DeepEqual(o.Values, want) {
		t.Errorf("override values = %v", o.Values)
	}
	if o.Rule.Name != "lucky-meal:user#o1" || o.Rule.Rate.Count != 5 || o.Rule.Location == nil || !o.Rule.Shadow || o.Line != 66 {
		t.Errorf("override = %+v, rule %+v", o, o.Rule)
	}

	api := lm.Limits[1]
	if api.Algorithm != limit.TokenBucket || api.Burst != 1000 || api.Queue != 250*time.Millisecond || api.Cost != 2 ||
		api.Rule.Burst != 1000 || api.Rule.Cost != 2 || api.Rule.Queue != 250*time.Millisecond {
		t.Errorf("api = %+v, rule %+v", api, api.Rule)
	}
	ao := api.Overrides[0]
	// The override's burst is its own count as written, and it inherits
	// the limit's cost and queue.
	if *ao.Header != (HeaderMatch{"X-User-Tier", "vip"}) || ao.Burst != 1600 || ao.Rule.Burst != 1600 ||
		ao.Rule.Cost != 2 || ao.Rule.Queue != 250*time.Millisecond || ao.Rule.Name != "lucky-meal:api#o1" {
		t.Errorf("api override = %+v, rule %+v", ao, ao.Rule)
	}
	ip := lm.Limits[2]
	if ip.Rate != (limit.Rate{Count: 100, Period: time.Minute}) || ip.Overrides[0].Values[0][0] != "10.1.2.3" {
		t.Errorf("ip = %+v", ip)
	}
	first := lm.Limits[3]
	if first.Align != limit.AlignFirst || first.Rule.Align != limit.AlignFirst ||
		!reflect.DeepEqual(first.Key, []KeyPart{{SourceQuery, "user[id]"}, {SourceCookie, "sid"}, {SourceMethod, ""}, {SourceHost, ""}}) {
		t.Errorf("first = %+v", first)
	}
	conc := lm.Limits[4]
	// The route's longest queue (its token bucket's 250ms) + connect_timeout
	// 500ms + timeout 2s + 5s: a request holds its lease while it waits.
	if conc.Rule.LeaseTTL != 7750*time.Millisecond || conc.Rule.Rate.Count != 50 || conc.Overrides[0].Rule.Rate.Count != 80 ||
		conc.Overrides[0].Rule.LeaseTTL != 7750*time.Millisecond || conc.Rule.Algorithm != limit.Concurrency {
		t.Errorf("conc rule %+v, override %+v", conc.Rule, conc.Overrides[0].Rule)
	}

	b := lm.Breaker
	if !b.Enabled || b.Window != 20*time.Second || b.MinCalls != 5 || b.FailureRate != 0.25 ||
		b.SlowCallDuration != 1500*time.Millisecond || b.SlowCallRate != 0.8 ||
		!reflect.DeepEqual(b.FailureStatuses, []int{500, 503}) || b.OpenFor != 45*time.Second || b.HalfOpenCalls != 3 {
		t.Errorf("Breaker = %+v", b)
	}
	if lm.Fallback != (Fallback{Status: 202, Code: "queued", Message: "Your entry is recorded", Record: true}) {
		t.Errorf("Fallback = %+v", lm.Fallback)
	}
	if c.Routes[1].Upstream.StripPrefix != "/api" {
		t.Errorf("orders = %+v", c.Routes[1].Upstream)
	}
	e := c.Events
	if e.Sink != SinkNATS || e.Redis.Stream != "gw:events" || e.Redis.MaxLen != 5000 || len(e.Redis.Addrs) != 1 ||
		e.NATS.Subject != "gw.events" || e.File.Path != "/var/log/fg.jsonl" || e.SpoolDir != "/var/spool/floodgate" ||
		e.SpoolMaxBytes != 1048576 || e.Audit != AuditRejected || e.MaxBody != 0 || !reflect.DeepEqual(e.Headers, []string{"Content-Type"}) {
		t.Errorf("Events = %+v", e)
	}
	if got := c.Summary(); got != "test.yaml: ok: 2 routes, 7 limits, store redis (sentinel), admin 127.0.0.1:9191, rls :8081" {
		t.Errorf("Summary = %q", got)
	}
}

// The admin view is itself a valid config: parsing it again gives the
// same view, so nothing is lost or invented between file and JSON.
func TestRoundTrip(t *testing.T) {
	t.Setenv("FG_TEST_ADMIN_TOKEN", "admin-token-value")
	t.Setenv("FG_TEST_REDIS_PASSWORD", "redis-password-value")
	// Without the secrets, which the view replaces by "***".
	src := strings.NewReplacer(
		"  token_env: FG_TEST_ADMIN_TOKEN\n", "",
		"    password_env: FG_TEST_REDIS_PASSWORD\n", "",
		"events:secretpw@", "",
	).Replace(fullConfig)
	c1 := mustParse(t, src)
	j1, err := json.Marshal(c1.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Parse("view.json", j1)
	if err != nil {
		t.Fatalf("the view does not parse: %v\n%s", err, j1)
	}
	j2, _ := json.Marshal(c2.Redacted())
	if string(j1) != string(j2) {
		t.Errorf("round trip changed the config:\n%s\n%s", j1, j2)
	}
	for i, r := range c1.Routes {
		for j, l := range r.Limits {
			l2 := c2.Routes[i].Limits[j]
			// The settings that name the rule's counters and its limit.
			a, b := l.Rule, l2.Rule
			if a.Algorithm != b.Algorithm || a.Rate != b.Rate || a.Burst != b.Burst || a.Align != b.Align || a.Window() != b.Window() {
				t.Errorf("%s: rule %+v became %+v", l.Rule.Name, l.Rule, l2.Rule)
			}
		}
	}
}

func TestRedacted(t *testing.T) {
	t.Setenv("FG_TEST_ADMIN_TOKEN", "admin-token-value")
	t.Setenv("FG_TEST_REDIS_PASSWORD", "redis-password-value")
	c := mustParse(t, fullConfig)
	b, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, secret := range []string{"admin-token-value", "redis-password-value", "secretpw", ":pw@"} {
		if strings.Contains(out, secret) {
			t.Errorf("the view shows the secret %q:\n%s", secret, out)
		}
	}
	for _, want := range []string{
		`"token":"***"`, `"token_env":"FG_TEST_ADMIN_TOKEN"`, `"password":"***"`, `"password_env":"FG_TEST_REDIS_PASSWORD"`,
		`"url":"nats://events:***@10.0.0.5:4222"`,
		`"shutdown_timeout":"15s"`, `"rate":"1/10s"`, `"algorithm":"token_bucket"`, `"tz":"Asia/Shanghai"`,
		`"trusted_proxies":["10.0.0.0/8","192.168.1.7/32","2001:db8::/32","10.1.1.1/32"]`,
		`"key":["header:X-User-Id","path"]`, `"local_share":"0.25"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the view lacks %s:\n%s", want, out)
		}
	}
	// Keys keep the file's order.
	if !strings.HasPrefix(out, `{"server":{"listen":"0.0.0.0:8080","trusted_proxies":`) {
		t.Errorf("the view starts %.60s", out)
	}
	// An unset secret shows as empty, not as a fake "***".
	c = mustParse(t, okRoute)
	b, _ = json.Marshal(c.Redacted())
	if !strings.Contains(string(b), `"token":""`) || !strings.Contains(string(b), `"password":""`) {
		t.Errorf("unset secrets: %s", b)
	}
}

func TestMessage(t *testing.T) {
	c := mustParse(t, `
global_limits:
  - name: g
    key: [global]
    rate: 10/s
    reject: {code: system_busy}
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: user
        key: [ip]
        rate: 1/s
        reject: {code: repeat_apply, message: "You have already taken part"}
      - name: bare
        key: [ip]
        rate: 1/s
        reject: {code: slow_down}
    fallback: {code: coupon_busy}
responses:
  system_busy: "Too busy, try again later"
  route_not_found: "Nothing here"
`)
	tests := map[string]string{
		"repeat_apply":         "You have already taken part",                             // the reject's own
		"system_busy":          "Too busy, try again later",                               // from responses
		"route_not_found":      "Nothing here",                                            // responses over built-in
		"rate_limited":         "Too many requests, try again later",                      // built-in
		"limiter_unavailable":  "The rate limiter is unavailable, try again later",        // built-in
		"slow_down":            "Too many requests, try again later",                      // a reject's code with no text
		"coupon_busy":          "The service is temporarily unavailable, try again later", // a fallback's code with no text
		"never_configured_xyz": "",
	}
	for code, want := range tests {
		if got := c.Message(code); got != want {
			t.Errorf("Message(%q) = %q, want %q", code, got, want)
		}
	}
	for code := range builtinMessages {
		if c.Message(code) == "" {
			t.Errorf("Message(%q) is empty", code)
		}
	}
}

func TestSummary(t *testing.T) {
	c := mustParse(t, `
admin: {listen: ""}
rls: {listen: ":8081"}
`)
	if got, want := c.Summary(), "test.yaml: ok: 0 routes, 0 limits, store memory, admin off, rls :8081"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	if got := mustParse(t, okRoute).String(); got != "test.yaml: ok: 1 route, 0 limits, store memory, admin 127.0.0.1:9090" {
		t.Errorf("String = %q", got)
	}
}

// Anchors, aliases and merge keys work, so long configs can share blocks.
func TestAliases(t *testing.T) {
	c := mustParse(t, `
routes:
  - id: a
    match: {path: /a}
    upstream: &up
      targets: ["http://127.0.0.1:9000"]
      timeout: 5s
    limits: &limits
      - name: ip
        key: [ip]
        rate: 10/s
  - id: b
    match: {path: /b}
    upstream:
      <<: *up
      timeout: 7s
    limits: *limits
`)
	a, b := c.Routes[0], c.Routes[1]
	if a.Upstream.Timeout != 5*time.Second || b.Upstream.Timeout != 7*time.Second || len(b.Upstream.Targets) != 1 {
		t.Errorf("upstreams: %+v, %+v", a.Upstream, b.Upstream)
	}
	if b.Limits[0].Rule.Name != "b:ip" || a.Limits[0].Rule.Name != "a:ip" || a.Limits[0] == b.Limits[0] {
		t.Errorf("aliased limits share state: %v %v", a.Limits[0].Rule.Name, b.Limits[0].Rule.Name)
	}
}

// Nested aliases may not expand a small file into billions of nodes.
func TestAliasBomb(t *testing.T) {
	src := `
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: l
        key: [ip]
        rate: 1/s
        overrides:
          - values: [*g, *g, *g, *g, *g, *g, *g, *g]
            rate: 2/s
`
	done := make(chan Errors, 1)
	go func() {
		_, err := Parse("bomb.yaml", []byte(src))
		var errs Errors
		errors.As(err, &errs)
		done <- errs
	}()
	select {
	case errs := <-done:
		if len(errs) == 0 {
			t.Fatal("Parse accepted the alias bomb")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Parse did not return: the aliases were expanded")
	}
}

func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Routes) == 0 {
				t.Error("no routes")
			}
		})
	}
}

// Every example listens on this machine only, so that trying one opens
// nothing to the network; its comments say how to open it up.
func TestExamplesBindLoopback(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v, %v", files, err)
	}
	for _, f := range append(files, "../examples/rls/floodgate.yaml") {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range []struct{ key, addr string }{
				{"server.listen", c.Server.Listen}, {"admin.listen", c.Admin.Listen}, {"rls.listen", c.RLS.Listen},
			} {
				if l.addr == "" {
					continue
				}
				host, _, err := net.SplitHostPort(l.addr)
				if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
					t.Errorf("%s %q: not a loopback address", l.key, l.addr)
				}
			}
			// Written out, not left to the defaults: the file shows where
			// it listens.
			for _, key := range []string{"\nserver:\n", "\nadmin:\n"} {
				if !strings.Contains(string(raw), key) {
					t.Errorf("no %q section", strings.TrimSpace(key))
				}
			}
		})
	}
}

func TestFlashSaleExample(t *testing.T) {
	c, err := Load("../examples/flash-sale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]limit.Rate{}
	for _, l := range c.GlobalLimits {
		rules[l.Rule.Name] = l.Rule.Rate
	}
	for _, l := range c.Routes[0].Limits {
		rules[l.Rule.Name] = l.Rule.Rate
	}
	want := map[string]limit.Rate{
		"global:global":   {Count: 2000, Period: time.Second},
		"lucky-meal:api":  {Count: 400, Period: time.Second},
		"lucky-meal:user": {Count: 1, Period: 10 * time.Second},
		"lucky-meal:ip":   {Count: 100, Period: time.Minute},
	}
	if !reflect.DeepEqual(rules, want) {
		t.Errorf("rules = %v, want %v", rules, want)
	}
	// The coupon API degrades past 500 a second: a token bucket of 400/s
	// and a burst of 40 lets at most 440 reach it in any second, where a
	// fixed window lets up to twice its rate through across a boundary.
	if api := c.Routes[0].Limits[1].Rule; api.Name != "lucky-meal:api" || api.Algorithm != limit.TokenBucket || api.Burst != 40 {
		t.Errorf("api limit %+v, want a token bucket with a burst of 40", api)
	}
	// Protection starts at, and never goes over, what the api limit lets
	// through in a second: on a good day it turns away nothing the limits
	// admit. It does not ramp up when the gateway starts, which the
	// README's walk-through does under load.
	if p := c.Routes[0].Protect; p == nil || p.Max != 440 || p.Min != 200 || p.WarmUp != 0 {
		t.Errorf("protect %+v, want max 440 (the api limit's rate and burst), min 200, warm_up 0s", p)
	}
	if c.Server.Listen != "127.0.0.1:8080" || c.Admin.Listen != "127.0.0.1:9090" {
		t.Errorf("listen %q, admin %q; want both on 127.0.0.1", c.Server.Listen, c.Admin.Listen)
	}
	if got := c.Message("repeat_apply"); got != "You have already taken part" {
		t.Errorf("repeat_apply: %q", got)
	}
	if got := c.Message("system_busy"); got != "Too busy, try again later" {
		t.Errorf("system_busy: %q", got)
	}
}

func TestTokenBucketExample(t *testing.T) {
	c, err := Load("../examples/token-bucket.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0].Limits[0].Rule
	if c.Store.Type != StoreRedis || r.Algorithm != limit.TokenBucket || r.Rate != (limit.Rate{Count: 100, Period: time.Second}) || r.Burst != 200 {
		t.Errorf("store %s, rule %+v", c.Store.Type, r)
	}
}

func TestRLSAnswers(t *testing.T) {
	c := mustParse(t, `
rls: {listen: ":8081", shadow: true, response_headers: envoy}
`)
	if !c.RLS.Shadow || c.RLS.ResponseHeaders != "envoy" {
		t.Fatalf("rls %+v, want shadow and envoy headers", c.RLS)
	}
	c = mustParse(t, `
rls: {listen: ":8081"}
`)
	if c.RLS.Shadow || c.RLS.ResponseHeaders != "" {
		t.Fatalf("rls %+v, want neither shadow nor headers", c.RLS)
	}
}
