package rls

import (
	"context"
	"slices"
	"sync"
	"testing"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-gw/floodgate/limit"
)

const quotaRules = `
domain: q
descriptors:
  - key: user
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: plan
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: free
    quota_mode: true
    unlimited: true
`

// observed collects the Outcomes a service reports, by descriptor key.
type observed struct {
	mu  sync.Mutex
	out map[string][]Outcome
}

func (o *observed) observe(oc *Outcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := oc.Descriptor.GetEntries()[0].GetKey()
	o.out[k] = append(o.out[k], *oc)
}

func (o *observed) last(k string) Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out[k][len(o.out[k])-1]
}

func quotaService(t *testing.T, s limit.Store, o Options) (rlsv3.RateLimitServiceClient, *observed) {
	t.Helper()
	obs := &observed{out: map[string][]Outcome{}}
	o.Store, o.Rules, o.Observe = func() limit.Store { return s }, mustParse(t, quotaRules), obs.observe
	return serveImpl(t, New(o)), obs
}

// violations is the answer's quotaModeViolations, nil when absent, and
// fails t unless quotaModeEnabled is enabled.
func violations(t *testing.T, resp *rlsv3.RateLimitResponse, enabled bool) []float64 {
	t.Helper()
	md := resp.GetDynamicMetadata().GetFields()
	if md == nil {
		t.Fatalf("no dynamic metadata in %v", resp)
	}
	if got := md["quotaModeEnabled"].GetBoolValue(); got != enabled {
		t.Fatalf("quotaModeEnabled %v, want %v: %v", got, enabled, md)
	}
	v, ok := md["quotaModeViolations"]
	if !ok {
		return nil
	}
	var at []float64
	for _, x := range v.GetListValue().GetValues() {
		at = append(at, x.GetNumberValue())
	}
	if len(at) == 0 {
		t.Fatalf("quotaModeViolations present and empty: %v", md)
	}
	return at
}

// A request over a quota is admitted; its status says OK with nothing
// left; the metadata names it; it counts against the request's other
// limits, and one of those still rejects it, counting nothing.
func TestQuotaMode(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		c, obs := quotaService(t, s, Options{Metadata: true})
		ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
		for i := range 5 {
			resp := ask(t, c, "q", desc("user", "u"), desc("path", "/a"))
			if resp.OverallCode != ok {
				t.Fatalf("request %d: %v, want OK: a quota admits", i, resp)
			}
			reports(t, resp.Statuses[0], ok, 2, uint32(max(1-i, 0)))
			reports(t, resp.Statuses[1], ok, 5, uint32(4-i))
			got := violations(t, resp, true)
			if want := []float64{0}; i < 2 && got != nil || i >= 2 && !slices.Equal(got, want) {
				t.Fatalf("request %d: quotaModeViolations %v", i, got)
			}
			if u := obs.last("user"); i >= 2 && (u.OverLimit != 1 || u.ShadowMode != 0 || u.WithinLimit != 0) {
				t.Fatalf("request %d over the quota: %+v, want 1 over_limit and no shadow_mode", i, u)
			}
		}
		// The path's limit, used up by requests over the quota, rejects;
		// the quota stays OK, and is named when the store read it (Redis
		// answers a flood over a used-up limit without asking, and then
		// knows nothing of the request's other limits).
		resp := ask(t, c, "q", desc("user", "u"), desc("path", "/a"))
		if resp.OverallCode != over || resp.Statuses[0].Code != ok || resp.Statuses[1].Code != over {
			t.Fatalf("over the path's limit: %v", resp)
		}
		if got := violations(t, resp, true); resp.Statuses[0].DurationUntilReset != nil && !slices.Equal(got, []float64{0}) {
			t.Fatalf("quotaModeViolations %v: %v", got, resp)
		}
		// A rejected request counts nothing against another user's quota.
		resp = ask(t, c, "q", desc("user", "v"), desc("path", "/a"))
		if resp.OverallCode != over || resp.Statuses[0].Code != ok {
			t.Fatalf("%v", resp)
		}
		reports(t, ask(t, c, "q", desc("user", "v")).Statuses[0], ok, 2, 1)

		// quota_mode beside shadow_mode is a shadow limit: OK, and not
		// named. On an unlimited descriptor it is nothing.
		for range 2 {
			resp = ask(t, c, "q", desc("plan", "p"))
		}
		if resp.OverallCode != ok || violations(t, resp, true) != nil || obs.last("plan").ShadowMode != 1 {
			t.Fatalf("a shadow quota over its limit: %v %+v", resp, obs.last("plan"))
		}
		resp = ask(t, c, "q", desc("free", "x"), desc("path", "/b"))
		if resp.OverallCode != ok || violations(t, resp, false) != nil {
			t.Fatalf("an unlimited quota: %v", resp)
		}
	})
}

// rls.quota_mode makes every limit a quota, a descriptor's own limit
// included; a quota blocked by its hits is named too.
func TestServiceQuotaMode(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		c, _ := quotaService(t, s, Options{QuotaMode: true, Metadata: true})
		ok := rlsv3.RateLimitResponse_OK
		var resp *rlsv3.RateLimitResponse
		for range 6 {
			resp = ask(t, c, "q", desc("path", "/a"), withLimit(desc("other", "o"), 1, typev3.RateLimitUnit_HOUR))
		}
		if resp.OverallCode != ok || resp.Statuses[0].Code != ok || resp.Statuses[0].LimitRemaining != 0 || resp.Statuses[1].Code != ok {
			t.Fatalf("over two limits in quota mode: %v", resp)
		}
		if got := violations(t, resp, true); !slices.Equal(got, []float64{0, 1}) {
			t.Fatalf("quotaModeViolations %v, want [0 1]", got)
		}
		big := desc("path", "/c")
		big.HitsAddend = wrapperspb.UInt64(6)
		resp = ask(t, c, "q", big)
		if resp.OverallCode != ok || !slices.Equal(violations(t, resp, true), []float64{0}) {
			t.Fatalf("hits above the limit in quota mode: %v", resp)
		}
	})
}

// The metadata has envoyproxy/ratelimit's fields, and only when asked for.
func TestResponseMetadata(t *testing.T) {
	t.Parallel()
	s := redisStore(t)
	c, _ := quotaService(t, s, Options{Metadata: true})
	d := withLimit(desc("path", "/m", "method", "GET"), 9, typev3.RateLimitUnit_MINUTE)
	d.HitsAddend = wrapperspb.UInt64(2)
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "q", HitsAddend: 3, Descriptors: []*rlsv3ext.RateLimitDescriptor{d, desc("path", "/n")}})
	if err != nil {
		t.Fatal(err)
	}
	md := resp.GetDynamicMetadata().AsMap()
	want := map[string]any{
		"domain":     "q",
		"hitsAddend": 3.0,
		"descriptors": []any{
			map[string]any{"entries": []any{"path=/m", "method=GET"}, "limit": d.Limit.String(), "hitsAddend": 2.0},
			map[string]any{"entries": []any{"path=/n"}},
		},
		"quotaModeEnabled": false,
	}
	wantS, err := structpb.NewStruct(want)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(resp.GetDynamicMetadata(), wantS) {
		t.Fatalf("metadata %v\nwant     %v", md, want)
	}

	plain := serveRules(t, s, mustParse(t, quotaRules))
	if resp := ask(t, plain, "q", desc("user", "u")); resp.DynamicMetadata != nil {
		t.Fatalf("metadata without Metadata: %v", resp.DynamicMetadata)
	}
}
