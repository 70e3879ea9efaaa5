package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// JWT is server.jwt: how the bearer tokens that jwt:CLAIM key parts and
// claim overrides read are found and verified.
type JWT struct {
	// JWKSFile is a JWKS file (RFC 7517) holding the keys tokens are
	// verified with; it is reloaded when it changes. Exactly one of
	// JWKSFile and JWKSURL is set.
	JWKSFile string `yaml:"jwks_file"`

	// JWKSURL is where the JWKS is fetched, over http or https, cached by
	// its HTTP cache headers and fetched again when a token names a key
	// it lacks (at most once a minute).
	JWKSURL string `yaml:"jwks_url" redact:"url"`

	// Issuer is the iss a token must have. Empty: any.
	Issuer string `yaml:"issuer"`

	// Audience is what a token's aud must hold. Empty: any, which with an
	// identity provider that serves several services accepts their tokens
	// too.
	Audience string `yaml:"audience"`

	// Leeway is the clock skew allowed on exp and nbf. Default 30s; zero
	// allows none.
	Leeway time.Duration `yaml:"leeway"`

	// From is where a request carries its token. Default
	// header:Authorization.
	From TokenFrom `yaml:"from"`
}

func (j *JWT) setDefaults() {
	j.Leeway = 30 * time.Second
	j.From = TokenFrom{Source: SourceHeader, Name: "Authorization"}
}

// TokenFrom is where a request carries its token, written "header:NAME" or
// "cookie:NAME". From a header, a value "Bearer TOKEN" gives TOKEN (the
// scheme in any case, RFC 9110 §11.1); from Authorization, a value of any
// other scheme is no token.
type TokenFrom struct {
	// Source is SourceHeader or SourceCookie.
	Source Source
	// Name is the header or cookie name, as written.
	Name string
}

// String writes the place as the file does.
func (f TokenFrom) String() string { return string(f.Source) + ":" + f.Name }

// UnmarshalText reads "header:NAME" or "cookie:NAME".
func (f *TokenFrom) UnmarshalText(text []byte) error {
	s := string(text)
	src, name, _ := strings.Cut(s, ":")
	switch {
	case Source(src) != SourceHeader && Source(src) != SourceCookie:
		return fmt.Errorf("%q: a token comes from header:NAME or cookie:NAME", s)
	case !isToken(name):
		return fmt.Errorf("%q: %q is not a valid %s name", s, name, src)
	}
	*f = TokenFrom{Source: Source(src), Name: name}
	return nil
}

// MarshalText writes the place as UnmarshalText reads it.
func (f TokenFrom) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// ClaimMatch matches a request whose verified token has a claim of a value.
type ClaimMatch struct {
	// Name is the top-level claim's name.
	Name string `yaml:"name"`
	// Value is compared exactly with the claim as a key part reads it: a
	// string as it is, a number in canonical decimal ("3" for 3.0). Never
	// empty.
	Value string `yaml:"value"`
}

// maxClaimName bounds a claim's name in jwt:CLAIM and claim overrides.
const maxClaimName = 256

// validClaimName accepts the names a claim may have in a key part: any
// text of printable characters, no space, such as "sub", "tier" or
// "https://example.com/roles".
func validClaimName(s string) bool {
	if s == "" || len(s) > maxClaimName {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// jwt checks server.jwt. Whether its JWKS file holds usable keys is for
// the one who reads it, check and the gateway, to say at the line of
// jwks_file.
func (v *validator) jwt(c *Config) {
	j := c.Server.JWT
	p := "server.jwt"
	if j == nil || v.bad[p] {
		return
	}
	switch {
	case v.failedAny(p, "jwks_file", "jwks_url"):
	case j.JWKSFile != "" && j.JWKSURL != "":
		v.errorf(p+".jwks_url", "give jwks_file or jwks_url, not both")
	case j.JWKSFile == "" && j.JWKSURL == "":
		v.errorf(p, "server.jwt needs jwks_file or jwks_url: the keys tokens are verified with")
	case j.JWKSURL != "":
		v.jwksURL(p+".jwks_url", j.JWKSURL)
	}
	if j.Leeway < 0 {
		v.errorf(p+".leeway", "%v is negative (0s allows no clock skew)", j.Leeway)
	}
	if j.Audience == "" && !v.failed(p+".audience") {
		v.warnf(p, "no audience: a token the keys signed for any other service is accepted too; set audience to this service's")
	}
}

func (v *validator) jwksURL(p, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		v.errorf(p, "%q is not an absolute http(s) URL", redactURL(s))
		return
	}
	if u.Fragment != "" {
		v.errorf(p, "%q: a fragment is never sent to a server", redactedURL(u))
	}
	if loopback, _ := loopbackHost(u.Hostname()); u.Scheme == "http" && !loopback {
		v.warnf(p, "plain http: whoever is on the path to %s can replace the keys, and so forge any token; use https", u.Host)
	}
}

// jwtParts refuses jwt: key parts and claim overrides in a config without
// server.jwt, at the line of each.
func (v *validator) jwtParts(c *Config) {
	if c.Server.JWT != nil {
		return
	}
	limits := func(ls []*Limit, p string) {
		for i, l := range ls {
			lp := fmt.Sprintf("%s[%d]", p, i)
			for _, list := range []struct {
				name  string
				parts []KeyPart
			}{{"key", l.Key}, {"fallback", l.Fallback}} {
				for j, k := range list.parts {
					if k.Source == SourceJWT {
						v.errorf(fmt.Sprintf("%s.%s[%d]", lp, list.name, j), "%s needs server.jwt, which says how tokens are verified", k)
					}
				}
			}
			for j, o := range l.Overrides {
				if o.Claim != nil {
					v.errorf(fmt.Sprintf("%s.overrides[%d].claim", lp, j), "a claim override needs server.jwt, which says how tokens are verified")
				}
			}
		}
	}
	limits(c.GlobalLimits, "global_limits")
	for i, r := range c.Routes {
		limits(r.Limits, fmt.Sprintf("routes[%d].limits", i))
		if r.Protect != nil && r.Protect.Priority != nil && r.Protect.Priority.Key.Source == SourceJWT {
			v.errorf(fmt.Sprintf("routes[%d].protect.priority.key", i), "%s needs server.jwt, which says how tokens are verified", r.Protect.Priority.Key)
		}
	}
}

// claimMatch checks a claim override's match.
func (v *validator) claimMatch(m *ClaimMatch, p string) {
	if m == nil || v.failed(p) {
		return
	}
	if !validClaimName(m.Name) {
		v.errorf(p+".name", "%q is not a claim name (printable, no spaces, at most %d bytes)", m.Name, maxClaimName)
	}
	if m.Value == "" {
		v.errorf(p+".value", "empty: give the claim value to match")
	}
}
