package rls

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

const metricRules = `
domain: m
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: route
    value: api
    descriptors:
      - key: method
        value_to_metric: true
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: canary
    value: "on"
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

// serveMetrics serves metricRules on store with its metrics in a new
// registry.
func serveMetrics(t *testing.T, store limit.Store) (*Service, *prometheus.Registry, func(...*rlsv3ext.RateLimitDescriptor)) {
	t.Helper()
	rules, err := Parse("m.yaml", []byte(metricRules))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc := New(Options{Store: func() limit.Store { return store }, Rules: rules, Registerer: reg})
	c := serveImpl(t, svc)
	return svc, reg, func(ds ...*rlsv3ext.RateLimitDescriptor) { ask(t, c, "m", ds...) }
}

// hitsOf is what reg's gateway_rls_descriptor_hits_total counts: by
// descriptor label, then result.
func hitsOf(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	return hitsIn(t, reg, "m")
}

// hitsIn is hitsOf for the series of domain, which must be the only one.
func hitsIn(t *testing.T, reg *prometheus.Registry, domain string) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "gateway_rls_descriptor_hits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["domain"] != domain {
				t.Fatalf("series of domain %q", l["domain"])
			}
			if got[l["descriptor"]] == nil {
				got[l["descriptor"]] = map[string]float64{}
			}
			got[l["descriptor"]][l["result"]] = m.GetCounter().GetValue()
		}
	}
	return got
}

func addend(d *rlsv3ext.RateLimitDescriptor, n uint64) *rlsv3ext.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// Descriptor hits are counted as envoyproxy/ratelimit's stats count them:
// by rule, by request value where detailed_metric or value_to_metric asks,
// with near_limit counting only the hits past 80% of the limit.
func TestDescriptorMetrics(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, s limit.Store) {
		_, reg, call := serveMetrics(t, s)
		// user a: 7 within; 3 within, crossing 8 by 2; 2 over a used-up
		// limit. user b: 9 within, 1 near; 3 rejected with 1 left: 2
		// over, 1 near.
		for _, d := range []*rlsv3ext.RateLimitDescriptor{
			addend(desc("user", "a"), 7), addend(desc("user", "a"), 3), addend(desc("user", "a"), 2),
			addend(desc("user", "b"), 9), addend(desc("user", "b"), 3),
		} {
			call(d)
		}
		call(desc("tenant", "t1"))
		call(desc("tenant", "t1"), desc("tenant", "t2"))
		call(desc("route", "api", "method", "GET"))
		call(desc("route", "api", "method", "GET"), desc("route", "api", "method", "POST"))
		for range 3 {
			call(desc("canary", "on"))
		}
		// A request's own limit is named after its entries, as
		// envoyproxy/ratelimit names it: 2 a hour, 3 hits.
		for range 3 {
			call(withLimit(desc("user", "c"), 2, typev3.RateLimitUnit_HOUR))
		}
		// No rule: no series.
		call(desc("nothing", "here"))

		row := func(total, over, near, within, shadow float64) map[string]float64 {
			return map[string]float64{"total_hits": total, "over_limit": over, "near_limit": near, "within_limit": within, "shadow_mode": shadow}
		}
		want := map[string]map[string]float64{
			"user":                  row(24, 4, 4, 19, 0),
			"tenant_t1":             row(2, 0, 0, 2, 0),
			"tenant_t2":             row(1, 0, 0, 1, 0),
			"route_api.method_GET":  row(2, 0, 0, 2, 0),
			"route_api.method_POST": row(1, 0, 0, 1, 0),
			// A limit of 1: the first hit is within it and past
			// floor(0.8) = 0; the others over it, in shadow mode.
			"canary_on": row(3, 2, 1, 1, 2),
			// floor(2 × 0.8) = 1: the second hit is near, the third over.
			"user_c": row(3, 1, 1, 2, 0),
		}
		got := hitsOf(t, reg)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("gateway_rls_descriptor_hits_total\n got %v\nwant %v", got, want)
		}
	})
}

// Past MaxDetailedValues labels for one rule, further values are counted
// under the rule's label with OtherValues, and a reload does not lift the
// bound.
func TestDescriptorMetricsCap(t *testing.T) {
	t.Parallel()
	svc, reg, call := serveMetrics(t, memory.New(memory.Options{}))
	const extra = 30
	var batch []*rlsv3ext.RateLimitDescriptor
	for i := range MaxDetailedValues + extra {
		batch = append(batch, desc("tenant", fmt.Sprint("t", i)))
		if len(batch) == 250 || i == MaxDetailedValues+extra-1 {
			call(batch...)
			batch = nil
		}
	}
	// Values with a series keep it; new ones after a reload fold too.
	call(desc("tenant", "t0"))
	svc.SetRules(svc.Rules())
	call(desc("tenant", "new"), desc("tenant", "t1"))

	got := hitsOf(t, reg)
	if len(got) != MaxDetailedValues+1 {
		t.Fatalf("%d descriptor labels, want %d and the fold", len(got), MaxDetailedValues)
	}
	for label, r := range got {
		want := 1.0
		switch {
		case label == "tenant"+OtherValues:
			want = extra + 1
		case label == "tenant_t0" || label == "tenant_t1":
			want = 2
		case !strings.HasPrefix(label, "tenant_t"):
			t.Fatalf("label %q", label)
		}
		if r["total_hits"] != want || r["within_limit"] != want {
			t.Fatalf("%s: %v, want %v hits within the limit", label, r, want)
		}
	}
}

// Labels built from a request are bounded in length, and those of
// descriptors with their own limit in number, whatever their keys: a
// client chooses both.
func TestDescriptorMetricsBoundRequests(t *testing.T) {
	t.Parallel()
	_, reg, call := serveMetrics(t, memory.New(memory.Options{}))
	long := strings.Repeat("é", 50_000) // two bytes a character: a cut may fall inside one
	call(desc("tenant", long+"a"), desc("tenant", long+"b"))
	got := hitsOf(t, reg)
	if len(got) != 2 {
		t.Fatalf("%d labels for two long values, want 2: %v", len(got), slices.Collect(maps.Keys(got)))
	}
	for label := range got {
		if len(label) > MaxLabelBytes || !utf8.ValidString(label) || !strings.HasPrefix(label, "tenant_é") {
			t.Fatalf("label of %d bytes, valid UTF-8 %v: %.40q", len(label), utf8.ValidString(label), label)
		}
	}

	_, reg, call = serveMetrics(t, memory.New(memory.Options{}))
	const extra = 30
	var batch []*rlsv3ext.RateLimitDescriptor
	for i := range MaxDetailedValues + extra {
		batch = append(batch, withLimit(desc(fmt.Sprint("k", i), "v"), 100, typev3.RateLimitUnit_HOUR))
		if len(batch) == 250 || i == MaxDetailedValues+extra-1 {
			call(batch...)
			batch = nil
		}
	}
	got = hitsOf(t, reg)
	if len(got) != MaxDetailedValues+1 || got[OtherOverrides]["total_hits"] != extra {
		t.Fatalf("%d labels for %d overrides of distinct keys, want %d and %q with %d hits: %v",
			len(got), MaxDetailedValues+extra, MaxDetailedValues, OtherOverrides, extra, got[OtherOverrides])
	}
}

// On Redis Cluster, a limit another slot's limit rejected first was not
// asked: its hits are in total_hits alone, neither within nor over.
func TestDescriptorMetricsClusterNotAsked(t *testing.T) {
	t.Parallel()
	cl := testredis.StartCluster(t, 3)
	s, err := redisstore.New(redisstore.Options{Mode: redisstore.Cluster, Addrs: cl.Addrs()[:1], Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	reg := prometheus.NewRegistry()
	c := serveWith(t, s, Options{Registerer: reg})
	login, addr := desc("path", "/login"), desc("remote_address", "10.9.9.9")
	for range 2 {
		ask(t, c, "edge", login)
	}
	resp := ask(t, c, "edge", addr, login)
	notAsked(t, resp.Statuses[0], 3)
	got := hitsIn(t, reg, "edge")
	want := map[string]map[string]float64{
		// A limit of 2: the second hit is past floor(1.6) = 1, the
		// third over.
		"path_/login":    {"total_hits": 3, "over_limit": 1, "near_limit": 1, "within_limit": 2, "shadow_mode": 0},
		"remote_address": {"total_hits": 1, "over_limit": 0, "near_limit": 0, "within_limit": 0, "shadow_mode": 0},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("gateway_rls_descriptor_hits_total\n got %v\nwant %v", got, want)
	}
}
