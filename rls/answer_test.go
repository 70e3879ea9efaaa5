package rls

import (
	"context"
	"strconv"
	"sync"
	"testing"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// serveWith serves testRules on store with o's answer settings.
func serveWith(t *testing.T, store limit.Store, o Options) rlsv3.RateLimitServiceClient {
	t.Helper()
	rules, err := Parse("edge.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	o.Store, o.Rules = func() limit.Store { return store }, rules
	return serveImpl(t, New(o))
}

// With rls.shadow, a request over a limit is answered OK; its status
// still says OVER_LIMIT, and it is counted as one.
func TestServiceShadow(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		reg := prometheus.NewRegistry()
		c := serveWith(t, s, Options{Shadow: true, Registerer: reg})
		login := desc("path", "/login")
		for i := range 4 {
			resp := ask(t, c, "edge", login)
			st := resp.Statuses[0]
			if resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("request %d in shadow mode: %v", i, resp)
			}
			if want := i >= 2; (st.Code == rlsv3.RateLimitResponse_OVER_LIMIT) != want || st.LimitRemaining != uint32(max(1-i, 0)) {
				t.Fatalf("request %d of a limit of 2: status %v", i, st)
			}
		}
		if n := counter(t, reg, "gateway_rls_shadow_total", "domain", "edge"); n != 2 {
			t.Fatalf("gateway_rls_shadow_total %v, want 2", n)
		}
		if n := counter(t, reg, "gateway_rls_requests_total", "code", "OK"); n != 4 {
			t.Fatalf("%v requests answered OK, want 4", n)
		}
	})
}

// counter is the sum of name's series gathered from reg whose labels
// include label=value (any series when label is "").
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func headers(resp *rlsv3.RateLimitResponse) map[string]string {
	h := map[string]string{}
	for _, v := range resp.ResponseHeadersToAdd {
		h[v.GetKey()] = v.GetValue()
	}
	return h
}

// The headers report the limit with the least left, or the one over its
// limit, as envoyproxy/ratelimit picks it.
func TestResponseHeaders(t *testing.T) {
	t.Parallel()
	for _, kind := range []Headers{"", NoHeaders, EnvoyHeaders, IETFHeaders} {
		t.Run("headers="+string(kind), func(t *testing.T) {
			c := serveWith(t, memory.New(memory.Options{}), Options{Headers: kind})
			addr, login := desc("remote_address", "hd"), desc("path", "/login")
			resp := ask(t, c, "edge", addr, login, desc("path", "/health"))
			reset := strconv.FormatInt(resp.Statuses[1].DurationUntilReset.GetSeconds(), 10)
			h := headers(resp)
			want := map[Headers]map[string]string{
				"": {}, NoHeaders: {},
				EnvoyHeaders: {"RateLimit-Limit": "2", "RateLimit-Remaining": "1", "RateLimit-Reset": reset},
				IETFHeaders:  {"RateLimit-Policy": `"default";q=2;w=3600`, "RateLimit": `"default";r=1;t=` + reset},
			}[kind]
			same(t, "the least left", h, want)

			// Over a limit with more left than another: the one over.
			ask(t, c, "edge", desc("tenant", "t", "plan", "free"))
			resp = ask(t, c, "edge", login, desc("tenant", "t", "plan", "free"))
			reset = strconv.FormatInt(resp.Statuses[1].DurationUntilReset.GetSeconds(), 10)
			want = map[Headers]map[string]string{
				"": {}, NoHeaders: {},
				EnvoyHeaders: {"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": reset},
				IETFHeaders:  {"RateLimit-Policy": `"free_tier";q=1;w=3600`, "RateLimit": `"free_tier";r=0;t=` + reset},
			}[kind]
			same(t, "over free_tier", headers(resp), want)

			// No limit, no headers.
			if h := headers(ask(t, c, "edge", desc("path", "/health"), desc("nothing", "x"))); len(h) != 0 {
				t.Fatalf("headers without a limit: %v", h)
			}
		})
	}
}

func same(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: headers %v, want %v", what, got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: headers %v, want %v", what, got, want)
		}
	}
}

const outcomeRules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: canary
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// Outcomes count hits as envoyproxy/ratelimit's stats do, with its
// NEAR_LIMIT_RATIO of 0.8: near a limit of 10 is above 8.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		rules, err := Parse("edge.yaml", []byte(outcomeRules))
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu  sync.Mutex
			got []Outcome
		)
		c := serveImpl(t, New(Options{Store: func() limit.Store { return s }, Rules: rules, Observe: func(o *Outcome) {
			mu.Lock()
			got = append(got, *o)
			mu.Unlock()
		}}))
		type counts struct{ total, over, near, within, shadow int64 }
		step := func(d *rlsv3ext.RateLimitDescriptor, hits uint64, want counts) {
			t.Helper()
			d.HitsAddend = wrapperspb.UInt64(hits)
			mu.Lock()
			got = got[:0]
			mu.Unlock()
			if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{d}}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("%d outcomes, want 1", len(got))
			}
			o := got[0]
			if g := (counts{o.TotalHits, o.OverLimit, o.NearLimit, o.WithinLimit, o.ShadowMode}); g != want || o.Domain != "edge" || o.Limit == nil || o.Descriptor.GetEntries()[0].GetKey() != d.GetEntries()[0].GetKey() {
				t.Fatalf("%d hits: outcome %+v, want %+v", hits, g, want)
			}
		}
		u := func() *rlsv3ext.RateLimitDescriptor { return desc("user", "u") }
		step(u(), 7, counts{total: 7, within: 7})
		step(u(), 2, counts{total: 2, within: 2, near: 1})                 // 7 → 9 crosses 8
		step(u(), 2, counts{total: 2, over: 1, near: 1})                   // 9 → 11 rejected, nothing counted
		step(u(), 1, counts{total: 1, within: 1, near: 1})                 // 9 → 10
		step(u(), 1, counts{total: 1, over: 1})                            // 10 → 11
		step(desc("canary", "c"), 1, counts{total: 1, within: 1, near: 1}) // 0 → 1, above floor(0.8)
		step(desc("canary", "c"), 1, counts{total: 1, over: 1, shadow: 1})
	})
}
