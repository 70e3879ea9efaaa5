package rls

import (
	"strings"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
)

func TestFromConfigs(t *testing.T) {
	t.Parallel()
	r, err := FromConfigs([]*rlsconfv3.RateLimitConfig{{
		Name:   "edge",
		Domain: "edge",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "path", Value: "/login", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 5}},
			{Key: "path", Value: "/health", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
			{Key: "user", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "plan", Value: "free", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 0}},
			}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l := r.Match("edge", []Entry{{"path", "/login"}})
	if l == nil || l.Rule == nil || l.Rule.Rate.Count != 5 || l.Period != time.Minute {
		t.Fatalf("/login: %+v", l)
	}
	if l := r.Match("edge", []Entry{{"path", "/health"}}); l == nil || !l.Unlimited {
		t.Fatalf("/health: %+v", l)
	}
	// A count of 0 is a limit that rejects every request, as in a file.
	if l := r.Match("edge", []Entry{{"user", "ann"}, {"plan", "free"}}); l == nil || l.Rule != nil || l.Unlimited {
		t.Fatalf("free plan: %+v", l)
	}
	want, _ := Parse("f.yaml", []byte(`domain: edge
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 5}
`))
	// The counters are named as a rule file's, so that moving the
	// rules from files to xDS keeps them.
	if w := want.Match("edge", []Entry{{"path", "/login"}}).Rule; l.Rule.Name != w.Name {
		t.Fatalf("counter name %q, a rule file gives %q", l.Rule.Name, w.Name)
	}
}

func TestFromConfigsRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfgs []*rlsconfv3.RateLimitConfig
		want string
	}{
		{"unknown unit", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 9, RequestsPerUnit: 1}}}}},
			`a: descriptors[0].rate_limit.unit: unknown unit "9"`},
		{"no unit", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}}},
			"a: descriptors[0].rate_limit: unit is missing"},
		{"unit with unlimited", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Unit: rlsconfv3.RateLimitUnit_SECOND}}}}},
			"a: descriptors[0].rate_limit.unit: unit with unlimited: true"},
		{"no domain", []*rlsconfv3.RateLimitConfig{{Name: "a"}}, "a: domain is missing"},
		{"no key", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Value: "v"}}}},
			"a: descriptors[0]: key is missing"},
		{"same domain twice", []*rlsconfv3.RateLimitConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}},
			`b: domain "d" is already defined in a`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := FromConfigs(tc.cfgs)
			if err == nil || r != nil {
				t.Fatalf("accepted: %v", r)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to hold %q", err, tc.want)
			}
		})
	}
}
