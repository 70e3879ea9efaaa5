package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/internal/filekind"
)

// The server, admin and rls blocks, and the listeners they open.

func (v *validator) server(c *Config) {
	s := &c.Server
	if s.Listen == "" {
		// HTTPS only: server.listen_tls serves the routes.
		if len(c.Routes) > 0 && s.ListenTLS == "" {
			v.errorf("server.listen", "empty, but the config has routes to serve (for HTTPS only, set server.listen_tls)")
		}
	} else {
		v.addr("server.listen", s.Listen, false)
	}
	if s.IPv6Prefix < 0 || s.IPv6Prefix > 128 {
		v.errorf("server.ipv6_prefix", "%d is outside 0..128", s.IPv6Prefix)
	}
	v.positive("server.shutdown_timeout", s.ShutdownTimeout)
	if s.ShutdownDelay < 0 || s.ShutdownDelay > 5*time.Minute {
		v.errorf("server.shutdown_delay", "%s is outside 0..5m", s.ShutdownDelay)
	}
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
	if s.SendTimeout < 0 {
		v.errorf("server.send_timeout", "%v is negative (0 means no bound)", s.SendTimeout)
	}
	v.accessLog(c)
}

// accessLog checks server.access_log: off, stdout, stderr, or a regular
// file whose directory exists. A path is followed as the system follows
// it, symbolic links included; what it ends at must be a regular file or
// nothing yet: a named pipe would block the gateway that opens it, and a
// device is not the gateway's to write. Whether the file can be opened is
// known only when serve opens it, and a reload refuses a file it cannot
// open.
func (v *validator) accessLog(c *Config) {
	const p = "server.access_log"
	const want = "write off, stdout, stderr or the path of a file"
	a := c.Server.AccessLog
	if strings.TrimSpace(a) != a {
		v.errorf(p, "%q begins or ends with white space; %s, without it", a, want)
		return
	}
	switch strings.ToLower(a) {
	case AccessLogOff, AccessLogStdout, AccessLogStderr:
		if a != strings.ToLower(a) {
			v.errorf(p, "write %q in lower case", strings.ToLower(a))
		}
		return
	case "":
		v.errorf(p, "empty; %s", want)
		return
	case "false", "no", "true", "yes", "on", "n", "y":
		// YAML 1.1 reads these as booleans; a file named "no" is
		// surely not what was meant.
		v.errorf(p, "%q: %s (a file of that name would be ./%s)", a, want, a)
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
	if abs, err := filepath.Abs(a); err == nil && (strings.HasPrefix(abs, "/dev/") || strings.HasPrefix(abs, "/proc/")) {
		// /dev/stdout is whatever the process's stdout is: a terminal,
		// a pipe, a file opened without O_APPEND.
		v.errorf(p, "%q is a device path; write stdout or stderr for the process's own streams, or the path of a regular file", a)
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
	if fi, err := os.Stat(a); err == nil {
		switch kind := filekind.NotRegular(fi.Mode()); {
		case fi.IsDir():
			v.errorf(p, "%q is a directory; write the path of a file", a)
			return
		case kind != "":
			v.errorf(p, "%q is %s; write the path of a regular file", a, kind)
			return
		}
	}
	// Lines appended to a file the gateway reads would break it: the
	// next reload, or the next start, would refuse it.
	type other struct{ path, file string }
	others := []other{{"", v.file}}
	if c.Events.Sink == SinkFile {
		others = append(others, other{"events.file.path", c.Events.File.Path})
	}
	if c.Server.JWT != nil {
		others = append(others, other{"server.jwt.jwks_file", c.Server.JWT.JWKSFile})
	}
	for _, o := range others {
		if !sameFile(a, o.file) {
			continue
		}
		if o.path == "" {
			v.errorf(p, "%q is this config file; write the path of a file of its own", a)
		} else {
			v.errorf(p, "%q is the file of %s (%s); write the path of a file of its own", a, o.path, v.where(o.path))
		}
	}
}

// sameFile reports whether paths a and b name one file: the same path
// once absolute and clean, or, when both exist, the same file by any
// path (a link, a symbolic link, "..").
func sameFile(a, b string) bool {
	if b == "" {
		return false
	}
	aa, errA := filepath.Abs(a)
	ab, errB := filepath.Abs(b)
	if errA == nil && errB == nil && aa == ab {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
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
	names, tokens := map[string]string{}, map[string]string{}
	if a.Token != "" {
		names["admin"], tokens[a.Token] = "admin.token", "admin.token"
	}
	for i, t := range a.Tokens {
		p := fmt.Sprintf("admin.tokens[%d]", i)
		if t == nil {
			v.errorf(p, "a named token needs name and token or token_env")
			continue
		}
		switch {
		case t.Name == "":
			v.errorf(p+".name", "a named token needs a name: who holds it, for the logs")
		case !tokenNameRE.MatchString(t.Name):
			v.errorf(p+".name", "%q: want [a-z0-9][a-z0-9_.@-]*, at most 64 bytes", t.Name)
		case names[t.Name] != "":
			v.errorf(p+".name", "%q is already the name of %s", t.Name, names[t.Name])
		default:
			names[t.Name] = p
		}
		switch {
		case t.Token != "" && t.TokenEnv != "":
			v.errorf(p+".token_env", "give token or token_env, not both")
		case t.TokenEnv != "":
			if val, ok := v.env(p+".token_env", t.TokenEnv); ok {
				t.Token = val
			}
		case t.Token == "":
			v.errorf(p, "a named token needs token or token_env")
		}
		if t.Token != "" {
			if other := tokens[t.Token]; other != "" {
				// The token would not tell who it is.
				v.errorf(p, "the same token as %s: each holder needs a token of its own", other)
			}
			tokens[t.Token] = p
		}
	}
	v.adminOpen(a)
}

// tokenNameRE is the shape of a named admin token's name.
var tokenNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.@-]{0,63}$`)

func (v *validator) rls(r *RLS) {
	if r.Listen != "" {
		v.addr("rls.listen", r.Listen, false)
	} else if r.ConfigDir != "" {
		v.errorf("rls.config_dir", "set, but rls.listen is empty, so no service would read it")
	}
	switch r.ResponseHeaders {
	case "", "none", "ietf", "envoy":
	default:
		v.errorf("rls.response_headers", "%q: none, ietf or envoy", r.ResponseHeaders)
	}
	if r.Listen == "" {
		if r.Shadow {
			v.errorf("rls.shadow", "set, but rls.listen is empty, so no service would answer")
		}
		if r.QuotaMode {
			v.errorf("rls.quota_mode", "set, but rls.listen is empty, so no service would answer")
		}
		if r.ResponseMetadata {
			v.errorf("rls.response_metadata", "set, but rls.listen is empty, so no service would answer")
		}
		if r.ResponseHeaders != "" && r.ResponseHeaders != "none" {
			v.errorf("rls.response_headers", "set, but rls.listen is empty, so no service would answer")
		}
	}
	v.rlsTLS(r)
	v.rlsXDS(r)
}

// listeners refuses two listeners on one port: the second would fail to
// bind only at start, after check said the config was fine.
func (v *validator) listeners(c *Config) {
	type ln struct{ path, addr string }
	var ls []ln
	for _, l := range []ln{{"server.listen", c.Server.Listen}, {"server.listen_tls", c.Server.ListenTLS}, {"admin.listen", c.Admin.Listen}, {"rls.listen", c.RLS.Listen}} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil || port == "0" {
			continue
		}
		for _, o := range ls {
			oh, op, _ := net.SplitHostPort(o.addr)
			if op == port && (oh == host || anyHost(oh) || anyHost(host)) {
				v.errorf(l.path, "%q overlaps %s %q (%s)", redactAddr(l.addr), o.path, redactAddr(o.addr), v.where(o.path))
			}
		}
		ls = append(ls, l)
	}
}

func anyHost(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
