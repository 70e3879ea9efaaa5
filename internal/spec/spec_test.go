package spec

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/limit"
)

func mustLimit(t *testing.T, limits string) (*config.Config, *config.Limit) {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(`
routes:
  - id: r
    match: {path: /x/**, methods: [GET]}
    upstream: {targets: ["http://127.0.0.1:9"]}
    limits: [`+limits+`]
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cfg.Routes[0].Limits[0]
}

// A key of global and route parts is made once: the same key a request's
// values make, and one the store keeps apart from a fallback's.
func TestConstKey(t *testing.T) {
	t.Parallel()
	cfg, lc := mustLimit(t, `{name: api, key: [global, route], rate: 1/s}`)
	l := NewLimit(cfg, "r", lc)
	if !l.Const() || !slices.Equal(l.ConstValues, []string{"-", "r"}) {
		t.Fatalf("const %v values %v, want -, r", l.Const(), l.ConstValues)
	}
	key, _, err := l.KeyOf("r", nil, []string{"anything", "r"}, false)
	if err != nil || key != l.ConstKey {
		t.Errorf("KeyOf %q (%v), want the const key %q", key, err, l.ConstKey)
	}
	cfg, lc = mustLimit(t, `{name: user, key: ["header:X-User-Id"], fallback: [ip], rate: 1/s}`)
	l = NewLimit(cfg, "r", lc)
	if l.Const() || !l.UsesIP || l.Key[0].Src != Header || l.Key[0].Name != "X-User-Id" {
		t.Errorf("limit %+v: want a header key, an ip fallback", l)
	}
}

// KeyOf reads values as a request's would be read: an address grouped as
// the ip part groups it, a host lowercased without its port.
func TestKeyOf(t *testing.T) {
	t.Parallel()
	cfg, lc := mustLimit(t, `{name: c, key: [ip, host], fallback: [global], rate: 1/s}`)
	l := NewLimit(cfg, "r", lc)
	group := func(a netip.Addr) string { return "grouped " + a.String() }
	_, vs, err := l.KeyOf("r", group, []string{"[::1]", "Example.COM:8080"}, false)
	if err != nil || !slices.Equal(vs, []string{"grouped ::1", "example.com"}) {
		t.Errorf("values %q (%v)", vs, err)
	}
	fk, _, err := l.KeyOf("r", group, []string{"x"}, true)
	want := limit.NewKey(limit.Part{Kind: "global", Value: "-", Fallback: true})
	if err != nil || fk != want {
		t.Errorf("fallback key %q (%v), want %q", fk, err, want)
	}
	if _, _, err := l.KeyOf("r", group, []string{"one"}, false); err == nil {
		t.Error("one value for two parts: no error")
	}
}

// RuleFor: an override by value or header gives its rule, the first that
// matches.
func TestRuleFor(t *testing.T) {
	t.Parallel()
	cfg, lc := mustLimit(t, `{name: u, key: ["header:X-User-Id"], rate: 1/s, overrides: [
      {values: [[vip]], rate: 5/s},
      {header: {name: x-tier, value: pro}, rate: 7/s}]}`)
	l := NewLimit(cfg, "r", lc)
	for _, tc := range []struct {
		values  []string
		headers map[string][]string
		want    int64
	}{
		{[]string{"joe"}, nil, 1},
		{[]string{"vip"}, nil, 5},
		{[]string{"joe"}, map[string][]string{"X-Tier": {"pro"}}, 7},
		{[]string{"joe"}, map[string][]string{"X-Tier": {"gold"}}, 1},
	} {
		if got := l.RuleFor(tc.values, tc.headers).Rate.Count; got != tc.want {
			t.Errorf("%v %v: rate %d, want %d", tc.values, tc.headers, got, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	m := NewMatch(config.Match{Path: "/x/**", Methods: []string{"GET"}, Host: "API.example"})
	for _, tc := range []struct {
		method, host, path string
		want               bool
	}{
		{"GET", "api.example", "/x", true},
		{"GET", "api.example", "/x/y", true},
		{"GET", "api.example", "/xy", false},
		{"POST", "api.example", "/x", false},
		{"GET", "other", "/x", false},
	} {
		if got := m.Takes(tc.method, tc.host, tc.path); got != tc.want {
			t.Errorf("%s %s %s: %v, want %v", tc.method, tc.host, tc.path, got, tc.want)
		}
	}
	if !m.TakesAnyHost("GET", "/x/z") {
		t.Error("TakesAnyHost compares the host")
	}
	if h := HostKey("[::1]:80"); h != "::1" {
		t.Errorf("HostKey: %q", h)
	}
}
