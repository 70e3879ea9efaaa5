package rls

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-gw/floodgate/internal/wantlines"
	"github.com/floodgate-gw/floodgate/limit"
)

// e builds a descriptor from key, value pairs.
func e(kv ...string) []Entry {
	es := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{kv[i], kv[i+1]})
	}
	return es
}

// want is what a descriptor should match: nil for no limit.
type want struct {
	count     uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	unlimited bool
	shadow    bool
	name      string
	replaces  []string
}

const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

func mustParse(t testing.TB, src string) *Rules {
	t.Helper()
	r, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\nsource:\n%s", err, wantlines.Numbered(src))
	}
	return r
}

func checkMatch(t *testing.T, r *Rules, domain string, entries []Entry, w *want) {
	t.Helper()
	got := r.Match(domain, entries)
	if w == nil {
		if got != nil {
			t.Errorf("Match(%s, %v) = %+v, want no limit", domain, entries, got)
		}
		return
	}
	if got == nil {
		t.Errorf("Match(%s, %v) = no limit, want %+v", domain, entries, *w)
		return
	}
	if got.RequestsPerUnit != w.count || got.Unit != w.unit || got.Unlimited != w.unlimited ||
		got.Shadow != w.shadow || got.Name != w.name || !slices.Equal(got.Replaces, w.replaces) {
		t.Errorf("Match(%s, %v) = %+v, want %+v", domain, entries, *got, *w)
	}
	if w.unlimited || w.count == 0 {
		// Nothing to count: unlimited, or a limit of 0 that rejects all.
		if got.Rule != nil {
			t.Errorf("Match(%s, %v): a Rule %+v for a limit with nothing to count", domain, entries, got.Rule)
		}
		return
	}
	checkRule(t, got)
}

// checkRule checks that a limit's Rule says what the limit says.
func checkRule(t *testing.T, l *Limit) {
	t.Helper()
	r := l.Rule
	if r == nil {
		t.Fatalf("limit %+v has no Rule", l)
	}
	if err := r.Validate(); err != nil {
		t.Errorf("Rule.Validate: %v", err)
	}
	periods := map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
		second: time.Second, minute: time.Minute, rlsv3.RateLimitResponse_RateLimit_HOUR: time.Hour, day: 24 * time.Hour,
		rlsv3.RateLimitResponse_RateLimit_WEEK:  7 * 24 * time.Hour,
		rlsv3.RateLimitResponse_RateLimit_MONTH: 30 * 24 * time.Hour,
		rlsv3.RateLimitResponse_RateLimit_YEAR:  365 * 24 * time.Hour,
	}
	if r.Algorithm != limit.FixedWindow || r.Align != limit.AlignEpoch || r.Location != nil ||
		r.Rate != (limit.Rate{Count: int64(l.RequestsPerUnit), Period: periods[l.Unit]}) || r.Shadow != l.Shadow {
		t.Errorf("Rule %+v does not match limit %+v", r, l)
	}
	if !nameRE.MatchString(r.Name) {
		t.Errorf("Rule name %q does not match %v", r.Name, nameRE)
	}
}

var nameRE = regexp.MustCompile(`^rls:[a-z0-9_.-]{1,40}:[0-9a-f]{16}$`)

// The examples of envoyproxy/ratelimit's README, with the descriptors it
// says they match.
func TestReadmeExamples(t *testing.T) {
	t.Parallel()
	type match struct {
		entries []Entry
		want    *want
	}
	tests := []struct {
		name, domain, src string
		matches           []match
	}{
		{"example 1: values", "mongo_cps", `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`, []match{
			{e("database", "users"), &want{count: 500, unit: second}},
			{e("database", "default"), &want{count: 500, unit: second}},
			{e("database", "other"), nil},
			{e("database", ""), nil},
			{e("Database", "users"), nil}, // case-sensitive keys
			{e("database", "Users"), nil}, // and values
			{e("database", "users", "table", "t"), nil},
			{nil, nil},
		}},
		{"example 2: nested descriptors and a key without value", "messaging", `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`, []match{
			{e("message_type", "marketing", "to_number", "2061111111"), &want{count: 5, unit: day}},
			{e("message_type", "marketing", "to_number", "2062222222"), &want{count: 5, unit: day}},
			{e("to_number", "2061111111"), &want{count: 100, unit: day}},
			{e("to_number", ""), &want{count: 100, unit: day}},
			// Shorter than the rules: message_type has no limit of its own.
			{e("message_type", "marketing"), nil},
			{e("message_type", "transactional", "to_number", "2061111111"), nil},
			// Deeper than the rules.
			{e("message_type", "marketing", "to_number", "1", "x", "y"), nil},
			{e("to_number", "1", "message_type", "marketing"), nil},
		}},
		{"example 3: exact value before key alone", "edge_proxy_per_ip", `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Blocked: requests_per_unit 0 rejects every request.
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`, []match{
			{e("remote_address", "50.0.0.1"), &want{count: 10, unit: second}},
			{e("remote_address", "50.0.0.5"), &want{count: 0, unit: second}},
		}},
		{"example 4: depth must match (1)", "example4", `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`, []match{
			{e("key", "value", "subkey", "subvalue"), nil},
			{e("key", "value"), &want{count: 300, unit: second}},
		}},
		{"example 4: depth must match (2)", "example4", `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`, []match{
			{e("key", "value", "subkey", "subvalue"), &want{count: 300, unit: second}},
			{e("key", "value"), nil},
		}},
		{"example 5: unlimited", "internal", `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`, []match{
			{e("ldap", "x"), &want{unlimited: true}},
			{e("azure", "y"), &want{count: 100, unit: minute}},
		}},
		{"example 6: shadow_mode", "example6", `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`, []match{
			{e("service", "auth-service", "user", "user-a"), &want{count: 10, unit: second, shadow: true}},
			{e("service", "auth-service", "user", "user-b"), &want{count: 20, unit: second}},
			{e("service", "auth-service", "user", "user-c"), nil},
			{e("service", "auth-service"), nil},
		}},
		{"example 7: replaces", "example7", `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`, []match{
			{e("key_1", "value_1", "user", "bkthomps"), &want{count: 5, unit: second, name: "specific_limit"}},
			{e("key_2", "value_2", "user", "bkthomps"), &want{count: 10, unit: second, replaces: []string{"specific_limit"}}},
		}},
		{"example 8: detailed_metric", "example8", `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, []match{
			{e("key1", "unspecified_value"), &want{count: 10, unit: minute}},
			{e("key1", "value1"), &want{count: 20, unit: minute}},
		}},
		{"example 9: value prefix wildcard", "example9", `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`, []match{
			{e("key1", "value_1"), &want{count: 20, unit: minute}},
			{e("key1", "value_2"), &want{count: 20, unit: minute}},
			{e("key1", "value"), &want{count: 20, unit: minute}},
			{e("key1", "valu"), nil},
			{e("key1", "other"), nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, tt.src)
			if got := r.Domains(); !slices.Equal(got, []string{tt.domain}) {
				t.Errorf("Domains() = %q, want [%q]", got, tt.domain)
			}
			for _, m := range tt.matches {
				checkMatch(t, r, tt.domain, m.entries, m.want)
			}
			checkMatch(t, r, tt.domain+"-other", tt.matches[0].entries, nil)
		})
	}
}

func TestMatchPrecedence(t *testing.T) {
	t.Parallel()
	r := mustParse(t, `
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1
    rate_limit: {unit: second, requests_per_unit: 3}
  # Wildcards are tried in file order, as envoyproxy/ratelimit does: this
  # longer prefix is never reached by a value /api matches.
  - key: path
    value: /api/v2*
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: /api*x
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: any
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 6}
  - key: any
    rate_limit: {unit: second, requests_per_unit: 7}
  # Unlimited in floodgate's own place, beside the descriptor's key.
  - key: internal
    unlimited: true
    shadow_mode: true
  - key: tenant
    descriptors:
      - key: path
        value: /a*
        descriptors:
          - key: method
            value: GET
            rate_limit: {unit: Minute, requests_per_unit: 8}
      - key: path
        rate_limit: {unit: MINUTE, requests_per_unit: 9}
`)
	tests := []struct {
		entries []Entry
		want    *want
	}{
		{e("path", "/api/v1"), &want{count: 3, unit: second}},   // exact
		{e("path", "/api/v2/x"), &want{count: 2, unit: second}}, // first matching wildcard
		{e("path", "/apix"), &want{count: 2, unit: second}},
		{e("path", "/other"), &want{count: 1, unit: second}}, // key alone
		{e("path", ""), &want{count: 1, unit: second}},
		{e("path", "/api*x"), &want{count: 5, unit: second}}, // the value as written matches it exactly, before any wildcard
		{e("any", "x"), &want{count: 6, unit: second}},       // "*" before the key alone
		{e("any", ""), &want{count: 6, unit: second}},
		{e("internal", "x"), &want{unlimited: true, shadow: true}},
		{e("tenant", "t1", "path", "/abc", "method", "GET"), &want{count: 8, unit: minute}},
		{e("tenant", "t1", "path", "/abc", "method", "POST"), nil},
		{e("tenant", "t1", "path", "/abc"), nil}, // the wildcard node has no limit
		{e("tenant", "t1", "path", "/b"), &want{count: 9, unit: minute}},
		{e("tenant", "t1", "path", "/b", "method", "GET"), nil},
		{e("tenant", "t1"), nil},
		{e("nothing", "x"), nil},
	}
	for _, tt := range tests {
		checkMatch(t, r, "d", tt.entries, tt.want)
	}
	var nilRules *Rules
	if nilRules.Match("d", e("path", "x")) != nil || (&Rules{}).Match("d", e("path", "x")) != nil {
		t.Error("nil or zero Rules matched")
	}
	if nilRules.Domains() != nil || (&Rules{}).Domains() != nil {
		t.Error("nil or zero Rules have domains")
	}
}

// A '*' anywhere in a rule value stands for any run of bytes, none
// included.
func TestWildcardValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		match   []string
		miss    []string
	}{
		{"foo*", []string{"foo", "foo1", "foo*", "foofoo"}, []string{"fo", "xfoo", ""}},
		{"*", []string{"", "x", "*", "anything at all"}, nil},
		{"*bar", []string{"bar", "foobar", "barbar"}, []string{"barx", "ba", ""}},
		{"foo*bar*baz", []string{"foobarbaz", "foo1bar2baz", "foobarbarbaz", "foo-baz-bar-baz", "foobazbarbaz"},
			[]string{"foobaz", "foobar", "foobarba", "fobarbaz", "foo1bar2baz3", "foobazbar"}},
		{"a*a", []string{"aa", "aba", "aaa"}, []string{"a", "ab", "ba"}},
		{"**", []string{"", "x"}, nil},
		{"a**b", []string{"ab", "axb"}, []string{"a", "b", "ba"}},
		{"/api/*/users/*", []string{"/api/v1/users/7", "/api//users/", "/api/v1/users/7/x"}, []string{"/api/v1/user/7", "/api/users/"}},
	}
	for _, tt := range tests {
		r := mustParse(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    value: %q\n    rate_limit: {unit: second, requests_per_unit: 3}\n", tt.pattern))
		for _, v := range tt.match {
			if r.Match("d", e("k", v)) == nil {
				t.Errorf("%q does not match %q, want a match", v, tt.pattern)
			}
		}
		for _, v := range tt.miss {
			if l := r.Match("d", e("k", v)); l != nil {
				t.Errorf("%q matches %q, want none", v, tt.pattern)
			}
		}
	}
}

// Several rules that match one entry: the exact value first, then the
// wildcards in file order, wherever their '*' is, then the key alone; at
// every level of nesting.
func TestWildcardPrecedence(t *testing.T) {
	t.Parallel()
	r := mustParse(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: foo*baz
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: foo*bar*baz
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: foobarbaz
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: k
    value: "*bar*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: outer
    value: "*-prod"
    descriptors:
      - key: path
        value: /v*/items/*
        rate_limit: {unit: minute, requests_per_unit: 6}
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 7}
`)
	tests := []struct {
		entries []Entry
		want    *want
	}{
		{e("k", "foobarbaz"), &want{count: 4, unit: second}},   // exact
		{e("k", "foo1bar2baz"), &want{count: 2, unit: second}}, // foo*baz comes first in the file
		{e("k", "foobaz"), &want{count: 2, unit: second}},
		{e("k", "xbarx"), &want{count: 5, unit: second}},
		{e("k", "other"), &want{count: 1, unit: second}}, // key alone
		{e("outer", "eu-prod", "path", "/v2/items/9"), &want{count: 6, unit: minute}},
		{e("outer", "eu-prod", "path", "/v2/things/9"), &want{count: 7, unit: minute}},
		{e("outer", "eu-dev", "path", "/v2/items/9"), nil},
		{e("outer", "eu-prod"), nil},
	}
	for _, tt := range tests {
		checkMatch(t, r, "d", tt.entries, tt.want)
	}
}

func TestUnits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		unit   string
		want   rlsv3.RateLimitResponse_RateLimit_Unit
		period time.Duration
	}{
		{"second", second, time.Second},
		{"Minute", minute, time.Minute},
		{"HOUR", rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
		{"day", day, 24 * time.Hour},
		// envoyproxy/ratelimit's UnitToDivider: fixed lengths, windows
		// counted from the epoch.
		{"week", rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
		{"month", rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
		{"year", rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
	}
	for _, tt := range tests {
		r := mustParse(t, fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: 7}\n", tt.unit))
		l := r.Match("d", e("k", "v"))
		if l == nil || l.Unit != tt.want || l.Rule.Rate.Period != tt.period || l.Rule.Window() != tt.period {
			t.Errorf("unit %s: got %+v, want %v and a period of %v", tt.unit, l, tt.want, tt.period)
			continue
		}
		checkRule(t, l)
	}
}

// Rule names keep counters across a reload that changes a rate, and keep
// different descriptors' counters apart.
func TestRuleNames(t *testing.T) {
	t.Parallel()
	const src = `
domain: Mongo CPS/%s
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: database
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: database
    value: x*
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: database
    value: users*
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: database_users
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: a
    value: b
    descriptors:
      - key: database
        value: users
        rate_limit: {unit: second, requests_per_unit: %d}
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: database
            value: users
            rate_limit: {unit: second, requests_per_unit: %d}
`
	probes := [][]Entry{
		e("database", "users"), e("database", "xy"), e("database", ""), e("database", "users2"),
		e("database_users", "x"), e("a", "b", "database", "users"), e("a", "c", "b", "x", "database", "users"),
	}
	parse := func(domain string, n int) []*Limit {
		src := fmt.Sprintf(src, domain, n, n, n, n, n, n, n)
		r := mustParse(t, src)
		var ls []*Limit
		for _, p := range probes {
			l := r.Match("Mongo CPS/"+domain, p)
			if l == nil {
				t.Fatalf("%v matched nothing", p)
			}
			if l.RequestsPerUnit != uint32(n) {
				t.Fatalf("%v matched %+v, want requests_per_unit %d", p, l, n)
			}
			checkRule(t, l)
			ls = append(ls, l)
		}
		return ls
	}
	first, again, otherDomain := parse("x", 10), parse("x", 20), parse("y", 10)
	seen := map[string]int{}
	for i := range probes {
		name := first[i].Rule.Name
		if again[i].Rule.Name != name {
			t.Errorf("%v: name %q after a change of rate, was %q", probes[i], again[i].Rule.Name, name)
		}
		if j, dup := seen[name]; dup {
			t.Errorf("%v and %v share the name %q", probes[j], probes[i], name)
		}
		seen[name] = i
		if otherDomain[i].Rule.Name == name {
			t.Errorf("%v: the same name %q in two domains", probes[i], name)
		}
		if !strings.HasPrefix(name, "rls:mongo_cps_x:") {
			t.Errorf("name %q does not start with the folded domain", name)
		}
	}

	long := strings.Repeat("Ab.-_~", 20)
	r := mustParse(t, "domain: "+long+"\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]")
	l := r.Match(long, e("k", "v"))
	checkRule(t, l)
	if want := "rls:" + strings.Repeat("ab.-__", 7)[:40] + ":"; !strings.HasPrefix(l.Rule.Name, want) {
		t.Errorf("name %q, want it to start with %q", l.Rule.Name, want)
	}
}

// checkErrors parses src and checks that it fails with exactly the errors
// its "#want: TEXT" comments name (wantlines.Check), each in test.yaml.
func checkErrors(t *testing.T, src string) {
	t.Helper()
	r, err := Parse("test.yaml", []byte(src))
	if err == nil {
		t.Fatalf("Parse succeeded (%v), want errors", r.Domains())
	}
	if r != nil {
		t.Errorf("Parse returned Rules with an error")
	}
	var got []wantlines.Problem
	for _, e := range unjoin(err) {
		rest, ok := strings.CutPrefix(e, "test.yaml:")
		ln, msg, _ := strings.Cut(rest, ": ")
		line, lerr := strconv.Atoi(ln)
		if !ok || lerr != nil {
			t.Errorf("error %q is not test.yaml:LINE: message", e)
			continue
		}
		got = append(got, wantlines.Problem{Line: line, Msg: msg})
	}
	wantlines.Check(t, src, got, err)
}

// unjoin returns the messages of an errors.Join.
func unjoin(err error) []string {
	var msgs []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			msgs = append(msgs, e.Error())
		}
		return msgs
	}
	return []string{err.Error()}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, src string }{
		{"missing domain", `
descriptors: #want: domain is missing
  - key: k
`},
		{"empty domain", `
domain: "" #want: domain: empty domain
descriptors: []
`},
		{"descriptor without key", `
domain: d
descriptors:
  - value: v #want: descriptors[0]: key is missing
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: "" #want: descriptors[1]: key is missing
  - key: k
    descriptors:
      - rate_limit: {unit: second, requests_per_unit: 1} #want: descriptors[2].descriptors[0]: key is missing
`},
		{"requests_per_unit missing, negative or out of range", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second} #want: descriptors[0].rate_limit: requests_per_unit is missing
  - key: c
    rate_limit: {unit: second, requests_per_unit: -3} #want: descriptors[1].rate_limit.requests_per_unit: -3 is negative
  - key: d
    rate_limit: {unit: second, requests_per_unit: 1000000001} #want: 1000000001 is above the maximum 1000000000
  - key: e
    rate_limit: {unit: second, requests_per_unit: 1.5} #want: want a whole number, got "1.5"
  - key: f
    rate_limit: {unit: second, requests_per_unit: "10"} #want: want a whole number, got "10"
`},
		{"units", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 1} #want: descriptors[0].rate_limit.unit: unknown unit "fortnight" (second, minute, hour, day, week, month, year)
  - key: b
    rate_limit: {unit: unknown, requests_per_unit: 1} #want: unknown unit "unknown"
  - key: c
    rate_limit: {requests_per_unit: 1} #want: descriptors[2].rate_limit: unit is missing
  - key: d
    rate_limit: {} #want: unit is missing | requests_per_unit is missing
  - key: e
    rate_limit: {unit: [second], requests_per_unit: 1} #want: descriptors[4].rate_limit.unit: want a string, got a list
`},
		{"unlimited with a rate", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    unlimited: true #want: descriptors[0].unlimited: unlimited: true and a rate_limit (line 5)
  - key: b
    rate_limit:
      unlimited: true
      unit: second #want: descriptors[1].rate_limit.unit: unit with unlimited: true (line 9)
      requests_per_unit: 5 #want: requests_per_unit with unlimited: true
  - key: c
    unlimited: false
    rate_limit: {unit: second, requests_per_unit: 1}
`},
		{"repeated siblings", `
domain: d
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: database #want: descriptors[1]: key "database" value "users" repeated (first at line 4)
    value: users
  - key: database
  - key: database #want: descriptors[3]: key "database" without a value repeated (first at line 9)
  - key: database
    value: Users
  - key: x
    descriptors:
      - key: y
        value: "*"
      - key: y #want: descriptors[5].descriptors[1]: key "y" value "*" repeated (first at line 15)
        value: "*"
  - key: y # the same key at another level is another descriptor
    value: "*"
`},
		{"unknown keys at every level", `
domain: d
domian: d #want: unknown key "domian" (did you mean "domain"?)
descriptors:
  - key: a
    rate_limits: {unit: second, requests_per_unit: 1} #want: descriptors[0]: unknown key "rate_limits" (did you mean "rate_limit"?)
  - key: b
    name: b #want: descriptors[1]: unknown key "name"
    rate_limit:
      unit: second
      requests_per_unit: 1
      shadow_mode: true #want: descriptors[1].rate_limit: unknown key "shadow_mode"
      replaces:
        - name: n
          reason: x #want: descriptors[1].rate_limit.replaces[0]: unknown key "reason"
  - key: n
    rate_limit: {unit: second, requests_per_unit: 1, name: n}
`},
		{"share_threshold without a wildcard value", `
domain: d
descriptors:
  - key: files
    value: files/a.pdf
    share_threshold: true #want: descriptors[0].share_threshold: share_threshold needs a wildcard value (with '*'), whose values then share one counter; the value "files/a.pdf" matches itself only
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: files
    share_threshold: true #want: a descriptor without a value counts each value apart
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: org
    descriptors:
      - key: user
        value: u1
        share_threshold: yes #want: descriptors[2].descriptors[0].share_threshold: share_threshold needs a wildcard value
  - key: files
    value: files/*
    share_threshold: false
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: shared
    value: a*b
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: typo
    value: x*
    share_threshold: sure #want: descriptors[5].share_threshold: want true or false, got "sure"
`},
		{"quota_mode loads with any key envoyproxy/ratelimit loads it with", `
domain: d
descriptors:
  - key: a
    unlimited: true
    quota_mode: true
  - key: b
    rate_limit: {unlimited: true}
    quota_mode: true
  - key: c
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: d
    rate_limit:
      unit: hour
      requests_per_unit: 1
      quota_mode: true #want: descriptors[3].rate_limit: unknown key "quota_mode"
  - key: e
    quota_mode: true
    shadow_mode: false
    rate_limit: {unit: hour, requests_per_unit: 1}
`},
		{"value_to_metric, detailed_metric and metadata in the wrong place or shape", `
domain: d
value_to_metric: true #want: unknown key "value_to_metric"
descriptors:
  - key: a
    rate_limit:
      unit: hour
      requests_per_unit: 1
      value_to_metric: true #want: descriptors[0].rate_limit: unknown key "value_to_metric"
      detailed_metric: true #want: descriptors[0].rate_limit: unknown key "detailed_metric"
  - key: b
    values_to_metric: true #want: descriptors[1]: unknown key "values_to_metric" (did you mean "value_to_metric"?)
  - key: c
    value_to_metric: 1 #want: descriptors[2].value_to_metric: want true or false, got "1"
  - key: d
    metadata: [a, b] #want: descriptors[3].metadata: want a mapping, got a list
  - key: e
    metadata: plain #want: descriptors[4].metadata: want a mapping, got "plain"
  - key: f
    metadata: {nested: {deep: [1, 2]}, flag: true}
    metadata_: x #want: descriptors[5]: unknown key "metadata_" (did you mean "metadata"?)
`},
		{"repeated keys", `
domain: d
domain: e #want: key "domain" repeated (first at line 2)
descriptors:
  - key: a
    key: b #want: descriptors[0]: key "key" repeated (first at line 5)
`},
		{"wrong types", `
domain: d
descriptors:
  - key: [a] #want: descriptors[0].key: want a string, got a list
  - key: b
    shadow_mode: maybe #want: descriptors[1].shadow_mode: want true or false, got "maybe"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: c
    rate_limit: 5 #want: descriptors[2].rate_limit: want a mapping
  - key: d
    descriptors: {key: e} #want: descriptors[3].descriptors: want a list of descriptors, got a mapping
  - just a string #want: descriptors[4]: want a descriptor
`},
		{"top level not a list of descriptors", `
domain: d
descriptors:
  key: a #want: descriptors: want a list of descriptors, got a mapping
`},
		{"replaces", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: a
      replaces:
        - {} #want: descriptors[0].rate_limit.replaces[0]: a replaces entry needs the name
        - name: "" #want: descriptors[0].rate_limit.replaces[1]: a replaces entry needs the name
        - name: nowhere # no limit of the domain has that name: no effect
  - key: b
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: b
      replaces: [{name: b}] #want: descriptors[1].rate_limit.replaces: replaces "b": a limit cannot replace itself
  - key: c
    replaces: [{name: a}] #want: descriptors[2].replaces: replaces needs a limit on the same descriptor
  - key: e
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces: [{name: a}]
    replaces: [{name: a}] #want: descriptors[3].replaces: replaces is given here and in rate_limit (line 22)
  - key: f
    unlimited: true
    replaces: [{name: a}, {name: b}]
  - key: g
    replaces: x #want: descriptors[5].replaces: want a list of {name: LIMIT_NAME}, got "x" | replaces needs a limit
`},
		{"not YAML", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second #want: invalid YAML
`},
		{"tabs", "domain: d\ndescriptors:\n\t- key: a #want: invalid YAML\n"},
		{"not a mapping", `
- domain: d #want: want a mapping (domain, descriptors), got a list
`},
		{"two documents", `
domain: d
--- #want: a rule file holds one YAML document
domain: e
`},
		{"an alias to itself", `
domain: d
descriptors: &all
  - key: a
    descriptors: *all #want: descriptors[0].descriptors: alias *all refers to itself
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.src) })
	}
}

// A problem found after decoding is at the line of the value's key, also
// when the value is written on the lines below it; and a value of the
// wrong kind is reported even where another problem of its descriptor is.
func TestErrorLines(t *testing.T) {
	t.Parallel()
	checkErrors(t, `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: #want: descriptors[0].rate_limit.unit: unknown unit "fortnight"
        fortnight
      requests_per_unit: 1
  - key: c
    replaces: #want: descriptors[1].replaces: replaces needs a limit
      - name: a
  - key: e
    rate_limit: 5 #want: descriptors[2].rate_limit: want a mapping
    unlimited: true #want: descriptors[2].unlimited: unlimited: true and a rate_limit (line 13)
  - key: f
    rate_limit: {unit: second, unit: minute} #want: descriptors[3].rate_limit: key "unit" repeated | requests_per_unit is missing
`)
}

// What envoyproxy/ratelimit accepts and ignores loads here too, with no
// effect: shadow_mode on a descriptor without a limit (it applies to the
// descriptor's own limit, not to nested ones), and replaces naming a limit
// the domain does not have.
func TestNoEffect(t *testing.T) {
	t.Parallel()
	r := mustParse(t, `
domain: d
descriptors:
  - key: service
    shadow_mode: true
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: other
    shadow_mode: false
  - key: vip
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces: [{name: nowhere}]
  - key: internal
    unlimited: true
    replaces: [{name: nowhere}]
`)
	checkMatch(t, r, "d", e("service", "s"), nil)
	checkMatch(t, r, "d", e("service", "s", "user", "u"), &want{count: 1, unit: second})
	checkMatch(t, r, "d", e("other", "o"), nil)
	checkMatch(t, r, "d", e("vip", "v"), &want{count: 5, unit: second, replaces: []string{"nowhere"}})
	checkMatch(t, r, "d", e("internal", "i"), &want{unlimited: true, replaces: []string{"nowhere"}})
}

func TestEmptyFile(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "\n\n", "# only a comment\n", "---\n", "~\n"} {
		_, err := Parse("rules.yaml", []byte(src))
		if err == nil || !strings.HasPrefix(err.Error(), "rules.yaml:1: empty") || len(unjoin(err)) != 1 {
			t.Errorf("Parse(%q) = %v, want rules.yaml:1: empty", src, err)
		}
	}
}

// Aliases and merge keys are YAML, which envoyproxy/ratelimit's parser
// reads too; a rule file may use them to share a rate_limit.
func TestAliases(t *testing.T) {
	t.Parallel()
	r := mustParse(t, `
domain: d
descriptors:
  - key: a
    rate_limit: &rl {unit: second, requests_per_unit: 5}
  - key: b
    rate_limit: *rl
  - &c
    key: c
    rate_limit:
      <<: *rl
      requests_per_unit: 6
  - <<: *c
    value: v
`)
	checkMatch(t, r, "d", e("a", "x"), &want{count: 5, unit: second})
	checkMatch(t, r, "d", e("b", "x"), &want{count: 5, unit: second})
	checkMatch(t, r, "d", e("c", "x"), &want{count: 6, unit: second})
	checkMatch(t, r, "d", e("c", "v"), &want{count: 6, unit: second})
	if r.Match("d", e("a", "x")).Rule == r.Match("d", e("b", "x")).Rule {
		t.Error("two descriptors share a Rule through an alias")
	}
	if r.Match("d", e("c", "x")).Rule.Name == r.Match("d", e("c", "v")).Rule.Name {
		t.Error("a descriptor merged into another shares its name")
	}

	// A billion laughs is refused, not expanded.
	var b strings.Builder
	b.WriteString("domain: d\nx0: &a0 [{key: k}]\n")
	for i := 1; i < 30; i++ {
		fmt.Fprintf(&b, "x%d: &a%d [*a%d, *a%d]\n", i, i, i-1, i-1)
	}
	b.WriteString("descriptors: *a29\n")
	if _, err := Parse("laughs.yaml", []byte(b.String())); err == nil {
		t.Error("a billion laughs parsed")
	}
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, src := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func rule(domain, key string, n int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit: {unit: second, requests_per_unit: %d}\n", domain, key, n)
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a.yaml":           rule("alpha", "k", 1),
		"b.yml":            rule("beta", "k", 2),
		"c.txt":            "not: [yaml",
		"d.yaml.bak":       "not: [yaml",
		".hidden.yaml":     "not: [yaml",
		"sub/e.yaml":       rule("gamma", "k", 3),
		"dir.yaml/f.yaml":  rule("delta", "k", 4),
		"target/real.data": rule("linked", "k", 5),
	})
	// A Kubernetes ConfigMap mount: the files are symlinks.
	if err := os.Symlink(filepath.Join(dir, "target/real.data"), filepath.Join(dir, "z.yaml")); err != nil {
		t.Fatal(err)
	}
	r, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Domains(), []string{"alpha", "beta", "linked"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %q, want %q", got, want)
	}
	checkMatch(t, r, "alpha", e("k", "v"), &want{count: 1, unit: second})
	checkMatch(t, r, "beta", e("k", "v"), &want{count: 2, unit: second})
	checkMatch(t, r, "linked", e("k", "v"), &want{count: 5, unit: second})
	checkMatch(t, r, "gamma", e("k", "v"), nil)

	empty, err := LoadDir(t.TempDir())
	if err != nil || empty == nil || len(empty.Domains()) != 0 || empty.Match("alpha", e("k", "v")) != nil {
		t.Errorf("LoadDir(empty dir) = %v, %v; want empty Rules", empty, err)
	}

	missing := filepath.Join(dir, "missing")
	if r, err := LoadDir(missing); err == nil || r != nil || !strings.HasPrefix(err.Error(), missing+": cannot read:") {
		t.Errorf("LoadDir(missing dir) = %v, %v", r, err)
	}
}

func TestLoadDirErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"1.yaml": rule("shared", "k", 1),
		"2.yaml": "# the same domain again\n" + rule("shared", "k", 2),
		"3.yml":  "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
		"4.yaml": "",
		"5.yaml": "domain: fine\n",
	})
	r, err := LoadDir(dir)
	if err == nil || r != nil {
		t.Fatalf("LoadDir = %v, %v; want errors", r, err)
	}
	want := []string{
		filepath.Join(dir, "2.yaml") + `:2: domain "shared" is already defined in ` + filepath.Join(dir, "1.yaml"),
		filepath.Join(dir, "3.yml") + ":4: descriptors[0].rate_limit.requests_per_unit: -1 is negative",
		filepath.Join(dir, "4.yaml") + ":1: empty",
	}
	got := unjoin(err)
	if len(got) != len(want) {
		t.Fatalf("errors:\n%v\nwant %d", err, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want it to start with %q", i, got[i], want[i])
		}
	}
}

func TestMatchConcurrentAndAllocationFree(t *testing.T) {
	r := mustParse(t, `
domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: path
        value: /v*/items/*/x
        rate_limit: {unit: second, requests_per_unit: 50}
      - key: path
        value: /api*
        rate_limit: {unit: second, requests_per_unit: 100}
      - key: path
        rate_limit: {unit: second, requests_per_unit: 10}
`)
	probe := e("tenant", "t1", "path", "/api/x")
	inner := e("tenant", "t1", "path", "/v1/items/7/x")
	if l := r.Match("d", inner); l == nil || l.RequestsPerUnit != 50 {
		t.Fatalf("Match(%v) = %+v, want the limit of 50", inner, l)
	}
	if n := testing.AllocsPerRun(100, func() { r.Match("d", inner) }); n != 0 {
		t.Errorf("Match of a wildcard with a '*' inside allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { r.Match("d", probe) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				entries := e("tenant", fmt.Sprint(i), "path", fmt.Sprintf("/api/%d", j))
				if l := r.Match("d", entries); l == nil || l.RequestsPerUnit != 100 || l.Rule.Validate() != nil {
					t.Errorf("Match(%v) = %+v", entries, l)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkMatch(b *testing.B) {
	r := mustParse(b, `
domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: tenant
    descriptors:
      - key: path
        value: /api/v1
        rate_limit: {unit: second, requests_per_unit: 100}
      - key: path
        value: /api*
        rate_limit: {unit: second, requests_per_unit: 100}
`)
	probes := [][]Entry{e("remote_address", "10.0.0.1"), e("tenant", "t", "path", "/api/v2/users")}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r.Match("d", probes[i%2]) == nil {
			b.Fatal("no match")
		}
	}
}

// A wildcard matches what the regular expression of its parts joined by
// ".*" matches, the whole value.
func FuzzWildcard(f *testing.F) {
	for _, s := range [][2]string{{"foo*bar*baz", "foo1bar2baz"}, {"a*a", "a"}, {"*", ""}, {"**x*", "xx"}, {"a*ba*b", "abab"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if !strings.Contains(pattern, "*") {
			return
		}
		parts := strings.Split(pattern, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re, err := regexp.Compile(`^(?s:` + strings.Join(parts, ".*") + `)$`)
		if err != nil || !utf8.ValidString(pattern) || !utf8.ValidString(value) {
			return // the reference works on UTF-8 only
		}
		if got, want := newWildcard(pattern, nil).match(value), re.MatchString(value); got != want {
			t.Errorf("%q matching %q = %v, want %v", pattern, value, got, want)
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(rule("d", "k", 5)), "k", "v")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a*\n    descriptors:\n      - key: j\n        rate_limit: {unit: day, requests_per_unit: 1}\n"), "k", "ab")
	f.Add([]byte("domain: &d d\ndescriptors: [{key: *d, rate_limit: {unlimited: true}}]"), "d", "")
	f.Add([]byte(shareRules), "org", "acme-a-b")
	f.Fuzz(func(t *testing.T, data []byte, key, value string) {
		r, err := Parse("fuzz.yaml", data)
		if err != nil {
			if r != nil {
				t.Fatal("Rules with an error")
			}
			for _, msg := range unjoin(err) {
				if !strings.HasPrefix(msg, "fuzz.yaml:") {
					t.Fatalf("error %q does not name the file", msg)
				}
			}
			return
		}
		for _, d := range r.Domains() {
			for _, entries := range [][]Entry{{{key, value}}, {{key, value}, {key, value}}} {
				l := r.Match(d, entries)
				switch {
				case l == nil:
				case l.Unlimited || l.RequestsPerUnit == 0:
					// Nothing to count: unlimited, or a limit of 0
					// that rejects every request.
					if l.Rule != nil {
						t.Fatalf("a Rule %+v for a limit with nothing to count", l.Rule)
					}
				case l.Rule == nil:
					t.Fatalf("limit %+v has no Rule", l)
				default:
					if err := l.Rule.Validate(); err != nil {
						t.Fatalf("matched an invalid rule: %v", err)
					}
				}
			}
		}
	})
}

func ExampleRules_Match() {
	rules, err := Parse("messaging.yaml", []byte(`
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range [][]Entry{
		{{"message_type", "marketing"}, {"to_number", "2061111111"}},
		{{"to_number", "2061111111"}},
		{{"message_type", "marketing"}},
	} {
		if l := rules.Match("messaging", d); l != nil {
			fmt.Println(d, "→", l.RequestsPerUnit, "per", l.Unit, "as", l.Rule.Rate)
		} else {
			fmt.Println(d, "→ no limit")
		}
	}
	// Output:
	// [{message_type marketing} {to_number 2061111111}] → 5 per DAY as 5/d
	// [{to_number 2061111111}] → 100 per DAY as 100/d
	// [{message_type marketing}] → no limit
}

func ExampleParse_errors() {
	_, err := Parse("rules.yaml", []byte(`
domain: mongo_cps
descriptors:
  - key: database
    rate_limits: {unit: second, requests_per_unit: 500}
  - key: collection
    rate_limit: {unit: fortnight, requests_per_unit: -1}
`))
	fmt.Println(err)
	// Output:
	// rules.yaml:5: descriptors[0]: unknown key "rate_limits" (did you mean "rate_limit"?)
	// rules.yaml:7: descriptors[1].rate_limit.unit: unknown unit "fortnight" (second, minute, hour, day, week, month, year)
	// rules.yaml:7: descriptors[1].rate_limit.requests_per_unit: -1 is negative
}
