package config

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9_-]+$`)
	codeRE    = regexp.MustCompile(`^[a-z0-9_]+$`)
	envRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	subjectRE = regexp.MustCompile(`^[^\s*>.]+(\.[^\s*>.]+)*$`)
)

// A concurrency lease expires queue + connect_timeout + timeout + leaseSlack
// after it is taken: long enough to cover an exchange up to its
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
	v.serverTLS(c)
	v.http2(&c.Server.HTTP2)
	v.jwt(c)
	v.jwtParts(c)
	v.tlsParts(c)
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
	v.tracing(&c.Tracing)
	v.codes(c)
}

// addr checks a HOST:PORT address; a listen address may leave out the
// host, a remote one may not. An address has no user or password, so a
// message shows one written as a URL with its credentials hidden.
func (v *validator) addr(p, a string, remote bool) {
	shown := redactAddr(a)
	want := "HOST:PORT or :PORT"
	if remote {
		want = "HOST:PORT"
	}
	if strings.Contains(a, "@") || strings.Contains(a, "://") {
		v.errorf(p, "%q is not an address (%s): write it without a scheme or credentials; a password goes in its own key", shown, want)
		return
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		v.errorf(p, "%q is not an address (%s)", shown, want)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 || (remote && n == 0) {
		v.errorf(p, "%q: port %q is not a port number", shown, port)
	}
	if remote && host == "" {
		v.errorf(p, "%q has no host", shown)
	}
}

// redactAddr is a as a message may show it: whatever comes before an "@"
// may be a password (an address written as redis://user:password@host,
// or as a lone password before the @), so all of it is hidden.
func redactAddr(a string) string {
	i := strings.LastIndexByte(a, '@')
	if i < 0 {
		return a
	}
	if j := strings.Index(a, "://"); j >= 0 && j < i {
		return a[:j+3] + "***" + a[i:]
	}
	return "***" + a[i:]
}

// env reads the variable a *_env key names. Its value is a secret: no
// message may print it. Nor may one print a name that is not a name: it
// may be the secret itself, written where its variable's name belongs.
func (v *validator) env(p, name string) (string, bool) {
	if !envRE.MatchString(name) {
		v.errorf(p, "not an environment variable name (letters, digits and _, not starting with a digit); "+
			"put the secret in a variable and name the variable here")
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
