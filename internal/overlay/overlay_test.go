package overlay

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/limit"
)

const testConfig = `
admin: {listen: ""}
global_limits:
  - {name: all, key: [global], rate: 100/s}
routes:
  - id: api
    match: {path: /api}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - name: user
        key: ["header:X-User-Id"]
        rate: 2/1h
        align: first
        overrides:
          - {header: {name: X-Tier, value: gold}, rate: 50/1h}
      - {name: bucket, key: [route], algorithm: token_bucket, rate: 10/s}
      - {name: wide, key: [route], algorithm: token_bucket, rate: 100/s, burst: 500}
      - {name: costly, key: [route], rate: 10/s, cost: 5}
      - {name: costly-tb, key: [route], algorithm: token_bucket, rate: 10/s, cost: 5}
      - {name: quiet, key: [route], rate: 10/s, shadow: true}
      - {name: flight, key: [route], algorithm: concurrency, limit: 100}
  - id: web
    match: {path: /web}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - {name: ip, key: [ip], rate: 10/s}
`

func parse(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func bptr(b bool) *bool { return &b }

// describe writes what an override can change of a limit, and checks that
// its rule says the same.
func describe(t *testing.T, l *config.Limit) string {
	t.Helper()
	s := l.Rate.String()
	if l.Algorithm == limit.Concurrency {
		s = fmt.Sprintf("%d in flight", l.Limit)
		if l.Rate != (limit.Rate{Count: l.Limit}) {
			t.Errorf("limit %s: rate %+v, limit %d", l.Name, l.Rate, l.Limit)
		}
	}
	if l.Algorithm == limit.TokenBucket {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	if l.Shadow {
		s += " shadow"
	}
	if r := l.Rule; r.Rate != l.Rate || r.Burst != l.Burst || r.Shadow != l.Shadow {
		t.Errorf("limit %s: rule %v burst %d shadow %v, limit %v burst %d shadow %v",
			l.Name, r.Rate, r.Burst, r.Shadow, l.Rate, l.Burst, l.Shadow)
	}
	for _, o := range l.Overrides {
		s += fmt.Sprintf(" [%v", o.Rule.Rate)
		if o.Rule.Shadow {
			s += " shadow"
		}
		s += "]"
	}
	return s
}

// limits describes every limit of cfg by its override's name.
func limits(t *testing.T, cfg *config.Config) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range cfg.GlobalLimits {
		m[Name("global", l.Name)] = describe(t, l)
	}
	for _, r := range cfg.Routes {
		for _, l := range r.Limits {
			m[Name(r.ID, l.Name)] = describe(t, l)
		}
	}
	return m
}

func TestAdjust(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit  string // of route api
		change Change
		want   string // describe of the result; "" for none (disabled)
		err    string // the *Error, as its Error says it
	}{
		{"user", Change{Rate: "5/1h"}, "5/h [50/h]", ""},
		{"user", Change{Rate: " 5/h "}, "5/h [50/h]", ""},
		{"user", Change{Shadow: bptr(true)}, "2/h shadow [50/h shadow]", ""},
		{"user", Change{Rate: "5/h", Shadow: bptr(true)}, "5/h shadow [50/h shadow]", ""},
		{"quiet", Change{Shadow: bptr(false)}, "10/s", ""},
		{"user", Change{Enabled: bptr(true)}, "2/h [50/h]", ""},
		{"user", Change{Enabled: bptr(false)}, "", ""},
		{"user", Change{Rate: "5/h", Enabled: bptr(false)}, "", ""},
		// A burst that was the rate's count follows a new rate; one
		// written apart from it stays; one given wins.
		{"bucket", Change{Rate: "20/s"}, "20/s burst 20", ""},
		{"wide", Change{Rate: "20/s"}, "20/s burst 500", ""},
		{"bucket", Change{Rate: "20/s", Burst: 30}, "20/s burst 30", ""},
		{"bucket", Change{Burst: 30}, "10/s burst 30", ""},
		{"flight", Change{Limit: 7}, "7 in flight", ""},

		{"flight", Change{Rate: "5/s"}, "", "rate: concurrency takes limit: N (requests in flight), not a rate"},
		{"user", Change{Limit: 5}, "", "limit: limit: N is for concurrency; a fixed_window takes rate (rate: 100/s)"},
		{"bucket", Change{Limit: 5}, "", "limit: limit: N is for concurrency; a token_bucket takes rate (rate: 100/s)"},
		{"user", Change{Burst: 5}, "", "burst: burst applies to token_bucket only (algorithm is fixed_window)"},
		{"flight", Change{Burst: 5}, "", "burst: burst applies to token_bucket only (algorithm is concurrency)"},
		{"user", Change{Rate: "fast"}, "", "rate: want N/UNIT (800/s), N/DURATION (1/10s) or COUNT:SECONDS (100:60)"},
		{"user", Change{Rate: "0/s"}, "", "rate: count 0 must be positive"},
		{"user", Change{Rate: "5/1us"}, "", "rate: period 1µs is shorter than 1ms"},
		{"wide", Change{Rate: "2000000000/s"}, "", "rate: count 2000000000 is above the maximum 1000000000"},
		// The rule refuses: its message, under the field that made it.
		{"costly", Change{Rate: "2/s"}, "", "rate: cost 5 is larger than the count 2"},
		{"costly-tb", Change{Rate: "2/s"}, "", "rate: burst 2 is smaller than the cost 5"},
		{"costly-tb", Change{Burst: 2}, "", "burst: burst 2 is smaller than the cost 5"},
		{"costly-tb", Change{Rate: "20/s", Burst: 2}, "", "burst: burst 2 is smaller than the cost 5"},
		{"wide", Change{Burst: 2_000_000_000}, "", "burst: burst 2000000000 must be in 1..1000000000"},
		{"flight", Change{Limit: 2_000_000_000}, "", "limit: concurrency limit 2000000000 must be in 1..1000000000"},
		// A value is checked even when the change disables the limit.
		{"user", Change{Rate: "fast", Enabled: bptr(false)}, "", "rate: want N/UNIT (800/s), N/DURATION (1/10s) or COUNT:SECONDS (100:60)"},
	} {
		t.Run(fmt.Sprintf("%s %+v", tc.limit, tc.change), func(t *testing.T) {
			t.Parallel()
			l := FindLimit(parse(t), "api", tc.limit)
			before, rule, vals := describe(t, l), l.Rule, slices.Clone(l.Overrides)
			n, err := Adjust(l, tc.change)
			var e *Error
			switch {
			case tc.err != "" && (!errors.As(err, &e) || err.Error() != tc.err):
				t.Fatalf("error %v; want *Error %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && n != nil:
				t.Fatalf("a limit with the error: %+v", n)
			case tc.want == "" && n != nil:
				t.Fatalf("got %s, want none", describe(t, n))
			case tc.want != "" && n == nil:
				t.Fatalf("got none, want %s", tc.want)
			case n != nil:
				if got := describe(t, n); got != tc.want {
					t.Errorf("got %s, want %s", got, tc.want)
				}
				if n == l || n.Rule == rule || n.Name != l.Name {
					t.Error("the result is not a copy with a rule of its own and the limit's name")
				}
				if err := n.Rule.Validate(); err != nil {
					t.Error(err)
				}
				if n.Rule.Align != rule.Align || n.Rule.Cost != rule.Cost {
					t.Errorf("settings lost: align %v cost %d", n.Rule.Align, n.Rule.Cost)
				}
			}
			if after := describe(t, l); after != before || l.Rule != rule || !slices.Equal(l.Overrides, vals) {
				t.Errorf("the file's limit changed: %s, was %s", after, before)
			}
		})
	}
}

func TestApply(t *testing.T) {
	t.Parallel()
	ov := func(route, lim string, c Change) Override { return Override{Route: route, Limit: lim, Change: c} }
	set := func(ovs ...Override) map[string]Override {
		m := map[string]Override{}
		for _, o := range ovs {
			m[Name(o.Route, o.Limit)] = o
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		set     map[string]Override
		changed map[string]string // by name: describe of the limit, "" for gone
		skipped map[string]string
	}{
		{name: "none"},
		{name: "empty", set: map[string]Override{}},
		{
			name:    "a route's limit",
			set:     set(ov("api", "user", Change{Rate: "5/h"})),
			changed: map[string]string{"api/user": "5/h [50/h]"},
		},
		{
			name:    "a global limit",
			set:     set(ov("global", "all", Change{Shadow: bptr(true)})),
			changed: map[string]string{"global/all": "100/s shadow"},
		},
		{
			name:    "disabled",
			set:     set(ov("api", "bucket", Change{Enabled: bptr(false)}), ov("web", "ip", Change{Enabled: bptr(false)})),
			changed: map[string]string{"api/bucket": "", "web/ip": ""},
		},
		{
			name: "several, one refused",
			set: set(ov("api", "user", Change{Rate: "5/h"}), ov("api", "flight", Change{Rate: "5/s"}),
				ov("api", "wide", Change{Burst: 9})),
			changed: map[string]string{"api/user": "5/h [50/h]", "api/wide": "100/s burst 9"},
			skipped: map[string]string{"api/flight": "rate: concurrency takes limit: N (requests in flight), not a rate"},
		},
		{
			name:    "refused only",
			set:     set(ov("web", "ip", Change{Burst: 9})),
			skipped: map[string]string{"web/ip": "burst: burst applies to token_bucket only (algorithm is fixed_window)"},
		},
		{
			name: "not in the file",
			set: set(ov("api", "nope", Change{Rate: "5/h"}), ov("gone", "user", Change{Rate: "5/h"}),
				ov("global", "user", Change{Rate: "5/h"}), ov("web", "ip", Change{Rate: "1/s"})),
			changed: map[string]string{"web/ip": "1/s"},
			skipped: map[string]string{
				"api/nope":    `this instance's config has no limit "nope" on route "api"`,
				"gone/user":   `this instance's config has no limit "user" on route "gone"`,
				"global/user": `this instance's config has no limit "user" on route "global"`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := parse(t)
			before := limits(t, file)
			routes := slices.Clone(file.Routes)
			cfg, skipped := Apply(file, tc.set)
			want := maps.Clone(before)
			for name, d := range tc.changed {
				if d == "" {
					delete(want, name)
				} else {
					want[name] = d
				}
			}
			if got := limits(t, cfg); !maps.Equal(got, want) {
				t.Errorf("limits:\n got %v\nwant %v", got, want)
			}
			if skipped == nil || !maps.Equal(skipped, tc.skipped) {
				t.Errorf("skipped %#v, want %v", skipped, tc.skipped)
			}
			if after := limits(t, file); !maps.Equal(after, before) || !slices.Equal(file.Routes, routes) {
				t.Errorf("the file changed: %v", after)
			}
			if len(tc.set) == 0 && cfg != file {
				t.Error("without overrides, not the file itself")
			}
			// What no override changed is the file's own.
			for i, r := range cfg.Routes {
				touched := false
				for _, l := range file.Routes[i].Limits {
					_, ok := tc.changed[Name(r.ID, l.Name)]
					touched = touched || ok
				}
				if !touched && r != file.Routes[i] {
					t.Errorf("route %s copied, though no override applies to it", r.ID)
				}
				for _, l := range r.Limits {
					if _, ok := tc.changed[Name(r.ID, l.Name)]; !ok && l != FindLimit(file, r.ID, l.Name) {
						t.Errorf("limit %s/%s copied, though no override applies to it", r.ID, l.Name)
					}
				}
			}
			if _, ok := tc.changed["global/all"]; !ok && &cfg.GlobalLimits[0] != &file.GlobalLimits[0] {
				t.Error("the global limits copied, though no override applies to them")
			}
		})
	}
}

func TestWithoutGone(t *testing.T) {
	t.Parallel()
	ov := func(route, lim string) Override { return Override{Route: route, Limit: lim, By: "alice"} }
	for _, tc := range []struct {
		name       string
		set        map[string]Override
		kept, gone []string // names
	}{
		{name: "nil"},
		{name: "empty", set: map[string]Override{}, kept: []string{}},
		{
			name: "all kept",
			set:  map[string]Override{"api/user": ov("api", "user"), "global/all": ov("global", "all")},
			kept: []string{"api/user", "global/all"},
		},
		{
			name: "some gone",
			set: map[string]Override{
				"api/user": ov("api", "user"), "api/nope": ov("api", "nope"),
				"gone/user": ov("gone", "user"), "global/ip": ov("global", "ip"), "web/ip": ov("web", "ip"),
			},
			kept: []string{"api/user", "web/ip"},
			gone: []string{"api/nope", "global/ip", "gone/user"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kept, gone := WithoutGone(parse(t), tc.set)
			if (kept == nil) != (tc.kept == nil) {
				t.Errorf("kept %v, want %v", kept, tc.kept)
			}
			if got := slices.Sorted(maps.Keys(kept)); !slices.Equal(got, tc.kept) {
				t.Errorf("kept %v, want %v", got, tc.kept)
			}
			for name, o := range kept {
				if o != tc.set[name] {
					t.Errorf("kept %s as %+v", name, o)
				}
			}
			var names []string
			for _, o := range gone {
				names = append(names, Name(o.Route, o.Limit))
				if o != tc.set[Name(o.Route, o.Limit)] {
					t.Errorf("gone as %+v", o)
				}
			}
			if slices.Sort(names); !slices.Equal(names, tc.gone) {
				t.Errorf("gone %v, want %v", names, tc.gone)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	shadow := Change{Shadow: bptr(true)}
	for _, tc := range []struct {
		req Request
		err string // "" for none
	}{
		{Request{}, "override: nothing to change: give rate (or limit for concurrency), burst, shadow or enabled"},
		{Request{TTL: time.Hour, Reason: "sale"}, "override: nothing to change: give rate (or limit for concurrency), burst, shadow or enabled"},
		{Request{Change: Change{Shadow: bptr(false)}}, ""},
		{Request{Change: Change{Enabled: bptr(true)}}, ""},
		// A rate is the limit's to judge (Adjust).
		{Request{Change: Change{Rate: "fast"}}, ""},
		{Request{Change: Change{Limit: -1}}, "limit: -1 must be positive"},
		{Request{Change: Change{Burst: -1}}, "burst: -1 must be positive"},
		{Request{Change: Change{Limit: -1, Burst: -1}}, "limit: -1 must be positive"},
		{Request{Change: shadow, TTL: -time.Second}, "ttl: -1s: at least 1s"},
		{Request{Change: shadow, TTL: 999 * time.Millisecond}, "ttl: 999ms: at least 1s"},
		{Request{Change: shadow, TTL: time.Second}, ""},
		{Request{Change: shadow, TTL: 720 * time.Hour}, ""},
		{Request{Change: shadow, TTL: 720*time.Hour + time.Second}, "ttl: 720h0m1s: at most 720h0m0s (30 days)"},
		{Request{Change: shadow, Reason: strings.Repeat("r", 200), By: strings.Repeat("b", 64)}, ""},
		{Request{Change: shadow, Reason: strings.Repeat("r", 201)}, "reason: 201 bytes, at most 200"},
		{Request{Change: shadow, By: strings.Repeat("b", 65)}, "by: 65 bytes, at most 64"},
		{Request{Change: shadow, Reason: strings.Repeat("r", 200) + "\n"}, "reason: 201 bytes, at most 200"},
		{Request{Change: shadow, Reason: "sale: 20% off, ünd mehr", By: "élodie"}, ""},
		{Request{Change: shadow, Reason: "a\nb"}, "reason: holds a control character or invalid UTF-8"},
		{Request{Change: shadow, Reason: "a\tb"}, "reason: holds a control character or invalid UTF-8"},
		{Request{Change: shadow, Reason: "\x1b[2J"}, "reason: holds a control character or invalid UTF-8"},
		{Request{Change: shadow, Reason: "a\u0085b"}, "reason: holds a control character or invalid UTF-8"},
		{Request{Change: shadow, By: "\xff"}, "by: holds a control character or invalid UTF-8"},
		{Request{Change: shadow, By: "\ufffd"}, "by: holds a control character or invalid UTF-8"},
		{Request{Change: shadow, Reason: "a\nb", By: "\xff"}, "reason: holds a control character or invalid UTF-8"},
	} {
		err := Check(tc.req)
		var e *Error
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%+v: %v", tc.req, err)
		case tc.err != "" && (!errors.As(err, &e) || err.Error() != tc.err):
			t.Errorf("%+v: %v; want *Error %q", tc.req, err, tc.err)
		}
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	good := `{"route":"api","limit":"user","override":{"rate":"5/h"},"by":"alice","set_at":"2026-12-02T09:58:00Z"}`
	for _, tc := range []struct {
		name, entry string
		ok          bool
	}{
		{"api/user", good, true},
		{"api/user", good + strings.Repeat(" ", maxJSON-len(good)), true},
		{"api/user", good + strings.Repeat(" ", maxJSON-len(good)+1), false},
		{"api/other", good, false},
		{"api/user", `{"route":"api","limit":"user"}`, false},
		{"api/user", `{"route":"api","limit":"user","override":{"rate":"1/s","burst":-1}}`, false},
		{"api/user", `{"route":"api","limit":"user","override":{"shadow":true},"reason":"a\nb"}`, false},
		{"api/user", `{"route":"api","limit":"user","override":{"rate":5}}`, false},
		{"api/user", `not json`, false},
		{"api/user", ``, false},
	} {
		ov, err := Decode(tc.name, []byte(tc.entry))
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s %.60q: %v", tc.name, tc.entry, err)
		case tc.ok && (ov.Route != "api" || ov.Change.Rate != "5/h" || ov.By != "alice"):
			t.Errorf("%s %.60q: %+v", tc.name, tc.entry, ov)
		case !tc.ok && !errors.Is(err, ErrMalformed):
			t.Errorf("%s %.60q: %v; want ErrMalformed", tc.name, tc.entry, err)
		}
	}
}

// The JSON of an override is the admin API's and the shared store's,
// which instances of two versions read during a rolling upgrade.
func TestOverrideJSON(t *testing.T) {
	t.Parallel()
	set := time.Date(2026, 12, 2, 9, 58, 0, 0, time.UTC)
	ov := Override{
		Route: "api", Limit: "user", Reason: "sale", By: "alice", Set: set, Expires: set.Add(30 * time.Minute), Instance: "3f2a-",
		Change: Change{Rate: "20/10s", Limit: 3, Burst: 4, Shadow: bptr(false), Enabled: bptr(true)},
	}
	b, err := json.Marshal(ov)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"route":"api","limit":"user","override":{"rate":"20/10s","limit":3,"burst":4,"shadow":false,"enabled":true},` +
		`"reason":"sale","by":"alice","set_at":"2026-12-02T09:58:00Z","expires_at":"2026-12-02T10:28:00Z","instance":"3f2a-"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	if r := Replaced(b); r == nil || !reflect.DeepEqual(*r, ov) {
		t.Errorf("read back as %+v", r)
	}
	b, _ = json.Marshal(Override{Route: "api", Limit: "user", Change: Change{Shadow: bptr(true)}, Set: set})
	if want := `{"route":"api","limit":"user","override":{"shadow":true},"set_at":"2026-12-02T09:58:00Z"}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	for _, b := range []string{"", "null…", `{"route":`} {
		if r := Replaced([]byte(b)); r != nil {
			t.Errorf("Replaced(%q) = %+v", b, r)
		}
	}
	if r := Replaced(nil); r != nil {
		t.Errorf("Replaced(nil) = %+v", r)
	}
}

func TestFileValues(t *testing.T) {
	t.Parallel()
	cfg := parse(t)
	for _, tc := range []struct {
		limit  string
		change Change
		want   string // as JSON
	}{
		{"user", Change{Rate: "5/h"}, `{"rate":"2/h"}`},
		{"user", Change{Shadow: bptr(true)}, `{"shadow":false}`},
		{"quiet", Change{Shadow: bptr(false)}, `{"shadow":true}`},
		{"user", Change{Enabled: bptr(false)}, `{"enabled":true}`},
		{"bucket", Change{Rate: "20/s"}, `{"rate":"10/s","burst":10}`},
		{"wide", Change{Burst: 9}, `{"burst":500}`},
		{"wide", Change{Shadow: bptr(true)}, `{"shadow":false}`},
		{"flight", Change{Limit: 7}, `{"limit":100}`},
		{"flight", Change{Rate: "5/s", Enabled: bptr(true)}, `{"limit":100,"enabled":true}`},
	} {
		b, _ := json.Marshal(FileValues(FindLimit(cfg, "api", tc.limit), tc.change))
		if string(b) != tc.want {
			t.Errorf("%s %+v: %s, want %s", tc.limit, tc.change, b, tc.want)
		}
	}
}

// The attributes are those of the gateway's log lines, which operators
// search for.
func TestLogArgs(t *testing.T) {
	t.Parallel()
	if args := (Change{}).LogArgs(); args != nil {
		t.Errorf("nothing changed: %v", args)
	}
	got := Change{Rate: "5/h", Limit: 3, Burst: 4, Shadow: bptr(false), Enabled: bptr(true)}.LogArgs()
	want := []any{"rate", "5/h", "in_flight", int64(3), "burst", int64(4), "shadow", false, "enabled", true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%#v, want %#v", got, want)
	}
}

// freshRule copies every setting of a rule: a field added to limit.Rule
// must be added there too.
func TestFreshRuleCopiesEveryField(t *testing.T) {
	t.Parallel()
	r := &limit.Rule{Name: "n", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 3, Period: time.Second},
		Burst: 4, Cost: 2, Queue: time.Second, Align: limit.AlignFirst, Location: time.UTC, Shadow: true,
		Sliced: true, LeaseTTL: time.Minute}
	c := freshRule(r)
	rv, cv := reflect.ValueOf(r).Elem(), reflect.ValueOf(c).Elem()
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if rv.Field(i).IsZero() {
			t.Errorf("the test leaves %s zero: set it", f.Name)
		}
		if !reflect.DeepEqual(rv.Field(i).Interface(), cv.Field(i).Interface()) {
			t.Errorf("freshRule drops %s", f.Name)
		}
	}
}

// An override named protect pins a route's protection, or turns it off;
// protection takes rate and enabled only.
func TestAdjustProtect(t *testing.T) {
	p := &config.Protect{Min: 1, Max: 1000}
	n, err := AdjustProtect(p, Change{Rate: "30/10s"})
	if err != nil || n == nil || n.Pin != 3 || p.Pin != 0 {
		t.Fatalf("rate 30/10s: %+v, %v; want a copy pinned at 3/s", n, err)
	}
	off := false
	if n, err := AdjustProtect(p, Change{Enabled: &off}); n != nil || err != nil {
		t.Errorf("enabled false: %+v, %v; want nil", n, err)
	}
	on := true
	for _, c := range []Change{{Burst: 3}, {Limit: 3}, {Shadow: &on}, {Rate: "0/s"}, {Rate: "fast"}} {
		var e *Error
		if _, err := AdjustProtect(p, c); !errors.As(err, &e) {
			t.Errorf("%+v: %v, want an *Error", c, err)
		}
	}
}
