package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// TestClusterMasterFails: when one master of a Redis Cluster dies or
// stalls, only the requests whose keys it serves are decided by on_error
// (here in the instance's memory); those whose keys the other masters
// serve are still decided by Redis, exactly, and count no store error.
func TestClusterMasterFails(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(*testredis.Server)
	}{
		{"killed", (*testredis.Server).Kill},
		{"paused", (*testredis.Server).Pause},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // most of a cluster's start is waiting
			clusterMasterFails(t, tc.fail)
		})
	}
}

func clusterMasterFails(t *testing.T, fail func(*testredis.Server)) {
	cl := testredis.StartCluster(t, 3, testredis.Replicas(1))
	h := newHarness(t, `
admin: {listen: ""}
store:
  type: redis
  redis: {mode: cluster, addrs: ["`+strings.Join(cl.Addrs(), `", "`)+`"], timeout: 1s}
  on_error: local
  local_share: 1
  local_rejects: false
routes:
  - id: sale
    match: {path: /sale}
    upstream: {targets: ["{{UP}}"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 5/1h}
`, newBackend(t, nil))
	get := func(user string) int {
		t.Helper()
		resp := h.do("GET", "/sale", map[string]string{"X-User-Id": user}, nil)
		drain(resp)
		return resp.StatusCode
	}
	masters := cl.Nodes()[:3]
	// users[i] is a user whose counter master i holds, after one request.
	var users [3]string
	for i, found := 0, 0; found < 3; i++ {
		if i > 1000 {
			t.Fatal("no user found for every master")
		}
		u := "u" + strconv.Itoa(i)
		if code := get(u); code != http.StatusOK {
			t.Fatalf("first request of %s: %d", u, code)
		}
		for m, srv := range masters {
			keys, err := srv.DoValue(t, "KEYS", "fg:*="+u+"}*")
			if err != nil {
				t.Fatal(err)
			}
			if len(keys.([]any)) > 0 && users[m] == "" {
				users[m] = u
				found++
			}
		}
	}
	errorsNow := func() float64 {
		return counterValue(t, h, "gateway_ratelimit_store_errors_total", nil)
	}
	if n := errorsNow(); n != 0 {
		t.Fatalf("%v store errors before the failure", n)
	}
	decisions := func(result string) float64 {
		return counterValue(t, h, "gateway_ratelimit_decisions_total", map[string]string{"route": "sale", "limit": "user", "result": result})
	}
	allowed := decisions("allowed")

	fail(masters[2])
	// The failed master's user: decided in memory, each request a store
	// error; five admitted there (local_share 1), then rejected.
	for i, want := range []int{200, 200, 200, 200, 200, 429, 429} {
		if code := get(users[2]); code != want {
			t.Fatalf("request %d of the failed master's user: %d, want %d", i, code, want)
		}
	}
	if n := errorsNow(); n != 7 {
		t.Fatalf("%v store errors for 7 requests on the failed master, want 7", n)
	}
	// The other masters' users: decided by Redis, which admitted one of
	// each already; four more, then rejections, and no store error.
	for m := range 2 {
		for i, want := range []int{200, 200, 200, 200, 429, 429} {
			if code := get(users[m]); code != want {
				t.Fatalf("request %d of master %d's user: %d, want %d", i, m, code, want)
			}
		}
	}
	if n := errorsNow(); n != 7 {
		t.Fatalf("%v store errors after the healthy masters' requests, want still 7", n)
	}
	if a, r, e := decisions("allowed")-allowed, decisions("rejected"), decisions("error"); a != 2*4 || r != 2*2 || e != 7 {
		t.Errorf("decisions during the failure: allowed %v, rejected %v, error %v; want 8, 4 and 7", a, r, e)
	}
}
