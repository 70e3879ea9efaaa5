package config

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/breaker"
	"github.com/floodgate-gw/floodgate/internal/pathclean"
	"github.com/floodgate-gw/floodgate/limit"
)

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9_-]+$`)
	codeRE    = regexp.MustCompile(`^[a-z0-9_]+$`)
	envRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	subjectRE = regexp.MustCompile(`^[^\s*>.]+(\.[^\s*>.]+)*$`)
)

// A concurrency lease expires queue + connect_timeout + timeout + leaseSlack
// after it is taken (SPEC §3.1): long enough to cover an exchange up to its
// response headers, after which the gateway renews it while the body
// streams, and short enough that a dead instance's leases come back soon.
const leaseSlack = 5 * time.Second

// validator checks a decoded Config, reporting each problem at the line of
// the value at fault, and builds the limit rules.
type validator struct {
	file      string
	lines     map[string]int
	bad       map[string]bool
	lookupEnv func(string) (string, bool)
	flags     map[string]string // path -> the flag that gave its value
	errs      Errors
	warns     Errors

	messages map[string]string

	storeType StoreType // for the checks of limits that depend on it
}

// line is the line of path, or of the nearest enclosing value the file
// gives when path itself was left out (a default, or a missing key).
func (v *validator) line(p string) int {
	for {
		if l, ok := v.lines[p]; ok {
			return l
		}
		if p == "" {
			return 1
		}
		p = parent(p)
	}
}

func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// lineOr is the line of path when the file gives it, else the line of
// cause: a value left out is reported where the setting that needs it is.
func (v *validator) lineOr(p, cause string) int {
	if v.has(p) {
		return v.line(p)
	}
	return v.line(cause)
}

// has reports whether the file gives the value at path.
func (v *validator) has(p string) bool {
	_, ok := v.lines[p]
	return ok
}

// failed reports whether decoding already found a problem at or below p.
func (v *validator) failed(p string) bool {
	for b := range v.bad {
		if b == p || strings.HasPrefix(b, p) && (b[len(p)] == '.' || b[len(p)] == '[') {
			return true
		}
	}
	return false
}

func (v *validator) failedAny(p string, fields ...string) bool {
	for _, f := range fields {
		if v.failed(p + "." + f) {
			return true
		}
	}
	return false
}

func (v *validator) errorf(p, format string, args ...any) {
	if f, ok := v.flags[p]; ok {
		// The value is not in the file: name the flag, at no line.
		v.errorAt(0, f, format, args...)
		return
	}
	v.errorAt(v.line(p), p, format, args...)
}

// warnf records something that is probably a mistake but leaves the
// config valid: Parse accepts the file and Config.Warnings lists it.
func (v *validator) warnf(p, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if p != "" {
		msg = p + ": " + msg
	}
	v.warns = append(v.warns, Error{File: v.file, Line: v.line(p), Msg: msg})
}

func (v *validator) errorAt(line int, p, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if p != "" {
		msg = p + ": " + msg
	}
	v.errs = append(v.errs, Error{File: v.file, Line: line, Msg: msg})
}

// positive reports a duration that must be above zero.
func (v *validator) positive(p string, d time.Duration) {
	if d <= 0 && !v.failed(p) {
		v.errorf(p, "%v must be positive", d)
	}
}

func (v *validator) config(c *Config) {
	v.server(c)
	v.jwt(c)
	v.jwtParts(c)
	v.admin(&c.Admin)
	v.rls(&c.RLS)
	v.listeners(c)
	v.store(&c.Store)
	v.storeType = c.Store.Type
	if len(c.Routes) == 0 && c.RLS.Listen == "" {
		v.errorf("", "nothing to serve: a config needs at least one route or rls.listen")
	}

	// A global concurrency lease must outlive the slowest route's
	// exchange, queue included, since any route's request may hold it.
	gq := longestQueue(c.GlobalLimits)
	longest := 2*time.Second + 3*time.Second + gq
	for _, r := range c.Routes {
		longest = max(longest, r.Upstream.ConnectTimeout+r.Upstream.Timeout+max(gq, longestQueue(r.Limits)))
	}
	global := map[string]string{}
	for i, l := range c.GlobalLimits {
		p := fmt.Sprintf("global_limits[%d]", i)
		if v.bad[p] {
			continue // not a limit at all, and reported so
		}
		ok := v.uniqueName(l, p, global, nil)
		v.limit(l, p, "global:"+l.Name, longest+leaseSlack, ok)
	}
	ids := map[string]string{}
	for i, r := range c.Routes {
		if p := fmt.Sprintf("routes[%d]", i); !v.bad[p] {
			v.route(c, r, p, ids, global)
		}
	}
	v.unreachable(c.Routes)
	v.events(c)
	v.codes(c)
}

func (v *validator) server(c *Config) {
	s := &c.Server
	if s.Listen == "" {
		if len(c.Routes) > 0 {
			v.errorf("server.listen", "empty, but the config has routes to serve")
		}
	} else {
		v.addr("server.listen", s.Listen, false)
	}
	if s.IPv6Prefix < 0 || s.IPv6Prefix > 128 {
		v.errorf("server.ipv6_prefix", "%d is outside 0..128", s.IPv6Prefix)
	}
	v.positive("server.shutdown_timeout", s.ShutdownTimeout)
	if !isToken(s.RequestIDHeader) {
		v.errorf("server.request_id_header", "%q is not a valid header name", s.RequestIDHeader)
	}
	if s.MaxHeaderBytes <= 0 {
		v.errorf("server.max_header_bytes", "%d must be positive", s.MaxHeaderBytes)
	}
	if s.MaxBodyBytes < 0 {
		v.errorf("server.max_body_bytes", "%d is negative (0 means unlimited)", s.MaxBodyBytes)
	}
	if s.BodyTimeout < 0 {
		v.errorf("server.body_timeout", "%v is negative (0 means no bound)", s.BodyTimeout)
	}
	v.accessLog(s.AccessLog)
}

// accessLog checks server.access_log: off, stderr, or a file whose
// directory exists. Whether the file can be opened is known only when
// serve opens it, and a reload refuses a file it cannot open.
func (v *validator) accessLog(a string) {
	const p = "server.access_log"
	switch strings.ToLower(a) {
	case AccessLogOff, AccessLogStderr:
		if a != strings.ToLower(a) {
			v.errorf(p, "write %q in lower case", strings.ToLower(a))
		}
		return
	case "":
		v.errorf(p, "empty; write off, stderr or the path of a file")
		return
	case "false", "no", "true", "yes", "on", "n", "y":
		// YAML 1.1 reads these as booleans; a file named "no" is
		// surely not what was meant.
		v.errorf(p, "%q: write off, stderr or the path of a file (a file of that name would be ./%s)", a, a)
		return
	}
	if strings.IndexByte(a, 0) >= 0 {
		v.errorf(p, "the path holds a NUL byte")
		return
	}
	if strings.HasSuffix(a, "/") {
		v.errorf(p, "%q is a directory; write the path of a file", a)
		return
	}
	dir := filepath.Dir(a)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		v.errorf(p, "%q: its directory %s cannot be used: %v", a, dir, unwrapPathError(err))
	case !fi.IsDir():
		v.errorf(p, "%q: %s is not a directory", a, dir)
	}
	if fi, err := os.Stat(a); err == nil && fi.IsDir() {
		v.errorf(p, "%q is a directory; write the path of a file", a)
	}
}

// unwrapPathError is the cause of a *fs.PathError, whose path the
// message gives already.
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// addr checks a HOST:PORT address; a listen address may leave out the
// host, a remote one may not.
func (v *validator) addr(p, a string, remote bool) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		want := "HOST:PORT or :PORT"
		if remote {
			want = "HOST:PORT"
		}
		v.errorf(p, "%q is not an address (%s)", a, want)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 || (remote && n == 0) {
		v.errorf(p, "%q: port %q is not a port number", a, port)
	}
	if remote && host == "" {
		v.errorf(p, "%q has no host", a)
	}
}

// env reads the variable a *_env key names. Its value is a secret: no
// message may print it.
func (v *validator) env(p, name string) (string, bool) {
	if !envRE.MatchString(name) {
		v.errorf(p, "%q is not an environment variable name", name)
		return "", false
	}
	val, ok := v.lookupEnv(name)
	switch {
	case !ok:
		v.errorf(p, "environment variable %s is not set", name)
		return "", false
	case val == "":
		// An empty secret would silently turn authentication off.
		v.errorf(p, "environment variable %s is empty", name)
		return "", false
	}
	return val, true
}

func (v *validator) admin(a *Admin) {
	if a.Listen != "" {
		v.addr("admin.listen", a.Listen, false)
	}
	if a.TokenEnv != "" {
		if a.Token != "" {
			v.errorf("admin.token_env", "give token or token_env, not both")
		} else if val, ok := v.env("admin.token_env", a.TokenEnv); ok {
			a.Token = val
		}
	}
	v.adminOpen(a)
}

func (v *validator) rls(r *RLS) {
	if r.Listen != "" {
		v.addr("rls.listen", r.Listen, false)
	} else if r.ConfigDir != "" {
		v.errorf("rls.config_dir", "set, but rls.listen is empty, so no service would read it")
	}
}

// listeners refuses two listeners on one port: the second would fail to
// bind only at start, after check said the config was fine.
func (v *validator) listeners(c *Config) {
	type ln struct{ path, addr string }
	var ls []ln
	for _, l := range []ln{{"server.listen", c.Server.Listen}, {"admin.listen", c.Admin.Listen}, {"rls.listen", c.RLS.Listen}} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil || port == "0" {
			continue
		}
		for _, o := range ls {
			oh, op, _ := net.SplitHostPort(o.addr)
			if op == port && (oh == host || anyHost(oh) || anyHost(host)) {
				v.errorf(l.path, "%q overlaps %s %q (%s)", l.addr, o.path, o.addr, v.where(o.path))
			}
		}
		ls = append(ls, l)
	}
}

func anyHost(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

func (v *validator) store(s *Store) {
	switch s.Type {
	case StoreMemory, StoreRedis:
	default:
		v.errorf("store.type", "unknown store type %q (memory, redis)", s.Type)
	}
	r := &s.Redis
	switch r.Mode {
	case RedisStandalone, RedisCluster, RedisSentinel:
	default:
		v.errorf("store.redis.mode", "unknown mode %q (standalone, cluster, sentinel)", r.Mode)
	}
	if s.Type == StoreRedis && len(r.Addrs) == 0 && !v.failed("store.redis.addrs") {
		v.errorAt(v.lineOr("store.redis.addrs", "store.type"), "store.redis.addrs", "store.type is redis but no addrs are given")
	}
	for i, a := range r.Addrs {
		v.addr(fmt.Sprintf("store.redis.addrs[%d]", i), a, true)
	}
	if r.Mode == RedisStandalone && len(r.Addrs) > 1 {
		v.errorf("store.redis.addrs", "standalone mode takes one address, not %d (cluster seed nodes need mode: cluster; sentinels, mode: sentinel)", len(r.Addrs))
	}
	if r.Mode == RedisSentinel && r.MasterName == "" {
		v.errorAt(v.lineOr("store.redis.master_name", "store.redis.mode"), "store.redis.master_name", "sentinel mode needs master_name")
	}
	if r.Mode != RedisSentinel && r.MasterName != "" {
		v.errorf("store.redis.master_name", "only sentinel mode has a master_name (mode is %s)", r.Mode)
	}
	if r.PasswordEnv != "" {
		if r.Password != "" {
			v.errorf("store.redis.password_env", "give password or password_env, not both")
		} else if val, ok := v.env("store.redis.password_env", r.PasswordEnv); ok {
			r.Password = val
		}
	}
	if r.DB < 0 {
		v.errorf("store.redis.db", "%d is negative", r.DB)
	}
	if r.Mode == RedisCluster && r.DB != 0 {
		v.errorf("store.redis.db", "Redis Cluster has only db 0")
	}
	if strings.ContainsAny(r.Prefix, "{}") {
		v.errorf("store.redis.prefix", "%q holds a brace, which would move the Redis Cluster hash tag", r.Prefix)
	}
	v.positive("store.redis.timeout", r.Timeout)
	if s.Memory.MaxKeys <= 0 {
		v.errorf("store.memory.max_keys", "%d must be positive", s.Memory.MaxKeys)
	}
	if s.LocalRejectsMax <= 0 {
		v.errorf("store.local_rejects_max", "%d must be positive (local_rejects: false turns local rejects off)", s.LocalRejectsMax)
	}
	v.onError("store.on_error", s.OnError, false)
}

func (v *validator) onError(p string, o OnError, inherit bool) {
	switch o {
	case OnErrorAllow, OnErrorDeny, OnErrorLocal:
		return
	case "":
		if inherit {
			return
		}
	}
	v.errorf(p, "unknown on_error %q (allow, deny, local)", o)
}

// uniqueName checks a limit's name and that it is not taken, by the other
// limits of its list (own) or by a global limit (global).
// It reports whether the name is valid.
func (v *validator) uniqueName(l *Limit, p string, own, global map[string]string) bool {
	np := p + ".name"
	switch {
	case v.failed(np):
		return false
	case !v.has(np) || l.Name == "":
		v.errorf(p, "a limit needs a name")
	case !nameRE.MatchString(l.Name):
		v.errorf(np, "%q: a limit name is made of a-z, 0-9, _ and -", l.Name)
	default:
		if first, ok := own[l.Name]; ok {
			v.errorf(np, "duplicate limit name %q (first at line %d)", l.Name, v.line(first))
		} else if first, ok := global[l.Name]; ok {
			v.errorf(np, "limit name %q is taken by a global limit (line %d); a route's limits and the global limits are decided together", l.Name, v.line(first))
		} else {
			own[l.Name] = np
		}
		return true
	}
	return false
}

func (v *validator) route(c *Config, r *Route, p string, ids, global map[string]string) {
	ip := p + ".id"
	idOK := false
	switch {
	case v.failed(ip):
	case r.ID == "":
		v.errorf(p, "a route needs an id")
	case r.ID == "global":
		v.errorf(ip, `"global" is reserved for the global limits`)
	case !nameRE.MatchString(r.ID):
		v.errorf(ip, "%q: a route id is made of a-z, 0-9, _ and -", r.ID)
	default:
		if first, ok := ids[r.ID]; ok {
			v.errorf(ip, "duplicate route id %q (first at line %d)", r.ID, v.line(first))
		} else {
			ids[r.ID] = ip
		}
		idOK = true
	}
	v.match(&r.Match, p+".match")
	v.upstream(&r.Upstream, &r.Match, p+".upstream")

	own := map[string]string{}
	lease := longestQueue(c.GlobalLimits, r.Limits) + r.Upstream.ConnectTimeout + r.Upstream.Timeout + leaseSlack
	for i, l := range r.Limits {
		lp := fmt.Sprintf("%s.limits[%d]", p, i)
		if v.bad[lp] {
			continue
		}
		ok := v.uniqueName(l, lp, own, global)
		v.limit(l, lp, r.ID+":"+l.Name, lease, ok && idOK)
	}
	v.breaker(&r.Breaker, p+".breaker")

	f, fp := &r.Fallback, p+".fallback"
	if f.Status < 200 || f.Status > 599 {
		// 2xx is allowed: a recorded entry may honestly be answered 202.
		v.errorf(fp+".status", "%d is outside 200..599", f.Status)
	}
	v.code(fp+".code", f.Code)
	if f.Record && c.Events.Sink == SinkNone {
		v.errorf(fp+".record", "record: true needs an events sink, but events.sink is none")
	}
}

func (v *validator) code(p, code string) {
	if !codeRE.MatchString(code) {
		v.errorf(p, "%q: a code is made of a-z, 0-9 and _", code)
	}
}

func (v *validator) match(m *Match, p string) {
	pp := p + ".path"
	switch {
	case v.failed(p):
	case m.Path == "":
		v.errorf(p, "a route needs match.path (an exact path, or a prefix such as /api/orders/**)")
	case !strings.HasPrefix(m.Path, "/"):
		v.errorf(pp, "%q does not start with /", m.Path)
	default:
		base, prefix := m.Prefix()
		if !prefix {
			base = m.Path
		}
		switch {
		case strings.HasSuffix(m.Path, "/*") && !strings.Contains(strings.TrimSuffix(m.Path, "/*"), "*"):
			v.errorf(pp, `%q: a prefix is written with "**": %q matches it and every path below`, m.Path, m.Path+"*")
		case strings.Contains(base, "*"):
			v.errorf(pp, `%q: "**" may only end a path, as "/**", and "*" has no other use`, m.Path)
		case strings.ContainsAny(base, "?#"):
			v.errorf(pp, "%q: a path to match has no query or fragment", m.Path)
		case base != "":
			// Requests are matched after cleaning (SPEC §4.1), so an
			// unclean pattern would never match anything.
			c, err := pathclean.Clean(base)
			switch {
			case err != nil:
				v.errorf(pp, "%q can never match: a request with such a path is answered 400 (%s)", m.Path, strings.TrimPrefix(err.Error(), pathclean.ErrBadPath.Error()+": "))
			case c != base:
				if prefix {
					c = strings.TrimSuffix(c, "/") + "/**"
				}
				v.errorf(pp, "%q is not a clean path (requests are matched as %q)", m.Path, c)
			}
		}
	}
	for i, meth := range m.Methods {
		mp := fmt.Sprintf("%s.methods[%d]", p, i)
		if v.failed(mp) {
			continue
		}
		if !isToken(meth) {
			v.errorf(mp, "%q is not an HTTP method", meth)
			continue
		}
		m.Methods[i] = strings.ToUpper(meth)
	}
	if m.Host != "" {
		hp := p + ".host"
		if _, _, err := net.SplitHostPort(m.Host); err == nil {
			v.errorf(hp, "%q: a host to match has no port (requests are compared without it)", m.Host)
		} else if strings.ContainsAny(m.Host, "/*?# @") {
			v.errorf(hp, "%q is not a host name", m.Host)
		} else {
			m.Host = strings.ToLower(m.Host)
		}
	}
}

func (v *validator) upstream(u *Upstream, m *Match, p string) {
	if len(u.Targets) == 0 && !v.failed(p+".targets") {
		v.errorf(p+".targets", "a route needs at least one target")
	}
	if s := u.StripPrefix; s != "" {
		sp := p + ".strip_prefix"
		base, prefix := m.Prefix()
		if !prefix {
			base = m.Path
		}
		switch {
		case !strings.HasPrefix(s, "/") || path.Clean(s) != s || s == "/":
			v.errorf(sp, "%q is not a clean path prefix such as /api", s)
		case m.Path != "" && base != s && !strings.HasPrefix(base, s+"/"):
			// Stripping from some of a route's requests and not others
			// would hand the upstream two shapes of path.
			v.errorf(sp, "%q is not a prefix of every path match.path %q matches", s, m.Path)
		}
	}
	v.positive(p+".connect_timeout", u.ConnectTimeout)
	v.positive(p+".timeout", u.Timeout)
	v.positive(p+".idle_timeout", u.IdleTimeout)
}

// breakerKeys are the YAML keys of breaker.Settings' fields that a route's
// breaker block sets.
var breakerKeys = map[string]string{
	"Window":           "window",
	"MinCalls":         "min_calls",
	"FailureRate":      "failure_rate",
	"SlowCallDuration": "slow_call_duration",
	"SlowCallRate":     "slow_call_rate",
	"OpenFor":          "open_for",
	"HalfOpenCalls":    "half_open_calls",
}

// breaker reports what breaker.Settings.Validate refuses of b, at b's
// keys: the breaker's rules are its own, stated once. The trial timeout
// is the upstream's, checked with the upstream.
func (v *validator) breaker(b *Breaker, p string) {
	s := breaker.Settings{
		Window:           b.Window,
		MinCalls:         b.MinCalls,
		FailureRate:      b.FailureRate,
		SlowCallDuration: b.SlowCallDuration,
		SlowCallRate:     b.SlowCallRate,
		OpenFor:          b.OpenFor,
		HalfOpenCalls:    b.HalfOpenCalls,
		TrialTimeout:     time.Second,
	}
	var errs interface{ Unwrap() []error }
	if err := s.Validate(); errors.As(err, &errs) {
		for _, err := range errs.Unwrap() {
			var se *breaker.SettingError
			if !errors.As(err, &se) {
				continue
			}
			if key := breakerKeys[se.Field]; key != "" && !v.failed(p+"."+key) {
				v.errorf(p+"."+key, "%v %s", se.Value, se.Why)
			}
		}
	}
	for i, s := range b.FailureStatuses {
		if s < 100 || s > 599 {
			v.errorf(fmt.Sprintf("%s.failure_statuses[%d]", p, i), "%d is not an HTTP status (100..599)", s)
		}
	}
}

func (v *validator) ratio(p string, r float64) {
	if !(r > 0 && r <= 1) && !v.failed(p) {
		v.errorf(p, "%v is outside (0,1]", r)
	}
}

// keyParts checks a key or fallback list for a part given twice. Header
// names are compared without case, as requests carry them; a part that did
// not decode has its own error and is not compared.
func (v *validator) keyParts(p string, parts []KeyPart) {
	seen := map[KeyPart]int{}
	for i, k := range parts {
		at := fmt.Sprintf("%s[%d]", p, i)
		if v.failed(at) {
			continue
		}
		same := k
		if k.Source == SourceHeader {
			same.Name = strings.ToLower(k.Name)
		}
		if j, dup := seen[same]; dup {
			v.errorf(at, "%s is already part %d of the key", k, j+1)
			continue
		}
		seen[same] = i
	}
}

// rate reads the rate of a limit or override from whichever form the file
// used; ok is false after an error.
//
// The long form is folded into Rate: the rest of floodgate reads one field.
func (v *validator) rate(p string, alg limit.Algorithm, r *limit.Rate, lim *int64, win *time.Duration) (ok bool) {
	n, w := *lim, *win
	hasRate, hasLimit, hasWindow := v.has(p+".rate"), v.has(p+".limit"), v.has(p+".window")
	if v.failed(p+".rate") || v.failed(p+".limit") || v.failed(p+".window") {
		return false
	}
	if alg == limit.Concurrency {
		switch {
		case hasRate:
			v.errorf(p+".rate", "concurrency takes limit: N (requests in flight) alone, not a rate")
		case hasWindow:
			v.errorf(p+".window", "concurrency takes limit: N (requests in flight) alone, not a window")
		case !hasLimit:
			v.errorf(p, "concurrency needs limit: N, the requests in flight")
		case n <= 0:
			v.errorf(p+".limit", "%d must be positive", n)
		default:
			*r = limit.Rate{Count: n}
			return true
		}
		return false
	}
	switch {
	case hasRate && hasLimit:
		v.errorf(p+".limit", "give rate, or limit with window, not both")
	case hasRate && hasWindow:
		v.errorf(p+".window", "give rate, or limit with window, not both")
	case hasRate:
		return true
	case hasLimit && !hasWindow:
		v.errorf(p+".limit", "limit needs a window (or write rate: N/UNIT)")
	case hasWindow && !hasLimit:
		v.errorf(p+".window", "window needs a limit (or write rate: N/UNIT)")
	case !hasLimit:
		v.errorf(p, "a limit needs a rate (rate: 100/s) or limit and window")
	case n <= 0:
		v.errorf(p+".limit", "%d must be positive", n)
	case w <= 0:
		v.errorf(p+".window", "%v must be positive", w)
	default:
		*r = limit.Rate{Count: n, Period: w}
		*lim, *win = 0, 0
		return true
	}
	return false
}

// limit checks one limit and builds its rule and its overrides' rules.
//
// Its rule is built only when the fields the rule is made of are sound, so
// that Rule.Validate reports what the config checks cannot (a burst below
// the cost, a sliding count above its maximum) and not the echo of an error
// already reported; build is false when the rule's name would be invalid.
// longestQueue is the longest queue of the limits: how long a request may
// wait for a token after it is admitted, holding its leases.
func longestQueue(lists ...[]*Limit) time.Duration {
	var q time.Duration
	for _, ls := range lists {
		for _, l := range ls {
			if l != nil {
				q = max(q, l.Queue)
			}
		}
	}
	return q
}

func (v *validator) limit(l *Limit, p, ruleName string, lease time.Duration, build bool) {
	if len(l.Key) == 0 && !v.failed(p+".key") {
		v.errorf(p, "a limit needs a key, such as [ip], [route] or [header:X-User-Id]")
	}
	v.keyParts(p+".key", l.Key)
	v.keyParts(p+".fallback", l.Fallback)
	switch l.OnMissing {
	case OnMissingDeny, OnMissingAllow:
	default:
		v.errorf(p+".on_missing", "unknown on_missing %q (deny, allow)", l.OnMissing)
	}
	v.onError(p+".on_error", l.OnError, true)

	before := len(v.errs)
	alg := l.Algorithm
	if v.has(p+".align") && alg != limit.FixedWindow {
		v.errorf(p+".align", "align applies to fixed_window only (algorithm is %v)", alg)
	}
	if v.has(p+".tz") && (alg != limit.FixedWindow || l.Align != limit.AlignEpoch) {
		v.errorf(p+".tz", "tz applies to fixed_window with align epoch only")
	}
	if v.has(p+".queue") && alg != limit.TokenBucket {
		v.errorf(p+".queue", "queue applies to token_bucket only (algorithm is %v)", alg)
	} else if l.Queue < 0 {
		v.errorf(p+".queue", "%v is negative", l.Queue)
	}
	if v.has(p + ".cost") {
		if alg == limit.Concurrency {
			v.errorf(p+".cost", "concurrency has no cost: a request holds one lease")
		} else if l.Cost <= 0 && !v.failed(p+".cost") {
			v.errorf(p+".cost", "%d must be positive", l.Cost)
		}
	}
	sliced := v.sync(l, p)
	rateOK := v.rate(p, alg, &l.Rate, &l.Limit, &l.Window)
	l.Burst = v.burst(p, alg, l.Burst, l.Rate, rateOK)
	ruleOK := len(v.errs) == before && !v.failedAny(p, "algorithm", "align", "tz", "queue", "cost", "rate", "limit", "window", "burst")

	rp := p + ".reject"
	if l.Reject.Status < 400 || l.Reject.Status > 599 {
		v.errorf(rp+".status", "%d is outside 400..599", l.Reject.Status)
	}
	v.code(rp+".code", l.Reject.Code)

	overrideOK := make([]bool, len(l.Overrides))
	for i, o := range l.Overrides {
		overrideOK[i] = v.override(l, o, fmt.Sprintf("%s.overrides[%d]", p, i))
	}
	if !ruleOK {
		return
	}
	if !build {
		// The rule's real name is invalid, and that is reported; a stand-in
		// still lets Rule.Validate report the rest.
		ruleName = "invalid"
	}
	rule := &limit.Rule{
		Name:      ruleName,
		Algorithm: alg,
		Rate:      l.Rate,
		Burst:     l.Burst,
		Cost:      l.Cost,
		Queue:     l.Queue,
		Align:     l.Align,
		Location:  l.TZ,
		Shadow:    l.Shadow,
		Sliced:    sliced,
	}
	if alg == limit.Concurrency {
		l.Cost, rule.Cost = 0, 0 // a request holds one lease
		rule.LeaseTTL = lease
	}
	if !v.rule(p, rule) {
		return
	}
	for i, o := range l.Overrides {
		if !overrideOK[i] {
			continue
		}
		// An override is the limit with another rate: the same algorithm,
		// cost, queue and windows, but counters of its own.
		or := &limit.Rule{
			Name:      ruleName + "#o" + strconv.Itoa(i+1),
			Algorithm: alg,
			Rate:      o.Rate,
			Burst:     o.Burst,
			Cost:      rule.Cost,
			Queue:     rule.Queue,
			Align:     rule.Align,
			Location:  rule.Location,
			Shadow:    rule.Shadow,
			LeaseTTL:  rule.LeaseTTL,
			Sliced:    rule.Sliced,
		}
		if v.rule(fmt.Sprintf("%s.overrides[%d]", p, i), or) && build {
			o.Rule = or
		}
	}
	if build {
		l.Rule = rule
	}
}

// sync checks a limit's sync and reports whether its rule is sliced.
// Slices are of a fixed window's count, leased to instances that share
// one key: for a key of a user or an IP every instance would hold a slice
// of each, and lose what it holds when the window ends.
func (v *validator) sync(l *Limit, p string) bool {
	sp := p + ".sync"
	switch l.Sync {
	case SyncExact:
		return false
	case SyncLease:
	default:
		v.errorf(sp, "unknown sync %q (exact, lease)", l.Sync)
		return false
	}
	ok := true
	if l.Algorithm != limit.FixedWindow {
		v.errorf(sp, "lease takes slices of a fixed window; a %v cannot be leased", l.Algorithm)
		ok = false
	}
	for _, parts := range [][]KeyPart{l.Key, l.Fallback} {
		for _, k := range parts {
			if k.Source != SourceGlobal && k.Source != SourceRoute {
				v.errorf(sp, "lease is for keys every request shares (global, route); key part %s differs from request to request", k)
				return false
			}
		}
	}
	if ok && v.storeType != StoreRedis {
		v.warnf(sp, "lease has nothing to lease from with the %s store, which decides in this process: the limit is exact", v.storeType)
	}
	return ok
}

// rule validates a built rule, reporting its problem at the line of the
// limit or override at p. The message drops the rule's name: the path
// already says which limit it is.
func (v *validator) rule(p string, r *limit.Rule) bool {
	err := r.Validate()
	if err == nil {
		return true
	}
	v.errorf(p, "%s", strings.TrimPrefix(err.Error(), "rule "+r.Name+": "))
	return false
}

// burst checks a written burst, or returns the default: the count of the
// rate as written, so 100/s has burst 100 and 6000/min burst 6000.
func (v *validator) burst(p string, alg limit.Algorithm, burst int64, r limit.Rate, rateOK bool) int64 {
	bp := p + ".burst"
	switch {
	case !v.has(bp):
		if alg == limit.TokenBucket && rateOK {
			return r.Count
		}
	case alg != limit.TokenBucket:
		v.errorf(bp, "burst applies to token_bucket only (algorithm is %v)", alg)
	case burst <= 0 && !v.failed(bp):
		v.errorf(bp, "%d must be positive", burst)
	}
	return burst
}

// override checks an override; ok reports whether its rule can be built.
func (v *validator) override(l *Limit, o *Override, p string) (ok bool) {
	hasValues, hasHeader, hasClaim := v.has(p+".values"), v.has(p+".header"), v.has(p+".claim")
	switch {
	case hasValues && hasHeader:
		v.errorf(p+".header", "an override matches by values or by header, not both")
	case hasClaim && (hasValues || hasHeader):
		v.errorf(p+".claim", "an override matches by one of values, header and claim, not several")
	case !hasValues && !hasHeader && !hasClaim:
		v.errorf(p, "an override needs values, header or claim to match requests by")
	case hasClaim:
		v.claimMatch(o.Claim, p+".claim")
	case hasValues:
		if len(o.Values) == 0 && !v.failed(p+".values") {
			v.errorf(p+".values", "empty: the override would match nothing")
		}
		for i, kv := range o.Values {
			vp := fmt.Sprintf("%s.values[%d]", p, i)
			if len(l.Key) > 0 && len(kv) != len(l.Key) && !v.failed(vp) {
				v.errorf(vp, "%d values for a key of %d parts %v", len(kv), len(l.Key), l.Key)
			}
		}
	case o.Header != nil && !v.failed(p+".header"):
		if !isToken(o.Header.Name) {
			v.errorf(p+".header.name", "%q is not a valid header name", o.Header.Name)
		}
		if o.Header.Value == "" {
			v.errorf(p+".header.value", "empty: give the header value to match")
		}
	}
	before := len(v.errs)
	rateOK := v.rate(p, l.Algorithm, &o.Rate, &o.Limit, &o.Window)
	o.Burst = v.burst(p, l.Algorithm, o.Burst, o.Rate, rateOK)
	return len(v.errs) == before && !v.failedAny(p, "rate", "limit", "window", "burst")
}

// unreachable warns of a route that an earlier one hides. It is not an
// error: first match wins (SPEC §4.1), as in other gateways, and a route
// may be parked behind another on purpose.
func (v *validator) unreachable(routes []*Route) {
	for j, later := range routes {
		for _, earlier := range routes[:j] {
			if covers(&earlier.Match, &later.Match) {
				v.warnf(fmt.Sprintf("routes[%d].match", j), "unreachable: route %q (line %d) takes every request this route matches (the first match wins)", earlier.ID, earlier.Line)
				break
			}
		}
	}
}

// covers reports whether every request b matches is matched by a.
func covers(a, b *Match) bool {
	if a.Path == "" || b.Path == "" || a.Host != "" && a.Host != b.Host {
		return false
	}
	if len(a.Methods) > 0 {
		if len(b.Methods) == 0 {
			return false
		}
		for _, m := range b.Methods {
			if !slices.Contains(a.Methods, m) {
				return false
			}
		}
	}
	ap, aPrefix := a.Prefix()
	bp, bPrefix := b.Prefix()
	if !bPrefix {
		bp = b.Path
	}
	if !aPrefix {
		return !bPrefix && a.Path == b.Path
	}
	return ap == "" || bp == ap || strings.HasPrefix(bp, ap+"/")
}

func (v *validator) events(c *Config) {
	e := &c.Events
	switch e.Sink {
	case SinkNone, SinkFile:
	case SinkRedis, SinkNATS:
		if e.SpoolDir == "" {
			v.errorAt(v.lineOr("events.spool_dir", "events.sink"), "events.spool_dir", "events.sink %s needs a spool_dir, where events wait while the sink is down", e.Sink)
		}
	default:
		v.errorf("events.sink", "unknown sink %q (none, redis, nats, file)", e.Sink)
	}
	switch e.Audit {
	case AuditNone:
	case AuditRejected, AuditAll:
		if e.Sink == SinkNone {
			v.errorf("events.audit", "audit %s needs an events sink, but events.sink is none", e.Audit)
		}
	default:
		v.errorf("events.audit", "unknown audit %q (none, rejected, all)", e.Audit)
	}
	if e.Redis.Stream == "" {
		v.errorf("events.redis.stream", "empty")
	}
	if e.Redis.MaxLen <= 0 {
		v.errorf("events.redis.maxlen", "%d must be positive", e.Redis.MaxLen)
	}
	for i, a := range e.Redis.Addrs {
		v.addr(fmt.Sprintf("events.redis.addrs[%d]", i), a, true)
	}
	if e.Sink == SinkRedis && len(e.Redis.Addrs) == 0 && c.Store.Type != StoreRedis {
		v.errorf("events.sink", "the redis sink writes to the store's Redis, but store.type is %s; give events.redis.addrs", c.Store.Type)
	}
	if u, err := url.Parse(e.NATS.URL); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" {
		v.errorf("events.nats.url", "%q is not a nats:// or tls:// URL", redactURL(e.NATS.URL))
	}
	if !subjectRE.MatchString(e.NATS.Subject) {
		v.errorf("events.nats.subject", "%q is not a NATS subject without wildcards", e.NATS.Subject)
	}
	if e.Sink == SinkFile && e.File.Path == "" {
		v.errorf("events.file.path", "the file sink needs a path")
	}
	if e.SpoolMaxBytes <= 0 {
		v.errorf("events.spool_max_bytes", "%d must be positive", e.SpoolMaxBytes)
	}
	if e.MaxBody < 0 {
		v.errorf("events.max_body", "%d is negative (0 keeps no body)", e.MaxBody)
	}
	for i, h := range e.Headers {
		if !isToken(h) {
			v.errorf(fmt.Sprintf("events.headers[%d]", i), "%q is not a valid header name", h)
		}
	}
}

// redactURL hides the password of a URL as "***": error messages and
// Redacted must not print it.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return redactedURL(u)
	}
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		return "***" + s[i:]
	}
	return s
}

func redactedURL(u *url.URL) string {
	if _, has := u.User.Password(); !has {
		return u.String()
	}
	// url.UserPassword would escape the stars, so insert them by hand
	// after the user name.
	r := *u
	r.User = url.User(u.User.Username())
	s := r.String()
	prefix := u.Scheme + "://" + r.User.String()
	if strings.HasPrefix(s, prefix+"@") {
		return prefix + ":***" + s[len(prefix):]
	}
	return u.Redacted()
}

// codes checks that each code has one message wherever it is given, and
// resolves the message of every code the gateway may answer with.
func (v *validator) codes(c *Config) {
	type use struct {
		path, code, msg string
		line            int
		def             string // the built-in code whose text fills in
	}
	var uses []use
	for code, msg := range c.Responses {
		p := "responses." + code
		if !codeRE.MatchString(code) {
			v.errorf(p, "%q: a code is made of a-z, 0-9 and _", code)
		}
		if msg == "" {
			v.errorf(p, "empty message")
		}
		uses = append(uses, use{p, code, msg, v.line(p), ""})
	}
	rejects := func(ls []*Limit, p string) {
		for i, l := range ls {
			rp := fmt.Sprintf("%s[%d].reject", p, i)
			line := v.line(rp + ".message")
			if !v.has(rp + ".message") {
				line = v.line(rp + ".code")
			}
			uses = append(uses, use{rp + ".message", l.Reject.Code, l.Reject.Message, line, CodeRateLimited})
		}
	}
	rejects(c.GlobalLimits, "global_limits")
	for i, r := range c.Routes {
		rp := fmt.Sprintf("routes[%d]", i)
		rejects(r.Limits, rp+".limits")
		fp := rp + ".fallback"
		line := v.line(fp + ".message")
		if !v.has(fp + ".message") {
			line = v.line(fp + ".code")
		}
		uses = append(uses, use{fp + ".message", r.Fallback.Code, r.Fallback.Message, line, CodeServiceUnavailable})
	}
	slices.SortStableFunc(uses, func(a, b use) int { return cmp.Compare(a.line, b.line) })

	v.messages = map[string]string{}
	first := map[string]use{}
	for _, u := range uses {
		if u.msg == "" {
			continue
		}
		if f, ok := first[u.code]; ok {
			if f.msg != u.msg {
				v.errorAt(u.line, u.path, "code %s has two messages: %q here and %q at line %d (a code means one message everywhere)", u.code, u.msg, f.msg, f.line)
			}
			continue
		}
		first[u.code] = u
		v.messages[u.code] = u.msg
	}
	for code, msg := range builtinMessages {
		if _, ok := v.messages[code]; !ok {
			v.messages[code] = msg
		}
	}
	for _, u := range uses {
		if _, ok := v.messages[u.code]; !ok && u.def != "" {
			v.messages[u.code] = builtinMessages[u.def]
		}
	}
}
