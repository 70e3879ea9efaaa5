package gateway

import (
	"net/http"
	"sync"
	"testing"
)

// White space around a field value is no part of it on any protocol:
// "k1 " and " k1" are the key "k1", with one quota between them, and the
// upstream gets the value without it. HTTP/1.1's parser drops it; on
// HTTP/2 a value arrives as the client framed it.
func TestFieldValueSpaceIsNoPartOfTheKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("X-Api-Key"))
		mu.Unlock()
	})
	const cfg = `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: key, key: ["header:X-Api-Key"], rate: 2/h}]
`
	eachProtocol(t, cfg, up, func(t *testing.T, o *overProtocol) {
		mu.Lock()
		got = nil
		mu.Unlock()
		for i, v := range []string{"k1", "k1 ", " k1", "k1\t", "\tk1 "} {
			resp := o.do("GET", "/api/x", map[string]string{"X-Api-Key": v}, nil)
			drain(resp)
			want := http.StatusOK
			if i >= 2 {
				want = http.StatusTooManyRequests
			}
			if resp.StatusCode != want {
				t.Errorf("X-Api-Key %q: %d, want %d: the same key as k1", v, resp.StatusCode, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, v := range got {
			if v != "k1" {
				t.Errorf("the upstream got X-Api-Key %q, want k1", v)
			}
		}
	})
}
