package main

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// fleetConfig is a gateway on a shared Redis: a global limit leased to
// each instance in slices, and a per-user limit decided in Redis and
// answered from memory once used up.
const fleetConfig = `
server: {listen: "{{LISTEN}}"}
admin: {listen: "{{ADMIN}}", token: {{TOKEN}}}
store: {type: redis, redis: {addrs: ["{{REDIS}}"], timeout: 1s}}
global_limits:
  - {name: global, key: [global], rate: 150/1h, sync: lease}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - {name: user, key: [header:X-User-Id], rate: 1/1h}
`

// fleet starts n floodgate serve processes on one Redis, and waits until
// each listens for the keys the others forget.
func fleet(t *testing.T, n int) []*proc {
	srv := testredis.Start(t)
	var ps []*proc
	for range n {
		f := newFixture(t, nil)
		f.write(strings.ReplaceAll(fleetConfig, "{{REDIS}}", srv.Addr()))
		ps = append(ps, f.serve())
	}
	ps[0].waitFor("every instance to listen", func() bool {
		v, err := srv.DoValue(t, "PUBSUB", "NUMSUB", "fg:forget")
		return err == nil && v.([]any)[1].(int64) == int64(n)
	})
	return ps
}

// Three gateway processes share a leased global limit under demand four
// times above it: never more than the limit is admitted, and no more than
// the slices held at the end is left unused.
func TestFleetLeasesAGlobalLimit(t *testing.T) {
	t.Parallel()
	ps := fleet(t, 3)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for g := range 24 {
		p := ps[g%3]
		wg.Go(func() {
			for i := range 25 {
				r := request(t, "GET", "http://"+p.f.listen+"/api/sale", "X-User-Id", strconv.Itoa(g*25+i))
				mu.Lock()
				codes[r.code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	admitted := codes[http.StatusOK]
	// Each instance holds at most a slice of 2% of what it used, rounded
	// up, when the window has nothing left.
	if admitted > 150 || admitted < 150-3-3 || codes[http.StatusTooManyRequests] != 600-admitted {
		t.Fatalf("answers %v: want 144 to 150 admitted of a global 150, the rest 429", codes)
	}
}

// A user over the limit is answered from memory by every instance; a
// reset on one of them lets the user in again on the others too.
func TestFleetResetReachesEveryInstance(t *testing.T) {
	t.Parallel()
	ps := fleet(t, 2)
	a, b := ps[0], ps[1]
	get := func(p *proc) int {
		return request(t, "GET", "http://"+p.f.listen+"/api/x", "X-User-Id", "alice").code
	}
	if c := get(a); c != http.StatusOK {
		t.Fatalf("first request: %d", c)
	}
	for range 3 {
		if c := get(b); c != http.StatusTooManyRequests {
			t.Fatalf("over the limit on b: %d", c)
		}
	}
	if r := a.admin("DELETE", "/admin/limits?route=api&limit=user&key=alice"); r.code != http.StatusOK {
		t.Fatalf("reset: %d %s", r.code, r.body)
	}
	deadline := time.Now().Add(2 * time.Second)
	for get(b) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("b still rejects alice 2 s after a's reset")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
