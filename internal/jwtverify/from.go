package jwtverify

import (
	"fmt"
	"net/http"
	"strings"
)

// From is where a request carries its bearer token: a header, or a
// cookie.
type From struct {
	Header         string // canonical; "" when the token is in a cookie
	Cookie         string
	BearerRequired bool // a scheme other than Bearer carries no token (Authorization)
}

// Read finds the request's token: "" when it carries none, and
// ErrAmbiguous when it carries the header or the cookie more
// than once. The gateway forwards them all, and which one an upstream
// reads (the first, the last, the one it parses) is its own choice: were
// the gateway to count the first, the upstream might act for another user
// than the one counted.
func (f From) Read(r *http.Request) (string, error) {
	if f.Header != "" {
		vv := r.Header[f.Header]
		switch {
		case len(vv) == 0:
			return "", nil
		case len(vv) > 1:
			return "", fmt.Errorf("%d %s headers: %w", len(vv), f.Header, ErrAmbiguous)
		}
		v := strings.TrimSpace(vv[0])
		// The scheme is case-insensitive (RFC 9110 §11.1), and one space
		// or more may follow it (RFC 6750 §2.1 writes one).
		if scheme, rest, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(rest), nil
		}
		if f.BearerRequired {
			return "", nil // Basic credentials, say: not a token
		}
		return v, nil
	}
	// Counted in the header's text, not among the cookies net/http
	// parses: a value it refuses may be one that an upstream accepts.
	if n := cookiesNamed(r.Header["Cookie"], f.Cookie); n > 1 {
		return "", fmt.Errorf("%d cookies %s: %w", n, f.Cookie, ErrAmbiguous)
	}
	if c, err := r.Cookie(f.Cookie); err == nil {
		return c.Value, nil
	}
	return "", nil
}

// cookiesNamed counts the cookies named name in Cookie header lines
// (RFC 6265 §5.4; HTTP/2 sends one line per cookie, RFC 9113 §8.2.3).
func cookiesNamed(lines []string, name string) int {
	n := 0
	for _, line := range lines {
		for pair := range strings.SplitSeq(line, ";") {
			if k, _, _ := strings.Cut(pair, "="); strings.TrimSpace(k) == name {
				n++
			}
		}
	}
	return n
}
