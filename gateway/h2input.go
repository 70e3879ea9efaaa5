package gateway

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// malformed reports a request that HTTP/1.1's parsers (net/http's and
// the Listener's framing checks) refuse, but which HTTP/2, whose fields
// are binary frames, lets reach the handler: the gateway answers it 400
// before routing.
//
// Passed on, it would be read one way by the gateway and another by the
// upstream. A method with a space ("DELETE /admin/x"), written into the
// upstream's request line, moves the target the upstream reads away from
// the one the routes and limits were matched on. An authority with a
// space or a slash goes on in X-Forwarded-Host and into the host key
// part. Of a Content-Length, net/http's HTTP/2 server reads only the
// first field, and only when a body follows.
func malformed(r *http.Request) bool {
	if !isToken(r.Method) {
		// net/http's HTTP/1 server refuses such a method itself; on every
		// protocol the check costs a loop over a few bytes.
		return true
	}
	if r.ProtoMajor != 2 {
		return false
	}
	// HTTP/1.1's Host is checked so by net/http's server.
	if !httpguts.ValidHostHeader(r.Host) {
		return true
	}
	for _, h := range r.Header["Host"] {
		if !httpguts.ValidHostHeader(h) {
			return true
		}
	}
	// The request target as the client sent it (":path"): visible ASCII
	// only, as the Listener's checks want it of an HTTP/1.1 request line.
	// net/http's HTTP/2 server refuses the control bytes but not a space
	// or a raw byte above 0x7e, which it would send on escaped, as
	// another path than HTTP/1 could name.
	for i := range len(r.RequestURI) {
		if b := r.RequestURI[i]; b <= ' ' || b >= 0x7f {
			return true
		}
	}
	// Digits only, and one value however many fields carry it, as on
	// HTTP/1.1.
	cl := r.Header["Content-Length"]
	for _, v := range cl {
		if !isDigits(v) || v != cl[0] {
			return true
		}
	}
	return false
}

// trimFieldValues cuts the white space (SP, HTAB) at either end of each
// field value, which HTTP/1.1's parser drops as the space around a value
// and HTTP/2 delivers as part of it (RFC 9113 §8.2.1 calls such a field
// malformed; a client may send it all the same). Left in, "k1 " would be
// a key of its own beside "k1", a fresh quota for every variant of one
// user's id, while the upstream reads them all as "k1".
//
// Content-Length is left as it came: with white space it is malformed
// (malformed refuses it), not another way to write the number, and
// net/http's HTTP/2 server resets the stream on it when the body comes,
// which a trimmed value would race (the request forwarded meanwhile,
// with no body).
func trimFieldValues(h http.Header) {
	for k, vv := range h {
		if k == "Content-Length" {
			continue
		}
		for i, v := range vv {
			if v != "" && (isOWS(v[0]) || isOWS(v[len(v)-1])) {
				vv[i] = strings.Trim(v, " \t")
			}
		}
	}
}

func isOWS(b byte) bool { return b == ' ' || b == '\t' }

// isToken reports whether s is an RFC 9110 token (§5.6.2): a method, a
// field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// dropH2CUpgrade takes the h2c (and h2) protocols out of an HTTP/1.1
// request's Upgrade field, and HTTP2-Settings with them: the gateway does
// not offer the switch to HTTP/2 in clear, and passed on, an upstream
// that accepted it would be joined to the client by a tunnel in which
// requests pass by the routes and limits (h2c smuggling). What is left
// of the field, another protocol asked for beside, goes on; without one
// the request goes upstream as a plain request.
func dropH2CUpgrade(h http.Header) {
	delete(h, "Http2-Settings")
	vv, ok := h["Upgrade"]
	if !ok {
		return
	}
	var kept []string
	dropped := false
	for _, v := range vv {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			name, _, _ := strings.Cut(p, "/")
			if strings.EqualFold(name, "h2c") || strings.EqualFold(name, "h2") {
				dropped = true
			} else if p != "" {
				kept = append(kept, p)
			}
		}
	}
	switch {
	case !dropped:
	case kept == nil:
		delete(h, "Upgrade")
	default:
		h["Upgrade"] = []string{strings.Join(kept, ", ")}
	}
}
