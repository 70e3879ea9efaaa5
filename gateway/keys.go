package gateway

import (
	"strings"

	"github.com/floodgate-gw/floodgate/limit"
)

// source is where a key part's value comes from (docs/configuration.md,
// Keys).
type source uint8

const (
	srcGlobal source = iota
	srcRoute
	srcPath
	srcMethod
	srcHost
	srcIP
	srcHeader
	srcQuery
	srcCookie
	srcJWT
	srcTLS
)

// keyPart is one part of a limit's key as the configuration names it.
type keyPart struct {
	src  source
	name string // header (canonical), query, cookie or claim name
	kind string // the part's kind in the stored key: "ip", "header:x-user-id"
}

// value is the part's value for this request; "" means missing. A value
// that is only white space is missing too: a client that sends
// "X-User-Id: " must not share one counter with every other such client,
// and nothing may stand in for it as the text "null" does in limiters
// that format a missing header into the key.
func (x *exchange) value(p keyPart) string {
	var v string
	switch p.src {
	case srcGlobal:
		return "-"
	case srcRoute:
		return x.route.id
	case srcPath:
		return x.path
	case srcMethod:
		return x.r.Method
	case srcHost:
		return x.host
	case srcIP:
		return x.ipKey()
	case srcHeader:
		if vv := x.r.Header[p.name]; len(vv) > 0 {
			v = vv[0]
		}
	case srcQuery:
		if !x.queryOK {
			x.query, x.queryOK = x.r.URL.Query(), true
		}
		if vv := x.query[p.name]; len(vv) > 0 {
			v = vv[0]
		}
	case srcCookie:
		// The first cookie of that name: a client that repeats a cookie
		// must not get to pick which one limits it.
		if c, err := x.r.Cookie(p.name); err == nil {
			v = c.Value
		}
	case srcJWT:
		v = x.claim(p.name)
	case srcTLS:
		// Only a certificate that verified against server.tls.client_ca:
		// with client_auth: request, net/http would hand over an
		// unverified one too if asked to.
		if t := x.r.TLS; t != nil && len(t.VerifiedChains) > 0 && len(t.VerifiedChains[0]) > 0 {
			v = t.VerifiedChains[0][0].Subject.String()
		}
	}
	if strings.TrimSpace(v) == "" {
		return ""
	}
	return v
}

// resolve builds the key of parts for this request and appends the parts'
// values to values. It fails when any part is missing; values may then
// hold some of them.
func (x *exchange) resolve(parts []keyPart, fallback bool, values []string) (limit.Key, []string, bool) {
	var buf [4]limit.Part
	ps, values, ok := x.parts(parts, fallback, values, buf[:0])
	if !ok {
		return "", values, false
	}
	return limit.NewKey(ps...), values, true
}

// parts appends the parts of the key for this request to ps and their
// values to values; it fails when any part is missing.
func (x *exchange) parts(parts []keyPart, fallback bool, values []string, ps []limit.Part) ([]limit.Part, []string, bool) {
	for _, p := range parts {
		v := x.value(p)
		if v == "" {
			return ps, values, false
		}
		ps = append(ps, limit.Part{Kind: p.kind, Value: v, Fallback: fallback})
		values = append(values, v)
	}
	return ps, values, true
}

// ipKey is the ip key part: the client address, IPv6 grouped by prefix.
func (x *exchange) ipKey() string {
	if x.clientIP == "" {
		x.clientIP = x.gen.ips.Key(x.client)
	}
	return x.clientIP
}
