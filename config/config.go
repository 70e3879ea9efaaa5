package config

import (
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// Config is a whole floodgate configuration (docs/configuration.md), decoded, defaulted and
// validated. A Config is immutable: Parse builds a new one for every load and
// reload, and nothing may change it afterwards, so a request that started
// under one config finishes under it.
//
// Fields hold their defaults when the file leaves them out; each field's doc
// says what its zero value means when it may legitimately be zero.
type Config struct {
	// File is the name the config was parsed under, as errors and
	// Summary print it.
	File string `yaml:"-"`

	// Warnings are what Parse found probably wrong in a valid config (a
	// route no request can reach), each at its line, as errors are.
	// check and serve print them; nothing else depends on them.
	Warnings Errors `yaml:"-" json:"-"`

	// Server, Admin, RLS and Store are the blocks of the same names; a
	// block the file leaves out holds its defaults.
	Server Server `yaml:"server"`
	Admin  Admin  `yaml:"admin"`
	RLS    RLS    `yaml:"rls"`
	Store  Store  `yaml:"store"`

	// GlobalLimits apply to every route, before the route's own limits.
	// Their rules are named "global:NAME". Empty: no global limits.
	GlobalLimits []*Limit `yaml:"global_limits"`

	// Routes in file order; the first whose Match matches a request takes
	// it. Empty only when RLS.Listen is set.
	Routes []*Route `yaml:"routes"`

	// Responses is the code dictionary: code -> message, for rejections and
	// fallbacks that give no message of their own. Nil: none. Use Message
	// rather than reading it, since a reject or fallback may also name a
	// code's message.
	Responses map[string]string `yaml:"responses"`

	// Events is where recorded requests go; by default nowhere.
	Events Events `yaml:"events"`

	// Tracing is the export of request traces; by default off.
	Tracing Tracing `yaml:"tracing"`

	// messages resolves every code the gateway may answer with; see Message.
	messages map[string]string
	// lines holds the line of each value the file gives; see Line.
	lines map[string]int
}

// Line returns the line of the file that gives the value at path, written
// as errors write it ("rls.config_dir", "routes[0].upstream"), or of the
// nearest enclosing value the file gives; 0 for a Config not from Parse.
// It lets a caller that checks a setting further (the rule files of
// rls.config_dir, say) report its problem where the setting is.
func (c *Config) Line(path string) int {
	if c.lines == nil {
		return 0
	}
	v := &validator{lines: c.lines}
	return v.line(path)
}

// Server is the proxy's listener and request handling.
type Server struct {
	// Listen is the address the gateway serves HTTP on. Default ":8080".
	Listen string `yaml:"listen"`

	// TrustedProxies are the peers whose X-Forwarded-For is believed when
	// resolving the client IP (docs/configuration.md, server). A bare IP in the file is a
	// single-address prefix. Empty: no peer is trusted, and the client IP
	// is always the connection's address.
	TrustedProxies []netip.Prefix `yaml:"trusted_proxies"`

	// IPv6Prefix is how many leading bits of an IPv6 client address form
	// the ip key part, so that one client cannot rotate through its /64.
	// Default 64; 128 limits every address on its own.
	IPv6Prefix int `yaml:"ipv6_prefix"`

	// ShutdownTimeout bounds how long a stopping gateway drains in-flight
	// requests. Default 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`

	// ShutdownDelay is how long a stopping gateway goes on accepting and
	// serving, with /readyz answering 503, before it drains: the time a
	// load balancer or Kubernetes needs to stop sending it requests.
	// Default 0.
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`

	// RequestIDHeader carries the request id to the upstream and back.
	// Default "X-Request-Id".
	RequestIDHeader string `yaml:"request_id_header"`

	// MaxHeaderBytes bounds a request's header block. Default 65536.
	MaxHeaderBytes int `yaml:"max_header_bytes"`

	// MaxBodyBytes bounds a request body; larger ones get 413
	// body_too_large. Zero means unlimited.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`

	// BodyTimeout bounds each wait for more of a request body, as nginx's
	// client_body_timeout does: a client silent for longer gets 408
	// request_timeout and its connection is closed. Default 60s; zero:
	// no bound (a slow upload may then hold its upstream connection, and
	// a concurrency lease, for as long as it likes).
	BodyTimeout time.Duration `yaml:"body_timeout"`

	// SendTimeout bounds each write of a response body to the client, as
	// nginx's send_timeout does: a client that takes nothing for longer
	// (it stopped reading, or its HTTP/2 window stays shut) has its
	// connection closed (on HTTP/2, its stream reset), which frees the
	// upstream connection and a concurrency lease. Default 60s; zero: no
	// bound.
	SendTimeout time.Duration `yaml:"send_timeout"`

	// AccessLog is where one JSON line per request goes: AccessLogOff
	// (the default), AccessLogStdout, AccessLogStderr, or the path of a
	// regular file (not the config's own, nor another file the config
	// names), opened for append and opened again on every reload, so that
	// a log rotated by renaming it is followed after a SIGHUP.
	AccessLog string `yaml:"access_log"`

	// JWT verifies the bearer tokens that jwt:CLAIM key parts and claim
	// overrides read. Nil: no token is verified, and a config that reads
	// one is refused.
	JWT *JWT `yaml:"jwt,omitempty"`

	// ListenTLS is the address the gateway serves HTTPS on, HTTP/1.1 and
	// HTTP/2 by ALPN, with the certificates of TLS. Empty (the default):
	// no TLS listener.
	ListenTLS string `yaml:"listen_tls"`

	// TLS is the TLS listener's certificates and client authentication.
	TLS ServerTLS `yaml:"tls"`

	// H2C serves HTTP/2 with prior knowledge on Listen beside HTTP/1.1.
	H2C bool `yaml:"h2c"`

	// HTTP2 bounds what one HTTP/2 connection may ask of the gateway.
	HTTP2 HTTP2 `yaml:"http2"`
}

// ServerTLS is server.tls: the certificates of server.listen_tls and who
// may connect.
type ServerTLS struct {
	// Certs are the certificates served, chosen by the name the client
	// asks for (SNI); the first is served when no other matches.
	Certs []ServerCert `yaml:"certs"`

	// MinVersion is the lowest TLS version offered: TLS12 ("1.2", the
	// default) or TLS13 ("1.3").
	MinVersion string `yaml:"min_version"`

	// ClientCA is a PEM file of the certificates that sign client
	// certificates; it needs ClientAuth request or require.
	ClientCA string `yaml:"client_ca"`

	// ClientAuth is whether clients are asked for a certificate:
	// ClientAuthNone (the default), ClientAuthRequest or
	// ClientAuthRequire.
	ClientAuth ClientAuth `yaml:"client_auth"`
}

// ServerCert is one certificate of server.tls.certs.
type ServerCert struct {
	// Cert is a PEM file of the certificate, then the chain it needs.
	Cert string `yaml:"cert"`

	// Key is the PEM private key of Cert.
	Key string `yaml:"key"`
}

// The TLS versions server.tls.min_version takes.
const (
	TLS12 = "1.2"
	TLS13 = "1.3"
)

// ClientAuth is whether the TLS listener asks clients for a certificate.
type ClientAuth string

// The ways of server.tls.client_auth.
const (
	ClientAuthNone ClientAuth = "none"
	// ClientAuthRequest asks for a certificate: one given must verify
	// against client_ca, and a client without one is served.
	ClientAuthRequest ClientAuth = "request"
	// ClientAuthRequire refuses the handshake of a client without a
	// certificate that verifies against client_ca.
	ClientAuthRequire ClientAuth = "require"
)

// HTTP2 is server.http2: the limits of one HTTP/2 connection, on the TLS
// listener and, with h2c, on the clear one.
type HTTP2 struct {
	// MaxConcurrentStreams is how many requests a client may have open
	// at once on a connection. Default 100.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`

	// MaxReadFrameSize is the largest frame the gateway reads, 16384 to
	// 16777215. Default 1048576.
	MaxReadFrameSize int `yaml:"max_read_frame_size"`

	// MaxHeaderListSize bounds a request's header list (the sum of its
	// fields' names and values, 32 bytes more each). Zero (the default):
	// server.max_header_bytes.
	MaxHeaderListSize int `yaml:"max_header_list_size"`

	// InitialStreamWindow is how many bytes of a request body a client
	// may send before the gateway reads them, per stream. Default
	// 1048576.
	InitialStreamWindow int `yaml:"initial_stream_window"`

	// InitialConnWindow is the same bound over all the streams of a
	// connection, at least 65535. Default 1048576.
	InitialConnWindow int `yaml:"initial_conn_window"`
}

// The access log's targets besides a file.
const (
	AccessLogOff    = "off"
	AccessLogStdout = "stdout"
	AccessLogStderr = "stderr"
)

// Admin is the admin listener: health, metrics, the admin API and the
// dashboard.
type Admin struct {
	// Listen is the admin address. Default "127.0.0.1:9090". Empty: no
	// admin listener.
	Listen string `yaml:"listen"`

	// Token, when set, is required as "Authorization: Bearer TOKEN" on
	// /admin/*. It holds the resolved value of TokenEnv when that is set.
	// Empty: /admin/* is open to whoever reaches Listen.
	Token string `yaml:"token" redact:"secret"`

	// TokenEnv names the environment variable Token was read from. Empty:
	// Token, if any, came from the file.
	TokenEnv string `yaml:"token_env"`

	// Tokens are named admin tokens, each accepted as Token is; the name
	// of the one a call carried is who the logs and audit events say
	// acted. Empty: none.
	Tokens []*AdminToken `yaml:"tokens"`

	// AllowOpen accepts a Listen beyond loopback without a Token. Parse
	// refuses that pair otherwise: whoever reaches the listener could
	// reload the config, reset limits and force breakers. False: Listen
	// must be loopback (127.0.0.0/8, ::1 or localhost), or a Token set.
	AllowOpen bool `yaml:"allow_open"`
}

// AdminToken is one named admin token.
type AdminToken struct {
	// Name is who the token is: [a-z0-9][a-z0-9_.@-]*, at most 64 bytes,
	// unique; "admin" is Token's.
	Name string `yaml:"name"`

	// Token and TokenEnv are as in Admin: one of them.
	Token    string `yaml:"token" redact:"secret"`
	TokenEnv string `yaml:"token_env"`
}

// RLS is the Envoy rate-limit service (docs/configuration.md, rls).
type RLS struct {
	// Listen is the gRPC address of the service. Empty: no service.
	Listen string `yaml:"listen"`

	// ConfigDir holds the envoyproxy/ratelimit-format rule files. Empty:
	// no rules, so every descriptor is allowed.
	ConfigDir string `yaml:"config_dir"`

	// Shadow answers OK to every request over a limit, which is counted
	// and reported as when enforced (envoyproxy/ratelimit's SHADOW_MODE).
	// False: limits are enforced.
	Shadow bool `yaml:"shadow"`

	// QuotaMode makes every limit a quota, as quota_mode makes one in a
	// rule file (envoyproxy/ratelimit's QUOTA_MODE): a request over it is
	// admitted, and ResponseMetadata names the quotas it is over.
	QuotaMode bool `yaml:"quota_mode"`

	// ResponseMetadata answers every call with dynamic metadata, as
	// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA.
	ResponseMetadata bool `yaml:"response_metadata"`

	// ResponseHeaders are the rate-limit headers every answer asks Envoy
	// to add: "ietf" (RateLimit-Policy and RateLimit, as the gateway
	// sends them) or "envoy" (RateLimit-Limit, -Remaining and -Reset, as
	// envoyproxy/ratelimit sends them). Empty or "none": none.
	ResponseHeaders string `yaml:"response_headers"`

	// TLS serves the service over TLS, and with ClientCA set asks every
	// client for a certificate. Nil: plaintext.
	TLS *RLSTLS `yaml:"tls,omitempty"`

	// XDS takes the rules from a management server over xDS instead of
	// ConfigDir, as Envoy Gateway configures envoyproxy/ratelimit. Nil:
	// the rules are ConfigDir's.
	XDS *RLSXDS `yaml:"xds,omitempty"`
}

// RLSXDS is the management server the rate-limit service takes its rules
// from (docs/configuration.md, rls.xds): RateLimitConfig resources over
// aggregated discovery (ADS), state of the world.
type RLSXDS struct {
	// Addr is the server's gRPC address, HOST:PORT.
	Addr string `yaml:"addr"`
	// NodeID is the node id the service presents, by which the server
	// picks the configs it sends.
	NodeID string `yaml:"node_id"`
	// TLS dials the server over TLS, with Cert and Key presenting a
	// client certificate. Nil: plaintext.
	TLS *RLSXDSTLS `yaml:"tls,omitempty"`
}

// RLSXDSTLS is how the rate-limit service dials its management server
// over TLS (docs/configuration.md, rls.xds). The files are read again
// whenever one changes; a set that does not load is refused, and the
// next connection uses the running one.
type RLSXDSTLS struct {
	// CA is a PEM file of the certificates that sign the server's.
	// Empty: the system's roots.
	CA string `yaml:"ca"`

	// Cert is a PEM file of the client certificate, then its chain;
	// Key is its PEM private key. Both or neither; empty: no client
	// certificate.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`

	// ServerName is the name the server's certificate must hold. Empty:
	// the host of Addr.
	ServerName string `yaml:"server_name"`
}

// RLSTLS is the certificate of the rate-limit service
// (docs/configuration.md, rls.tls). The files are read again whenever one
// changes; a set that does not load is refused and the running one stays.
type RLSTLS struct {
	// Cert is a PEM file of the certificate, then the chain it needs.
	Cert string `yaml:"cert"`

	// Key is the PEM private key of Cert.
	Key string `yaml:"key"`

	// ClientCA is a PEM file of the certificates that sign client
	// certificates. Empty: clients are not asked for one.
	ClientCA string `yaml:"client_ca"`
}

// StoreType names where limit state lives.
type StoreType string

// The store types.
const (
	StoreMemory StoreType = "memory" // in process, for one instance
	StoreRedis  StoreType = "redis"  // shared by every instance
)

// OnError is what a decision is when the store fails (docs/configuration.md, When the store fails).
type OnError string

// The answers to a store failure.
const (
	OnErrorAllow OnError = "allow" // admit, and count the error
	OnErrorDeny  OnError = "deny"  // 503 limiter_unavailable
	OnErrorLocal OnError = "local" // decide in memory with a share of each limit
)

// Store is where limit state lives.
type Store struct {
	// Type is memory or redis. Default memory.
	Type StoreType `yaml:"type"`

	// Redis is used when Type is redis; its defaults are set either way.
	Redis Redis `yaml:"redis"`

	// Memory is used when Type is memory.
	Memory Memory `yaml:"memory"`

	// OnError is the decision when the store fails, for limits that do not
	// give their own. Default local.
	OnError OnError `yaml:"on_error"`

	// LocalShare is, with OnError local, the fraction of each limit one
	// instance may grant while the store is down. Zero means auto: one over
	// the number of gateway instances seen alive before the store failed.
	LocalShare LocalShare `yaml:"local_share"`

	// LocalRejects lets an instance reject a key the store said is
	// exhausted until a time without asking the store again until then.
	// Default true; the memory store decides locally anyway.
	LocalRejects bool `yaml:"local_rejects"`

	// LocalRejectsMax bounds the entries of that memory. Default 1000000.
	LocalRejectsMax int `yaml:"local_rejects_max"`
}

// LocalShare is a fraction in (0, 1], or zero for "auto".
type LocalShare float64

// RedisMode is how floodgate reaches Redis.
type RedisMode string

// The Redis deployment modes.
const (
	RedisStandalone RedisMode = "standalone"
	RedisCluster    RedisMode = "cluster"
	RedisSentinel   RedisMode = "sentinel"
)

// Redis is the Redis store's connection and key layout.
type Redis struct {
	// Mode is standalone, cluster or sentinel. Default standalone.
	Mode RedisMode `yaml:"mode"`

	// Addrs are host:port addresses: the server, cluster seed nodes, or the
	// sentinels. Required when the store type is redis.
	Addrs []string `yaml:"addrs"`

	// MasterName is the sentinel master's name; required in sentinel mode
	// and refused in the others.
	MasterName string `yaml:"master_name"`

	// Username is the ACL user. Empty: the default user.
	Username string `yaml:"username"`

	// Password authenticates the connection; it holds the resolved value of
	// PasswordEnv when that is set. Empty: no AUTH.
	Password string `yaml:"password" redact:"secret"`

	// PasswordEnv names the environment variable Password was read from.
	PasswordEnv string `yaml:"password_env"`

	// DB is the database number; Redis Cluster has only 0.
	DB int `yaml:"db"`

	// TLS connects with TLS, verifying the server with the system roots.
	TLS bool `yaml:"tls"`

	// Prefix starts every key floodgate writes. Default "fg:". It may not
	// hold a brace, which would move the Redis Cluster hash tag.
	Prefix string `yaml:"prefix"`

	// Timeout is the budget of one decision, connection wait included.
	// Default 50ms.
	Timeout time.Duration `yaml:"timeout"`
}

// Memory is the embedded store's bound.
type Memory struct {
	// MaxKeys bounds the live keys; when full, new keys are decided as on a
	// store error. Default 1000000.
	MaxKeys int `yaml:"max_keys"`
}

// Route is one proxied route.
type Route struct {
	// ID is the route's name, [a-z0-9_-]+, unique, not "global".
	ID string `yaml:"id"`

	// Match selects the route's requests; Match.Path is required.
	Match Match `yaml:"match"`

	// Upstream is where the requests go; at least one target is required.
	Upstream Upstream `yaml:"upstream"`

	// Limits are decided after the global limits, in order. Their rules
	// are named "ID:NAME". Empty: only the global limits apply.
	Limits []*Limit `yaml:"limits"`

	// Breaker is the route's circuit breaker; disabled by default.
	Breaker Breaker `yaml:"breaker"`

	// Fallback is the answer while the breaker is open.
	Fallback Fallback `yaml:"fallback"`

	// Protect, when the block is there, guards the upstream by what it
	// can take now, learned from the route's exchanges. Nil: off.
	Protect *Protect `yaml:"protect"`

	// Line is where the route starts in the file.
	Line int `yaml:"-" json:"-"`
}

// Match selects the requests of a route.
type Match struct {
	// Path is an exact, clean path, or a prefix ending in "/**" that
	// matches the prefix itself and everything below it.
	Path string `yaml:"path"`

	// Methods are upper-case method tokens. Empty: any method.
	Methods []string `yaml:"methods"`

	// Host is compared with the request's host, lowercased and without a
	// port. Empty: any host.
	Host string `yaml:"host"`
}

// Prefix reports whether Path is a "/**" prefix pattern, and the prefix
// without "/**" ("" for "/**", which matches every path).
func (m Match) Prefix() (prefix string, ok bool) {
	if p, ok := strings.CutSuffix(m.Path, "/**"); ok {
		return p, true
	}
	return "", false
}

// Upstream is where a route's requests go.
type Upstream struct {
	// Targets are absolute http or https URLs, used round robin. At least
	// one.
	Targets []*url.URL `yaml:"targets"`

	// StripPrefix is removed from the path before it is sent upstream.
	// Empty: the path is sent as matched.
	StripPrefix string `yaml:"strip_prefix"`

	// ConnectTimeout bounds dialing a target. Default 2s.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`

	// Timeout bounds the wait for the upstream's response headers; a
	// streaming body is not cut by it. Default 3s.
	Timeout time.Duration `yaml:"timeout"`

	// IdleTimeout is the longest silence while a response body streams.
	// Default 60s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`

	// Balance is how a request's target is chosen. Default round_robin.
	Balance Balance `yaml:"balance"`

	// Health is the active check of each target. Zero Interval: none.
	Health Health `yaml:"health"`

	// Eject takes a target out of rotation after consecutive failed
	// exchanges, with or without active checks.
	Eject Eject `yaml:"eject"`

	// Protocol is how the gateway speaks to the targets. Default http1.
	Protocol Protocol `yaml:"protocol"`

	// TLS is how https targets are verified and what certificate the
	// gateway presents to them. Nil: the system's roots, no certificate.
	TLS *UpstreamTLS `yaml:"tls"`
}

// UpstreamTLS is upstream.tls: the TLS the gateway speaks to a route's
// https targets (docs/configuration.md, upstream.tls). The files are read
// when the gateway is built, at start and on every reload.
type UpstreamTLS struct {
	// CA is a PEM file of the certificates that sign the targets'.
	// Empty: the system's roots.
	CA string `yaml:"ca"`

	// ServerName is the name the targets' certificates must hold, also
	// sent as SNI. Empty: the host of each target.
	ServerName string `yaml:"server_name"`

	// Cert is a PEM file of the client certificate presented to the
	// targets, then the chain it needs; Key is its private key. Both or
	// neither.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`

	// InsecureSkipVerify accepts any certificate from the targets.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Balance is how a route spreads its requests over its targets.
type Balance string

// The balancing policies.
const (
	BalanceRoundRobin   Balance = "round_robin"   // each target in turn
	BalanceLeastRequest Balance = "least_request" // the target with the fewest requests in flight
)

// Health is the active health check of a route's targets: a GET of Path
// on each target every Interval.
type Health struct {
	// Path is what is asked of each target, as written (not under a
	// target's own path). Required with an Interval.
	Path string `yaml:"path"`

	// Interval between two checks of a target. 0: no active checks.
	Interval time.Duration `yaml:"interval"`

	// Timeout bounds one check, connection included; below Interval.
	// Default 1s.
	Timeout time.Duration `yaml:"timeout"`

	// HealthyAfter consecutive passed checks (2xx or 3xx) bring a target
	// back; UnhealthyAfter consecutive failed ones take it out. Defaults
	// 2 and 3.
	HealthyAfter   int `yaml:"healthy_after"`
	UnhealthyAfter int `yaml:"unhealthy_after"`

	// GRPCService, when not nil, makes the checks gRPC ones
	// (grpc.health.v1.Health/Check) of this service ("": the server as
	// a whole) rather than GETs of Path. Upstream protocol h2c or h2.
	GRPCService *string `yaml:"grpc_service,omitempty"`
}

// Same reports whether h and o are the same settings.
func (h Health) Same(o Health) bool {
	a, b := h.GRPCService, o.GRPCService
	h.GRPCService, o.GRPCService = nil, nil
	return h == o && (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// Eject is the passive health check of a route's targets: a target whose
// exchanges fail in a row is passed over for BaseTime, twice as long at
// each ejection that follows, up to MaxTime.
type Eject struct {
	// ConsecutiveFailures is how many exchanges in a row that got no
	// answer (a connection refused, reset or timed out) eject a target.
	// Default 5; 0: never for that.
	ConsecutiveFailures int `yaml:"consecutive_failures"`

	// Consecutive5xx is how many 5xx answers in a row eject a target.
	// Default 0: never for that.
	Consecutive5xx int `yaml:"consecutive_5xx"`

	// BaseTime is the first ejection's length. Default 5s.
	BaseTime time.Duration `yaml:"base_time"`

	// MaxTime caps an ejection's length; a target back in rotation for
	// MaxTime without being ejected starts again from BaseTime. Default
	// 60s.
	MaxTime time.Duration `yaml:"max_time"`
}

// Protocol is an upstream's wire protocol.
type Protocol string

// The upstream protocols. gRPC needs one of the HTTP/2 ones.
const (
	ProtocolHTTP1 Protocol = "http1" // HTTP/1.1 to http:// and https:// targets
	ProtocolH2C   Protocol = "h2c"   // HTTP/2 with prior knowledge, in clear, to http:// targets
	ProtocolH2    Protocol = "h2"    // HTTP/2 over TLS (ALPN h2) to https:// targets
)

// HTTP2 reports whether p is one of the HTTP/2 protocols.
func (p Protocol) HTTP2() bool { return p == ProtocolH2C || p == ProtocolH2 }

// Source is where a key part's value comes from (docs/configuration.md, Keys).
type Source string

// The key sources. Header, Query and Cookie take a name, JWT a claim's.
const (
	SourceGlobal Source = "global" // one value for every request
	SourceRoute  Source = "route"  // the route's id
	SourcePath   Source = "path"   // the cleaned path, without the query
	SourceMethod Source = "method"
	SourceHost   Source = "host" // lowercased, without port
	SourceIP     Source = "ip"   // the client IP, behind trusted_proxies
	SourceHeader Source = "header"
	SourceQuery  Source = "query"
	SourceCookie Source = "cookie"
	SourceJWT    Source = "jwt" // a claim of the verified bearer token (server.jwt)
	// SourceTLS is a property of the verified client certificate
	// (server.tls.client_auth); its one name is "subject".
	SourceTLS Source = "tls"
)

// KeyPart is one part of a limit's key, written "ip" or "header:X-User-Id".
type KeyPart struct {
	// Source is one of the Source constants; never empty after Parse.
	Source Source
	// Name is the header, query parameter, cookie or claim name, as
	// written. Empty for the other sources.
	Name string
}

// Sync is how instances share a limit's counters.
type Sync string

// The ways to share counters.
const (
	SyncExact Sync = "exact" // every decision in the store
	SyncLease Sync = "lease" // slices of the window, leased to each instance
)

// OnMissing is what happens to a request whose key and fallback are both
// missing.
type OnMissing string

// The answers to a missing key.
const (
	OnMissingDeny  OnMissing = "deny"  // 403 key_required
	OnMissingAllow OnMissing = "allow" // not limited by this limit
)

// Limit is one rate limit of a route, or a global one.
type Limit struct {
	// Name is [a-z0-9_-]+, unique among the global limits and the limits
	// of each route; it appears in headers, logs and metrics.
	Name string `yaml:"name"`

	// Key lists the parts of the key. At least one.
	Key []KeyPart `yaml:"key"`

	// Fallback is the key used when a part of Key is missing. Empty: none.
	Fallback []KeyPart `yaml:"fallback"`

	// OnMissing applies when Key and Fallback are both missing. Default
	// deny.
	OnMissing OnMissing `yaml:"on_missing"`

	// Algorithm defaults to fixed_window.
	Algorithm limit.Algorithm `yaml:"algorithm"`

	// Align places fixed windows; fixed_window only. Default epoch.
	Align limit.Align `yaml:"align,omitempty"`

	// TZ shifts epoch-aligned fixed windows so that day and hour windows
	// begin at local midnight or on the local hour. Nil: UTC. On the days
	// a zone's offset changes (daylight saving time) a day window still
	// runs from local midnight to local midnight, 23 or 25 hours
	// (limit.Rule.Location).
	TZ *time.Location `yaml:"tz,omitempty"`

	// Shadow limits are decided, counted, logged and reported, but never
	// reject.
	Shadow bool `yaml:"shadow"`

	// Sync is how the instances of a fleet share the limit's counters on
	// Redis: exact (the default) decides every request in Redis; lease has
	// each instance lease slices of the current window and admit from them
	// itself, for keys every request shares (global, route).
	Sync Sync `yaml:"sync"`

	// Headers reports this limit in rate-limit headers. Default true.
	Headers bool `yaml:"headers"`

	// OnError is this limit's answer when the store fails. Empty: the
	// store's.
	OnError OnError `yaml:"on_error"`

	// Rate is the limit, whichever form the file used: for concurrency,
	// Count is the number in flight and Period is zero.
	Rate limit.Rate `yaml:"rate,omitempty"`

	// Limit and Window are the long form of Rate ("limit: 1" with
	// "window: 10s"). Parse folds them into Rate, so that Rate is the one
	// place to read: after Parse, Window is zero, and Limit is zero except
	// for concurrency, where it is Rate.Count.
	Limit  int64         `yaml:"limit,omitempty"`
	Window time.Duration `yaml:"window,omitempty"`

	// Burst is a token bucket's size. Default: the count of Rate as
	// written. Zero for the other algorithms.
	Burst int64 `yaml:"burst,omitempty"`

	// Queue lets a token bucket delay a request up to this long for its
	// token instead of rejecting it. Zero: no queueing.
	Queue time.Duration `yaml:"queue,omitempty"`

	// Cost is what one request takes. Default 1; zero for concurrency,
	// where a request holds one lease.
	Cost int64 `yaml:"cost,omitempty"`

	// Reject is the answer to a request this limit rejects.
	Reject Reject `yaml:"reject"`

	// Overrides give some requests a different rate; the first that
	// matches wins. Empty: none.
	Overrides []*Override `yaml:"overrides,omitempty"`

	// Rule is the limit as the stores decide it, already validated.
	Rule *limit.Rule `yaml:"-" json:"-"`

	// Line is where the limit starts in the file.
	Line int `yaml:"-" json:"-"`
}

// Reject is the answer to a request a limit rejects.
type Reject struct {
	// Status is 400-599. Default 429.
	Status int `yaml:"status"`

	// Code is [a-z0-9_]+. Default rate_limited.
	Code string `yaml:"code"`

	// Message is the text for Code. Empty: Config.Message finds it.
	Message string `yaml:"message"`
}

// Override is a different rate for the requests it matches. Exactly one of
// Values, Header and Claim is set.
type Override struct {
	// Values are resolved keys, one value per key part each; a request
	// whose key is one of them matches.
	Values []KeyValues `yaml:"values,omitempty"`

	// Header matches a request that carries this header value.
	Header *HeaderMatch `yaml:"header,omitempty"`

	// Claim matches a request whose verified bearer token (server.jwt)
	// has this claim value.
	Claim *ClaimMatch `yaml:"claim,omitempty"`

	// Rate, Limit and Window are as in Limit, and folded into Rate the
	// same way. The override has the limit's algorithm, cost and queue.
	Rate   limit.Rate    `yaml:"rate,omitempty"`
	Limit  int64         `yaml:"limit,omitempty"`
	Window time.Duration `yaml:"window,omitempty"`

	// Burst is as in Limit: default, the override's own count as written.
	Burst int64 `yaml:"burst,omitempty"`

	// Rule is the override's rule, named after the limit's with "#oN"
	// appended (N from 1), so its counters are its own.
	Rule *limit.Rule `yaml:"-" json:"-"`

	// Line is where the override starts in the file.
	Line int `yaml:"-" json:"-"`
}

// KeyValues is one resolved key: a value per key part. The file may write a
// one-part key as a plain scalar.
type KeyValues []string

// HeaderMatch matches a request header's value exactly.
type HeaderMatch struct {
	// Name is the header's name, matched case-insensitively.
	Name string `yaml:"name"`
	// Value is the value the header must carry, compared exactly. Never
	// empty.
	Value string `yaml:"value"`
}

// Breaker is a route's circuit breaker (docs/configuration.md, breaker).
type Breaker struct {
	// Enabled turns the breaker on. Default false.
	Enabled bool `yaml:"enabled"`

	// Window is the sliding window, a whole number of seconds (it is kept
	// in one-second buckets). Default 10s.
	Window time.Duration `yaml:"window"`

	// MinCalls is the fewest calls in the window that allow a decision.
	// Default 20.
	MinCalls int `yaml:"min_calls"`

	// FailureRate opens the breaker when failures/calls reach it; in
	// (0, 1]. Default 0.5.
	FailureRate float64 `yaml:"failure_rate"`

	// SlowCallDuration makes a call slow when it takes longer. Zero: calls
	// are never slow.
	SlowCallDuration time.Duration `yaml:"slow_call_duration"`

	// SlowCallRate opens the breaker when slow/calls reach it; in (0, 1].
	// Default 1.0.
	SlowCallRate float64 `yaml:"slow_call_rate"`

	// FailureStatuses are the upstream statuses that count as failures,
	// besides connection errors and timeouts. Default 500, 502, 503, 504.
	// Empty: only connection errors and timeouts fail.
	FailureStatuses []int `yaml:"failure_statuses"`

	// OpenFor is how long the breaker stays open before its trial calls.
	// Default 30s.
	OpenFor time.Duration `yaml:"open_for"`

	// HalfOpenCalls is the number of trial calls. Default 10.
	HalfOpenCalls int `yaml:"half_open_calls"`

	// Scope is whose calls the window counts: this instance's (instance,
	// the default) or every instance's that shares the Redis store (fleet),
	// which then open, close and take their trials together.
	Scope BreakerScope `yaml:"scope"`
}

// Protect is a route's adaptive protection: the gateway learns from the
// route's own exchanges how many requests a second the upstream can take
// now, and admits no more (docs/configuration.md, protect).
type Protect struct {
	// Min and Max bound the learned limit, in requests a second. Min
	// default 1; Max 0 (the default) is none.
	Min float64 `yaml:"min"`
	Max float64 `yaml:"max"`

	// Tolerance is how many times the upstream's healthy latency an
	// answer may take before it counts as a sign of overload. Default 2.
	Tolerance float64 `yaml:"tolerance"`

	// WarmUp is how long admission takes to ramp from a tenth of the
	// learned limit to all of it when traffic comes back after an idle
	// spell, and when the route's breaker closes. Default 5s; 0s: none.
	WarmUp time.Duration `yaml:"warm_up"`

	// Reject is the answer to a request protection turns away. Default
	// 503 overloaded, with Retry-After.
	Reject Reject `yaml:"reject"`

	// Throttling takes the upstream's 429 and 503 (and a gRPC upstream's
	// RESOURCE_EXHAUSTED), with their Retry-After, as signs that it is
	// short of capacity. Default true; false for an upstream that answers
	// them to one client's requests (its own per-user quota), which a
	// client could then provoke to push the limit down for everyone.
	Throttling bool `yaml:"throttling"`

	// Priority shares the learned limit by levels: when it binds, the
	// lowest level is turned away first.
	Priority *Priority `yaml:"priority"`

	// Pin is a runtime override's: the limit admitted instead of the one
	// learned, in requests a second; 0: none. A file cannot set it.
	Pin float64 `yaml:"-"`
}

// ProtectName is the name runtime overrides give a route's protection, as
// if it were one of its limits.
const ProtectName = "protect"

// Priority is protect.priority: which level a request is of, and how long
// it may wait for room.
type Priority struct {
	// Key is the key part whose value names the level (header:X-Priority,
	// jwt:tier, ...).
	Key KeyPart `yaml:"key"`

	// Levels are the values, highest first; a request whose value is none
	// of them, or that has none, is of the last.
	Levels []string `yaml:"levels"`

	// MaxWait is how long a request may wait for room when the limit
	// binds. Default 250ms.
	MaxWait time.Duration `yaml:"max_wait"`
}

// Fallback is the answer an open breaker gives.
type Fallback struct {
	// Status is 200-599. Default 503.
	Status int `yaml:"status"`

	// Code is [a-z0-9_]+. Default service_unavailable.
	Code string `yaml:"code"`

	// Message is the text for Code. Empty: Config.Message finds it.
	Message string `yaml:"message"`

	// Record writes an event for each request the open breaker turns away;
	// it needs an events sink.
	Record bool `yaml:"record"`
}

// Sink is where events go.
type Sink string

// The event sinks.
const (
	SinkNone  Sink = "none"
	SinkRedis Sink = "redis" // XADD to a capped stream
	SinkNATS  Sink = "nats"  // a JetStream subject
	SinkKafka Sink = "kafka" // a Kafka topic
	SinkFile  Sink = "file"  // JSON lines, fsynced
)

// Audit says which rate-limit decisions become events.
type Audit string

// The audit levels.
const (
	AuditNone     Audit = "none"
	AuditRejected Audit = "rejected"
	AuditAll      Audit = "all"
)

// Events is the recording of requests as events (docs/configuration.md, events).
type Events struct {
	// Sink is none, redis, nats, kafka or file. Default none.
	Sink Sink `yaml:"sink"`

	// Redis, NATS, Kafka and File configure the sink of the same name;
	// each holds its defaults whichever sink is chosen.
	Redis EventsRedis `yaml:"redis"`
	NATS  EventsNATS  `yaml:"nats"`
	Kafka EventsKafka `yaml:"kafka"`
	File  EventsFile  `yaml:"file"`

	// SpoolDir keeps events while the sink is down; required for redis,
	// nats and kafka. Empty: no spool.
	SpoolDir string `yaml:"spool_dir"`

	// SpoolMaxBytes bounds the spool. Default 1 GiB.
	SpoolMaxBytes int64 `yaml:"spool_max_bytes"`

	// Audit also records rate-limit decisions. Default none.
	Audit Audit `yaml:"audit"`

	// MaxBody is how many bytes of a request body an event keeps; a longer
	// body marks the event truncated. Default 65536; zero keeps no body.
	MaxBody int64 `yaml:"max_body"`

	// Headers are the request headers an event keeps. Default
	// Content-Type, X-User-Id and Authorization. Empty: none.
	Headers []string `yaml:"headers"`
}

// EventsRedis is the redis sink.
type EventsRedis struct {
	// Stream is the stream key. Default "fg:events".
	Stream string `yaml:"stream"`

	// MaxLen caps the stream (XADD MAXLEN ~). Default 1000000.
	MaxLen int64 `yaml:"maxlen"`

	// Addrs are another Redis's addresses. Empty: the store's Redis.
	Addrs []string `yaml:"addrs"`
}

// EventsNATS is the nats sink.
type EventsNATS struct {
	// URL is the server. Default "nats://127.0.0.1:4222".
	URL string `yaml:"url" redact:"url"`

	// Subject is the JetStream subject. Default "floodgate.events".
	Subject string `yaml:"subject"`
}

// EventsKafka is the kafka sink (docs/configuration.md, events.kafka).
type EventsKafka struct {
	// Brokers are the seed brokers' host:port addresses. Required with
	// sink kafka.
	Brokers []string `yaml:"brokers"`

	// Topic is where the events go; it must exist. Default
	// "floodgate-events".
	Topic string `yaml:"topic"`

	// ClientID names the producer to the brokers. Default "floodgate".
	ClientID string `yaml:"client_id"`

	// Acks is all (every in-sync replica, idempotent producer) or leader
	// (the partition leader alone, not idempotent). Default all.
	Acks string `yaml:"acks"`

	// Compression is none, gzip, snappy, lz4 or zstd. Default none.
	Compression string `yaml:"compression"`

	// TLS connects with TLS. Nil: plaintext.
	TLS *EventsKafkaTLS `yaml:"tls,omitempty"`

	// SASL authenticates the connection. Nil: no SASL.
	SASL *EventsKafkaSASL `yaml:"sasl,omitempty"`
}

// EventsKafkaTLS is how the kafka sink dials the brokers with TLS.
type EventsKafkaTLS struct {
	// CA is a PEM file of the certificates that sign the brokers'.
	// Empty: the system's roots.
	CA string `yaml:"ca"`

	// Cert is a PEM file of the client certificate, then its chain;
	// Key is its PEM private key. Both or neither; empty: no client
	// certificate.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`

	// ServerName is the name the brokers' certificates must hold. Empty:
	// the host of each broker's address.
	ServerName string `yaml:"server_name"`
}

// EventsKafkaSASL is the kafka sink's SASL authentication.
type EventsKafkaSASL struct {
	// Mechanism is plain, scram-sha-256 or scram-sha-512. Required.
	Mechanism string `yaml:"mechanism"`

	// Username is the SASL user. Required.
	Username string `yaml:"username"`

	// PasswordEnv names the environment variable that holds the
	// password. Required: the password is never written in the file.
	PasswordEnv string `yaml:"password_env"`

	// Password is the value of PasswordEnv, read when the config is
	// validated.
	Password string `yaml:"-" json:"-"`
}

// EventsFile is the file sink.
type EventsFile struct {
	// Path is the JSON-lines file. Default "floodgate-events.jsonl".
	Path string `yaml:"path"`
}
