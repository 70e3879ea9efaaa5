package gateway

import (
	"strings"

	"github.com/floodgate-gw/floodgate/internal/spec"
	"github.com/floodgate-gw/floodgate/limit"
)

// value is the part's value for this request; "" means missing. A value
// that is only white space is missing too: a client that sends
// "X-User-Id: " must not share one counter with every other such client,
// and nothing may stand in for it as the text "null" does in limiters
// that format a missing header into the key.
func (x *exchange) value(p spec.Part) string {
	var v string
	switch p.Src {
	case spec.Global:
		return "-"
	case spec.Route:
		return x.route.id
	case spec.Path:
		return x.path
	case spec.Method:
		return x.r.Method
	case spec.Host:
		return x.host
	case spec.IP:
		return x.ipKey()
	case spec.Header:
		if vv := x.r.Header[p.Name]; len(vv) > 0 {
			v = vv[0]
		}
	case spec.Query:
		if !x.queryOK {
			x.query, x.queryOK = x.r.URL.Query(), true
		}
		if vv := x.query[p.Name]; len(vv) > 0 {
			v = vv[0]
		}
	case spec.Cookie:
		// The first cookie of that name: a client that repeats a cookie
		// must not get to pick which one limits it.
		if c, err := x.r.Cookie(p.Name); err == nil {
			v = c.Value
		}
	case spec.JWT:
		v = x.claim(p.Name)
	case spec.TLS:
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
func (x *exchange) resolve(parts []spec.Part, fallback bool, values []string) (limit.Key, []string, bool) {
	var buf [4]limit.Part
	ps, values, ok := x.parts(parts, fallback, values, buf[:0])
	if !ok {
		return "", values, false
	}
	return limit.NewKey(ps...), values, true
}

// parts appends the parts of the key for this request to ps and their
// values to values; it fails when any part is missing.
func (x *exchange) parts(parts []spec.Part, fallback bool, values []string, ps []limit.Part) ([]limit.Part, []string, bool) {
	for _, p := range parts {
		v := x.value(p)
		if v == "" {
			return ps, values, false
		}
		ps = append(ps, limit.Part{Kind: p.Kind, Value: v, Fallback: fallback})
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
