package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// A key the store said is exhausted is answered from the instance's
// memory with the store's own answer, counted as a local answer, and a
// reset or a raised rate takes effect on the next request.
func TestLocalRejects(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	tmpl := `
admin: {listen: ""}
store: {type: redis, redis: {addrs: ["` + srv.Addr() + `"], timeout: 2s}}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["` + up.URL + `"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: %s, reject: {code: repeat_apply, message: "once an hour"}}
`
	h := newHarness(t, fmt.Sprintf(tmpl, "1/1h"), nil)
	hdr := map[string]string{"X-User-Id": "u1"}
	local := func() float64 {
		return counterValue(t, h, "gateway_ratelimit_local_answers_total", map[string]string{"route": "api", "limit": "user"})
	}
	if resp := h.do("GET", "/api", hdr, nil); drain(resp) == "" || resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	// The first rejection comes from Redis; the admission that left 0
	// was enough to know, so it is already local.
	type answer struct {
		status  int
		headers http.Header
		body    string
	}
	get := func() answer {
		resp := h.do("GET", "/api", hdr, nil)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	a := get()
	if local() != 1 {
		t.Fatalf("local answers %v after the second request, want 1", local())
	}
	// The same key's rejection by Redis, from an instance that asks it
	// every time, reads the same but for the request id and the times.
	off := newHarness(t, strings.Replace(fmt.Sprintf(tmpl, "1/1h"), "store: {", "store: {local_rejects: false, ", 1), nil)
	resp := off.do("GET", "/api", hdr, nil)
	offBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != a.status {
		t.Errorf("status %d from memory, %d from Redis", a.status, resp.StatusCode)
	}
	if got, want := headerNames(a.headers), headerNames(resp.Header); got != want {
		t.Errorf("headers from memory %s, from Redis %s", got, want)
	}
	for _, name := range []string{"Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "Content-Type", "Cache-Control"} {
		if a.headers.Get(name) != resp.Header.Get(name) {
			t.Errorf("%s %q from memory, %q from Redis", name, a.headers.Get(name), resp.Header.Get(name))
		}
	}
	strip := func(b string, id string) string { return strings.Replace(b, id, "ID", 1) }
	if got, want := strip(a.body, a.headers.Get("X-Request-Id")), strip(string(offBody), resp.Header.Get("X-Request-Id")); got != want {
		t.Errorf("body from memory %s, from Redis %s", got, want)
	}
	if a.status != 429 || !strings.Contains(a.body, `"code":"repeat_apply"`) || !strings.Contains(a.body, `"message":"once an hour"`) {
		t.Fatalf("local rejection: %d %s", a.status, a.body)
	}
	for _, name := range []string{"Retry-After", "Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Request-Id", "Content-Type"} {
		if a.headers.Get(name) == "" {
			t.Errorf("local rejection without %s: %v", name, a.headers)
		}
	}
	if got := a.headers.Get("X-Ratelimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining %q, want 0", got)
	}
	rejected := counterValue(t, h, "gateway_ratelimit_decisions_total", map[string]string{"route": "api", "limit": "user", "result": "rejected"})
	if rejected != 1 {
		t.Errorf("rejected decisions %v, want 1 (a local answer is a rejection too)", rejected)
	}

	if err := h.gw.ResetLimit(context.Background(), "api", "user", []string{"u1"}, false); err != nil {
		t.Fatal(err)
	}
	if a := get(); a.status != 200 {
		t.Fatalf("after a reset: %d %s", a.status, a.body)
	}
	if a := get(); a.status != 429 || local() != 2 {
		t.Fatalf("after a reset, the second request: %d, local answers %v", a.status, local())
	}
	if err := h.gw.Reload(mustParse(t, fmt.Sprintf(tmpl, "2/1h"))); err != nil {
		t.Fatal(err)
	}
	if a := get(); a.status != 200 {
		t.Fatalf("after raising the rate to 2/h: %d %s", a.status, a.body)
	}
	if a := get(); a.status != 429 || local() != 3 {
		t.Fatalf("the third request at 2/h: %d, local answers %v", a.status, local())
	}
}

// headerNames lists h's names but Date, sorted, comma-joined.
func headerNames(h http.Header) string {
	var names []string
	for k := range h {
		if k != "Date" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// Three gateways on one Redis share a global limit by slices of its
// window (sync: lease) beside a per-user limit decided in Redis: under
// demand three times the limit, never more than the limit is admitted, at
// most what the slices held is left unused, and nothing rejected reaches
// the upstream.
func TestLeasedGlobalLimit(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newBackend(t, nil)
	cfg := `
admin: {listen: ""}
store: {type: redis, redis: {addrs: ["` + srv.Addr() + `"], timeout: 1s}}
global_limits:
  - {name: global, key: [global], rate: 200/1h, sync: lease}
routes:
  - id: sale
    match: {path: /sale}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 1/1h}
`
	var gws []*harness
	for range 3 {
		gws = append(gws, newHarness(t, cfg, up))
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for g := range 24 {
		h := gws[g%3]
		wg.Go(func() {
			for i := range 25 {
				// 600 users, each once; every tenth request repeats a
				// user, whom the user limit rejects.
				u := strconv.Itoa(g*25 + i)
				if i%10 == 9 {
					u = strconv.Itoa(g*25 + i - 1)
				}
				resp := h.do("GET", "/sale", map[string]string{"X-User-Id": u}, nil)
				drain(resp)
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	admitted := codes[http.StatusOK]
	if admitted > 200 || admitted < 200-3*2 || codes[http.StatusTooManyRequests] != 600-admitted {
		t.Fatalf("answers %v: want 194 to 200 admitted (three slices of at most 2 left unused), the rest 429", codes)
	}
	t.Logf("answers %v", codes)
	if int(up.hits.Load()) != admitted {
		t.Fatalf("upstream saw %d requests, %d admitted", up.hits.Load(), admitted)
	}
}
