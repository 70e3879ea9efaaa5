package gateway

import (
	"net/url"
	"testing"
)

func TestUpstreamPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ target, strip, path, decoded, escaped string }{
		{"http://u", "", "/api/x", "/api/x", "/api/x"},
		{"http://u/base", "", "/api/x", "/base/api/x", "/base/api/x"},
		{"http://u/base/", "", "/", "/base", "/base"},
		{"http://u", "/svc", "/svc/a", "/a", "/a"},
		{"http://u", "/svc/", "/svc", "/", "/"},
		{"http://u", "/svc", "/svcx/a", "/svcx/a", "/svcx/a"}, // not at a segment boundary
		{"http://u", "/", "/a", "/a", "/a"},
		{"http://u/b", "/svc", "/svc/a%20b", "/b/a b", "/b/a%20b"},
	} {
		target, _ := url.Parse(tc.target)
		d, e := UpstreamPath(target, tc.strip, tc.path)
		if d != tc.decoded || e != tc.escaped {
			t.Errorf("UpstreamPath(%s, %q, %q) = %q, %q; want %q, %q", tc.target, tc.strip, tc.path, d, e, tc.decoded, tc.escaped)
		}
	}
}

// A client's Connection field cannot strip the fields the gateway sets on
// the request: the upstream still learns the client's address, scheme and
// host, and the request id; a field of the client's own it names goes.
func TestConnectionCannotStripTheGatewaysFields(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, basic, up)
	drain(h.do("GET", "/api/x", map[string]string{
		"Connection": "X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto, X-Request-Id, X-Mine",
		"X-Mine":     "1",
	}, nil))
	got := up.lastRequest().Header
	for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Request-Id"} {
		if got.Get(k) == "" {
			t.Errorf("the upstream got no %s: %v", k, got)
		}
	}
	if got.Get("X-Mine") != "" || got.Get("Connection") != "" {
		t.Errorf("the upstream got the client's hop-by-hop fields: %v", got)
	}
}
