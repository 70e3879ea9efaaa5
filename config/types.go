package config

import (
	"fmt"
	"strconv"
	"strings"
)

var sources = []Source{SourceGlobal, SourceRoute, SourcePath, SourceMethod, SourceHost, SourceIP, SourceHeader, SourceQuery, SourceCookie, SourceJWT, SourceTLS}

// named reports whether a source takes a name.
func (s Source) named() bool {
	return s == SourceHeader || s == SourceQuery || s == SourceCookie || s == SourceJWT || s == SourceTLS
}

// String returns the part as the file writes it: "ip", "header:X-User-Id".
func (p KeyPart) String() string {
	if p.Name == "" {
		return string(p.Source)
	}
	return string(p.Source) + ":" + p.Name
}

// Kind is the part's kind in a stored key (limit.Part.Kind). Header names
// are lowercased, since "X-User-Id" and "x-user-id" name one header; query
// and cookie names are case-sensitive and kept.
func (p KeyPart) Kind() string {
	if p.Source == SourceHeader {
		return string(p.Source) + ":" + strings.ToLower(p.Name)
	}
	return p.String()
}

// UnmarshalText reads "ip", "header:X-User-Id", "query:page",
// "cookie:session" or "jwt:sub". A claim's name runs to the end, colons
// included ("jwt:https://example.com/tier").
func (p *KeyPart) UnmarshalText(text []byte) error {
	s := string(text)
	src, name, hasName := strings.Cut(s, ":")
	known := false
	for _, k := range sources {
		if Source(src) == k {
			known = true
		}
	}
	if !known {
		return fmt.Errorf("unknown key source %q (global, route, path, method, host, ip, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, tls:subject)", s)
	}
	source := Source(src)
	switch {
	case !source.named() && hasName:
		return fmt.Errorf("key source %q: %s takes no name", s, src)
	case source == SourceTLS && name != "subject":
		return fmt.Errorf("key source %q: write tls:subject, the verified client certificate's subject", s)
	case source == SourceJWT && name == "":
		return fmt.Errorf("key source %q: write jwt:CLAIM, such as jwt:sub", s)
	case source.named() && name == "":
		return fmt.Errorf("key source %q: write %s:NAME", s, src)
	case source == SourceJWT && !validClaimName(name):
		return fmt.Errorf("key source %q: %q is not a claim name (printable, no spaces, at most %d bytes)", s, name, maxClaimName)
	case source == SourceQuery && !validQueryName(name):
		return fmt.Errorf("key source %q: %q is not a query parameter name", s, name)
	case (source == SourceHeader || source == SourceCookie) && !isToken(name):
		// Header field names (RFC 9110 §5.1) and cookie names (RFC 6265
		// §4.1.1) are tokens; anything else could never be present.
		return fmt.Errorf("key source %q: %q is not a valid %s name", s, name, src)
	}
	*p = KeyPart{Source: source, Name: name}
	return nil
}

// MarshalText writes the part as UnmarshalText reads it.
func (p KeyPart) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// isToken reports whether s is an RFC 9110 token: the characters of
// header names and method names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validQueryName accepts printable ASCII that can stand before "=" in a
// query string: "user[id]" is fine, "a b" and "a&b" are not.
func validQueryName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '&' || c == '=' || c == '#' || c == ';' {
			return false
		}
	}
	return true
}

// UnmarshalText reads "auto" or a fraction in (0, 1].
func (s *LocalShare) UnmarshalText(text []byte) error {
	t := string(text)
	if t == "auto" {
		*s = 0
		return nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return fmt.Errorf("want auto or a fraction in (0,1], got %q", t)
	}
	if !(f > 0 && f <= 1) {
		return fmt.Errorf("%v is outside (0,1] (auto: 1 / the number of live instances)", t)
	}
	*s = LocalShare(f)
	return nil
}

// MarshalText writes "auto" for zero.
func (s LocalShare) MarshalText() ([]byte, error) {
	if s == 0 {
		return []byte("auto"), nil
	}
	return []byte(strconv.FormatFloat(float64(s), 'g', -1, 64)), nil
}

// Auto reports whether the share is "auto".
func (s LocalShare) Auto() bool { return s == 0 }

// Tracing is the export of request traces over OTLP (docs/configuration.md,
// tracing).
type Tracing struct {
	// OTLP is where spans go: grpc://HOST:PORT for OTLP over gRPC
	// (plaintext), http://HOST:PORT/PATH or https://HOST:PORT/PATH for
	// OTLP over HTTP with protobuf bodies (PATH empty: /v1/traces).
	// Empty: no tracing, and requests pay nothing for it (the default).
	OTLP string `yaml:"otlp"`

	// Sample is the fraction of root requests (those without a sampled
	// traceparent) that are traced, in [0, 1]. A request whose
	// traceparent says sampled is traced whatever it is. Default 0.01.
	Sample float64 `yaml:"sample"`
}
