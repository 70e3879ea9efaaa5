package rls

import (
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// The rule files of envoyproxy/ratelimit's README ("Examples"), written out
// in testdata/envoy-readme, each loaded and asked what the README says of
// it, over real gRPC.

// readmeRules parses testdata/envoy-readme/NAME.yaml.
func readmeRules(t *testing.T, name string) *Rules {
	t.Helper()
	path := filepath.Join("testdata", "envoy-readme", name+".yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// readmeClient serves rules on store with the clock stopped, so that a
// per-second limit counts every request of the test in one window on the
// memory store. The Redis store decides on Redis TIME: only limits of a
// minute or more are counted on it. observe, when set, gets each Outcome.
func readmeClient(t *testing.T, store limit.Store, rules *Rules, observe func(*Outcome)) rlsv3.RateLimitServiceClient {
	t.Helper()
	now := readmeNow()
	return serveImpl(t, New(Options{
		Store:   func() limit.Store { return store },
		Rules:   rules,
		Now:     func() time.Time { return now },
		Observe: observe,
	}))
}

// readmeNow is the stopped clock of the readme tests.
func readmeNow() time.Time { return time.Unix(1_700_000_000, 0) }

// readmeMemory is a memory store whose sweep runs on the stopped clock too.
func readmeMemory() limit.Store { return memory.New(memory.Options{Now: readmeNow}) }

// readmeStores runs f on readmeMemory and on Redis.
func readmeStores(t *testing.T, f func(t *testing.T, s limit.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, readmeMemory()) })
	t.Run("redis", func(t *testing.T) { f(t, redisStore(t)) })
}

const (
	rOK   = rlsv3.RateLimitResponse_OK
	rOver = rlsv3.RateLimitResponse_OVER_LIMIT
)

// expect fails t unless resp's overall code is overall and each status has
// the code and the requests_per_unit given, 0 for no limit reported.
func expect(t *testing.T, resp *rlsv3.RateLimitResponse, overall rlsv3.RateLimitResponse_Code, codes []rlsv3.RateLimitResponse_Code, perUnit []uint32) {
	t.Helper()
	if resp.OverallCode != overall {
		t.Fatalf("overall %v, want %v: %v", resp.OverallCode, overall, resp)
	}
	for i, st := range resp.Statuses {
		if st.Code != codes[i] || st.CurrentLimit.GetRequestsPerUnit() != perUnit[i] {
			t.Fatalf("status %d: %v, want %v with a limit of %d", i, st, codes[i], perUnit[i])
		}
	}
}

// askN asks n times and fails t unless every answer is want.
func askN(t *testing.T, c rlsv3.RateLimitServiceClient, n int, want rlsv3.RateLimitResponse_Code, domain string, kv ...string) {
	t.Helper()
	for i := range n {
		if resp := ask(t, c, domain, desc(kv...)); resp.OverallCode != want {
			t.Fatalf("%v, request %d of %d: %v, want %v", kv, i+1, n, resp, want)
		}
	}
}

func TestReadmeFilesLoad(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir(filepath.Join("testdata", "envoy-readme"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 14 {
		t.Fatalf("%d files, want the README's 14 rule files", len(entries))
	}
	for _, e := range entries {
		readmeRules(t, e.Name()[:len(e.Name())-len(".yaml")])
	}
}

// Example 1: two exact values of one key, 500 a second each; another value
// has no limit.
func TestReadmeExample1(t *testing.T) {
	t.Parallel()
	c := readmeClient(t, readmeMemory(), readmeRules(t, "example1"), nil)
	askN(t, c, 500, rOK, "mongo_cps", "database", "users")
	askN(t, c, 1, rOver, "mongo_cps", "database", "users")
	askN(t, c, 500, rOK, "mongo_cps", "database", "default")
	askN(t, c, 1, rOver, "mongo_cps", "database", "default")
	expect(t, ask(t, c, "mongo_cps", desc("database", "other")), rOK, []rlsv3.RateLimitResponse_Code{rOK}, []uint32{0})
}

// Example 2: 5 marketing messages a day to a number, 100 messages a day to
// a number, and both descriptors in one request: OVER_LIMIT when either is.
func TestReadmeExample2(t *testing.T) {
	t.Parallel()
	readmeStores(t, func(t *testing.T, s limit.Store) {
		c := readmeClient(t, s, readmeRules(t, "example2"), nil)
		marketing := func(n string) []string { return []string{"message_type", "marketing", "to_number", n} }
		askN(t, c, 5, rOK, "messaging", marketing("2061111111")...)
		askN(t, c, 1, rOver, "messaging", marketing("2061111111")...)
		// Every number has its own 5.
		askN(t, c, 5, rOK, "messaging", marketing("2062222222")...)

		// Both descriptors: the marketing limit of 2063333333 rejects
		// the sixth request.
		for i := range 6 {
			resp := ask(t, c, "messaging", desc(marketing("2063333333")...), desc("to_number", "2063333333"))
			if i < 5 {
				expect(t, resp, rOK, []rlsv3.RateLimitResponse_Code{rOK, rOK}, []uint32{5, 100})
				continue
			}
			expect(t, resp, rOver, []rlsv3.RateLimitResponse_Code{rOver, rOK}, []uint32{5, 100})
		}
		// envoyproxy/ratelimit would have counted the rejected request
		// against the 100 a day too, leaving 94. floodgate decides a
		// request all or nothing (docs/rls.md, "Differences in what the
		// rules do"): 95 are left, 94 after this one.
		resp := ask(t, c, "messaging", desc("to_number", "2063333333"))
		if st := resp.Statuses[0]; st.Code != rOK || st.LimitRemaining != 94 {
			t.Fatalf("to_number after a rejected request: %v, want OK with 94 left", st)
		}
		// The 100 a day of a number.
		askN(t, c, 100, rOK, "messaging", "to_number", "2064444444")
		askN(t, c, 1, rOver, "messaging", "to_number", "2064444444")
	})
}

// Example 3: 10 a second per address, and an address blocked by a limit
// of 0.
func TestReadmeExample3(t *testing.T) {
	t.Parallel()
	c := readmeClient(t, readmeMemory(), readmeRules(t, "example3"), nil)
	askN(t, c, 10, rOK, "edge_proxy_per_ip", "remote_address", "50.0.0.1")
	askN(t, c, 1, rOver, "edge_proxy_per_ip", "remote_address", "50.0.0.1")
	askN(t, c, 10, rOK, "edge_proxy_per_ip", "remote_address", "50.0.0.2")
	expect(t, ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), rOver, []rlsv3.RateLimitResponse_Code{rOver}, []uint32{0})
	// A limit of 0 counts nothing, so Redis gives the same answer.
	cr := readmeClient(t, redisStore(t), readmeRules(t, "example3"), nil)
	askN(t, cr, 3, rOver, "edge_proxy_per_ip", "remote_address", "50.0.0.5")
}

// Example 4: a descriptor of two entries does not match a rule one level
// deep, and matches the rule nested two levels deep.
func TestReadmeExample4(t *testing.T) {
	t.Parallel()
	d := desc("key", "value", "subkey", "subvalue")
	c := readmeClient(t, readmeMemory(), readmeRules(t, "example4-no-match"), nil)
	expect(t, ask(t, c, "example4", d), rOK, []rlsv3.RateLimitResponse_Code{rOK}, []uint32{0})
	c = readmeClient(t, readmeMemory(), readmeRules(t, "example4-match"), nil)
	for range 300 {
		expect(t, ask(t, c, "example4", d), rOK, []rlsv3.RateLimitResponse_Code{rOK}, []uint32{300})
	}
	expect(t, ask(t, c, "example4", d), rOver, []rlsv3.RateLimitResponse_Code{rOver}, []uint32{300})
}

// Example 5: an unlimited descriptor is OK with math.MaxUint32 left; the
// other is 100 a minute.
func TestReadmeExample5(t *testing.T) {
	t.Parallel()
	readmeStores(t, func(t *testing.T, s limit.Store) {
		c := readmeClient(t, s, readmeRules(t, "example5"), nil)
		for range 200 {
			resp := ask(t, c, "internal", desc("ldap", "x"))
			if resp.OverallCode != rOK || resp.Statuses[0].LimitRemaining != math.MaxUint32 {
				t.Fatalf("ldap: %v", resp)
			}
		}
		askN(t, c, 100, rOK, "internal", "azure", "x")
		askN(t, c, 1, rOver, "internal", "azure", "x")
	})
}

// Example 6: user-a's limit is in shadow mode and never rejects; user-b is
// limited to 20 a second.
func TestReadmeExample6(t *testing.T) {
	t.Parallel()
	c := readmeClient(t, readmeMemory(), readmeRules(t, "example6"), nil)
	for i := range 30 {
		resp := ask(t, c, "example6", desc("service", "auth-service", "user", "user-a"))
		// Past the 10 as within them, the status and the answer are OK,
		// as in envoyproxy/ratelimit; the hits over are counted as
		// shadow_mode.
		if resp.OverallCode != rOK || resp.Statuses[0].Code != rOK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("user-a, request %d: %v", i+1, resp)
		}
	}
	askN(t, c, 20, rOK, "example6", "service", "auth-service", "user", "user-b")
	askN(t, c, 1, rOver, "example6", "service", "auth-service", "user", "user-b")
}

// Example 7: with both descriptors, the 10 a second replaces the 5, whose
// counter is left as it was.
func TestReadmeExample7(t *testing.T) {
	t.Parallel()
	c := readmeClient(t, readmeMemory(), readmeRules(t, "example7"), nil)
	one, two := desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")
	for range 10 {
		if resp := ask(t, c, "example7", one, two); resp.OverallCode != rOK || resp.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("both: %v", resp)
		}
	}
	if resp := ask(t, c, "example7", one, two); resp.OverallCode != rOver || resp.Statuses[1].Code != rOver {
		t.Fatalf("both, the 11th: %v", resp)
	}
	// The replaced 5 a second was not touched.
	askN(t, c, 5, rOK, "example7", "key_1", "value_1", "user", "bkthomps")
	askN(t, c, 1, rOver, "example7", "key_1", "value_1", "user", "bkthomps")
}

// readmeLabels serves rules and returns a function that asks for one
// descriptor and gives the statistics label floodgate names it by:
// envoyproxy/ratelimit's stat key without the domain.
func readmeLabels(t *testing.T, name string) func(domain string, kv ...string) string {
	m := newDescriptorMetrics()
	var mu sync.Mutex
	var last string
	c := readmeClient(t, readmeMemory(), readmeRules(t, name), func(o *Outcome) {
		mu.Lock()
		last = m.label(o)
		mu.Unlock()
	})
	return func(domain string, kv ...string) string {
		t.Helper()
		mu.Lock()
		last = ""
		mu.Unlock()
		ask(t, c, domain, desc(kv...))
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// Example 8: detailed_metric names the statistics by the request's value;
// the exact value keeps its own limit.
func TestReadmeExample8(t *testing.T) {
	t.Parallel()
	c := readmeClient(t, readmeMemory(), readmeRules(t, "example8"), nil)
	askN(t, c, 10, rOK, "example8", "key1", "unspecified_value")
	askN(t, c, 1, rOver, "example8", "key1", "unspecified_value")
	askN(t, c, 10, rOK, "example8", "key1", "unspecified_value2")
	askN(t, c, 20, rOK, "example8", "key1", "value1")
	askN(t, c, 1, rOver, "example8", "key1", "value1")

	label := readmeLabels(t, "example8")
	for v, want := range map[string]string{"unspecified_value": "key1_unspecified_value", "unspecified_value2": "key1_unspecified_value2", "value1": "key1_value1"} {
		if got := label("example8", "key1", v); got != want {
			t.Errorf("key1=%s: label %q, want %q", v, got, want)
		}
	}
}

// Example 9: value* matches value_1 and value_2, each with its own 20.
func TestReadmeExample9(t *testing.T) {
	t.Parallel()
	readmeStores(t, func(t *testing.T, s limit.Store) {
		c := readmeClient(t, s, readmeRules(t, "example9"), nil)
		for _, v := range []string{"value_1", "value_2"} {
			askN(t, c, 20, rOK, "example9", "key1", v)
			askN(t, c, 1, rOver, "example9", "key1", v)
		}
		expect(t, ask(t, c, "example9", desc("key1", "other")), rOK, []rlsv3.RateLimitResponse_Code{rOK}, []uint32{0})
	})
}

// Example 10: value_to_metric names the statistics by the request's values,
// the full value where a wildcard matched.
func TestReadmeExample10(t *testing.T) {
	t.Parallel()
	label := readmeLabels(t, "example10")
	for _, tc := range [][]string{
		{"route_api.http_method_GET.subject_id", "route", "api", "http_method", "GET", "subject_id", "123"},
		{"route_web.http_method_POST.subject_id", "route", "web", "http_method", "POST", "subject_id", "456"},
	} {
		if got := label("example10", tc[1:]...); got != tc[0] {
			t.Errorf("%v: label %q, want %q", tc[1:], got, tc[0])
		}
	}
	label = readmeLabels(t, "example10-wildcard")
	if got, want := label("example10_wildcard", "user", "alice", "action", "readfile", "resource", "documents"), "user_alice.action_readfile.resource"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
}

// Example 11: the values of files/* share 10 an hour; those of
// files_no_share/* have 10 each.
func TestReadmeExample11(t *testing.T) {
	t.Parallel()
	readmeStores(t, func(t *testing.T, s limit.Store) {
		c := readmeClient(t, s, readmeRules(t, "example11"), nil)
		askN(t, c, 5, rOK, "example11", "files", "files/a.pdf")
		askN(t, c, 5, rOK, "example11", "files", "files/b.csv")
		askN(t, c, 1, rOver, "example11", "files", "files/c.txt")
		askN(t, c, 10, rOK, "example11", "files_no_share", "files_no_share/a.pdf")
		askN(t, c, 1, rOver, "example11", "files_no_share", "files_no_share/a.pdf")
		askN(t, c, 10, rOK, "example11", "files_no_share", "files_no_share/b.csv")
	})
}

// Example 11, with value_to_metric: the routes under api/* share 60 a minute
// per method, and the statistics name the shared pattern, not the request's
// route. The README writes the label route_api.method_GET; the stat key
// envoyproxy/ratelimit builds (its config tests check it) keeps the
// pattern whole and names no method, which has no value_to_metric:
// route_api/*.method. floodgate names it as the code does.
func TestReadmeExample11Metrics(t *testing.T) {
	t.Parallel()
	c := readmeClient(t, readmeMemory(), readmeRules(t, "example11-metrics"), nil)
	askN(t, c, 30, rOK, "example11_metrics", "route", "api/v1", "method", "GET")
	askN(t, c, 30, rOK, "example11_metrics", "route", "api/v2", "method", "GET")
	askN(t, c, 1, rOver, "example11_metrics", "route", "api/v3", "method", "GET")
	askN(t, c, 60, rOK, "example11_metrics", "route", "api/v1", "method", "POST")

	label := readmeLabels(t, "example11-metrics")
	if got, want := label("example11_metrics", "route", "api/v1", "method", "GET"), "route_api/*.method"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
}
