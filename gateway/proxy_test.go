package gateway

import "testing"

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
