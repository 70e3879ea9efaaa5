package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
)

func mustParse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("reload.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestReloadKeepsCounters: a change of rate keeps the counters, a change of
// window starts fresh ones.
func TestReloadKeepsCounters(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	tmpl := `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["` + up.URL + `"]}
    limits: [{name: user, key: ["header:X-User-Id"], rate: %s}]
`
	h := newHarness(t, fmt.Sprintf(tmpl, "2/1h"), nil)
	hdr := map[string]string{"X-User-Id": "u"}
	for range 2 {
		drain(h.do("GET", "/api", hdr, nil))
	}
	answerOf(t, h.do("GET", "/api", hdr, nil), 429, "rate_limited")
	if err := h.gw.Reload(mustParse(t, fmt.Sprintf(tmpl, "3/1h"))); err != nil {
		t.Fatal(err)
	}
	if resp := h.do("GET", "/api", hdr, nil); drain(resp) == "" || resp.StatusCode != 200 {
		t.Fatalf("3rd request after raising the rate to 3: %d", resp.StatusCode)
	}
	answerOf(t, h.do("GET", "/api", hdr, nil), 429, "rate_limited")
	if err := h.gw.Reload(mustParse(t, fmt.Sprintf(tmpl, "3/2h"))); err != nil {
		t.Fatal(err)
	}
	if resp := h.do("GET", "/api", hdr, nil); drain(resp) == "" || resp.StatusCode != 200 {
		t.Fatalf("a new window length starts a fresh counter: %d", resp.StatusCode)
	}
}

// TestReloadUnderLoad swaps the configuration 20 times while clients
// run: no request fails, and every response comes whole from one
// configuration (the upstream path and the limit name agree).
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	version := func(v int) string {
		return fmt.Sprintf(`
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["%s/v%d"]}
    limits: [{name: v%d, key: [ip], rate: 1000000/s}]
`, up.URL, v, v)
	}
	h := newHarness(t, version(0), nil)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served, failed atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp := h.do("GET", "/api/x", nil, nil)
				body := drain(resp)
				policy := resp.Header.Get("RateLimit-Policy")
				v := strings.TrimPrefix(strings.SplitN(body, "/", 3)[1], "")
				if resp.StatusCode != 200 || !strings.HasPrefix(policy, `"`+v+`"`) {
					failed.Add(1)
					t.Errorf("status %d body %q policy %q: a response mixed two configurations", resp.StatusCode, body, policy)
					return
				}
				served.Add(1)
			}
		})
	}
	for v := 1; v <= 20; v++ {
		if err := h.gw.Reload(mustParse(t, version(v))); err != nil {
			t.Fatal(err)
		}
		for n := served.Load(); served.Load() < n+5 && failed.Load() == 0; {
			time.Sleep(time.Millisecond) // let some requests run on version v
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() > 0 || served.Load() < 100 {
		t.Fatalf("served %d, failed %d", served.Load(), failed.Load())
	}
	if n := counterValue(t, h, "gateway_config_reloads_total", map[string]string{"result": "ok"}); n != 20 {
		t.Fatalf("reloads counted %v, want 20", n)
	}
}

// A reload that changes an upstream's client settings leaves the client
// of the settings before to close, rather than keep every client a reload
// ever made; one that keeps them keeps the client and its connections.
func TestReloadDropsUnusedClients(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	yaml := func(timeout string) string {
		return `
admin: {listen: ""}
routes:
  - id: a
    match: {path: /a/**}
    upstream: {targets: ["` + up.URL + `"], timeout: ` + timeout + `}
  - id: b
    match: {path: /b/**}
    upstream: {targets: ["` + up.URL + `"], protocol: h2c, timeout: ` + timeout + `}
`
	}
	h := newHarness(t, yaml("1s"), up)
	clients := h.gw.pools.clients.Len
	if n := clients(); n != 2 {
		t.Fatalf("%d clients for two routes of different protocols", n)
	}
	first := h.gw.gen.Load().routes[0].upstream.Client()
	if err := h.gw.Reload(mustParse(t, yaml("1s"))); err != nil {
		t.Fatal(err)
	}
	if h.gw.gen.Load().routes[0].upstream.Client() != first {
		t.Error("a reload that keeps the settings made a new client")
	}
	for _, timeout := range []string{"2s", "3s", "4s"} {
		if err := h.gw.Reload(mustParse(t, yaml(timeout))); err != nil {
			t.Fatal(err)
		}
	}
	if n := clients(); n != 2 {
		t.Errorf("%d clients after three reloads that changed the timeouts, want the two in use", n)
	}
	if h.gw.gen.Load().routes[0].upstream.Client() == first {
		t.Error("a changed timeout kept the client of the timeout before")
	}
}
