package core

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

func validRule(t testing.TB, r *limit.Rule) *limit.Rule {
	t.Helper()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMerge(t *testing.T) {
	t.Parallel()
	fixed := validRule(t, &limit.Rule{Name: "m:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Minute}})
	costly := validRule(t, fixed.WithCost(3))
	long := validRule(t, &limit.Rule{Name: "m:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Hour}})
	conc := validRule(t, &limit.Rule{Name: "m:conc", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 2}})
	req := &limit.Request{Lease: "l", Hits: 2, Limits: []limit.Limit{
		{Rule: fixed, Key: "a"},
		{Rule: conc, Key: "a"},
		{Rule: fixed, Key: "b"},
		{Rule: long, Key: "a"}, // another window: another counter
		{Rule: costly, Key: "a"},
		{Rule: conc, Key: "a"},
		{Rule: fixed, Key: "a"},
	}}
	m, err := Merge(req)
	if err != nil {
		t.Fatal(err)
	}
	if m == req || len(req.Limits) != 7 || req.Limits[0].Rule != fixed {
		t.Fatal("Merge changed the request it was given")
	}
	if m.Lease != "l" || m.Hits != 2 {
		t.Fatalf("merged request lost its lease or hits: %+v", m)
	}
	want := []struct {
		key  limit.Key
		rule *limit.Rule // nil: a copy of fixed
		cost int64
	}{{"a", nil, 5}, {"a", conc, 1}, {"b", fixed, 1}, {"a", long, 1}}
	if len(m.Limits) != len(want) {
		t.Fatalf("%d limits merged into %d, want %d", len(req.Limits), len(m.Limits), len(want))
	}
	for i, w := range want {
		l := m.Limits[i]
		if l.Key != w.key || w.rule != nil && l.Rule != w.rule || CostOf(l.Rule, 1) != w.cost {
			t.Fatalf("merged limit %d: %s %q cost %d, want key %q cost %d", i, l.Rule.Name, l.Key, CostOf(l.Rule, 1), w.key, w.cost)
		}
	}
	// The merged rule costs more than the count, which only a store may
	// see: it rejects, as a request of too many hits does.
	r := m.Limits[0].Rule
	if r == fixed || StateID(r) != StateID(fixed) || r.Validate() != nil || CostOf(r, 2) != 10 {
		t.Fatalf("merged rule %+v", r)
	}
	if d, _ := Check(r, new(Entry), 0, 1, ZoneAt(r, time.UnixMicro(0))); d.Allowed || d.Remaining != 3 || d.RetryAfter != time.Minute {
		t.Fatalf("a cost of 5 on a count of 3: %+v", d)
	}

	distinct := &limit.Request{Now: time.Unix(1e9, 0), Limits: []limit.Limit{{Rule: fixed, Key: "a"}, {Rule: fixed, Key: "b"}, {Rule: long, Key: "a"}}}
	if m, err := Merge(distinct); err != nil || m != distinct {
		t.Fatalf("Merge of distinct counters: %v, %v; want the request itself", m, err)
	}
	// Without a time, the request sent is a copy at the time of the call,
	// as Decide's is; the caller's stays as it was.
	undated := &limit.Request{Limits: distinct.Limits}
	if m, err := Merge(undated); err != nil || m == undated || m.Now.IsZero() || !undated.Now.IsZero() {
		t.Fatalf("Merge of a request without a time: %+v, %v", m, err)
	}
}

// TestMergeMany: past 16 limits, duplicates are found by a map.
func TestMergeMany(t *testing.T) {
	t.Parallel()
	r := validRule(t, &limit.Rule{Name: "m:many", Algorithm: limit.SlidingWindow, Rate: limit.Rate{Count: 10, Period: time.Second}})
	req := &limit.Request{Now: time.Unix(1e9, 0)}
	for i := range 20 {
		req.Limits = append(req.Limits, limit.Limit{Rule: r, Key: limit.Key(strconv.Itoa(i))})
	}
	if m, err := Merge(req); err != nil || m != req {
		t.Fatalf("20 distinct counters: %v, %v", m, err)
	}
	req.Limits = append(req.Limits, limit.Limit{Rule: r, Key: "7"})
	m, err := Merge(req)
	if err != nil || len(m.Limits) != 20 || CostOf(m.Limits[7].Rule, 1) != 2 {
		t.Fatalf("20 counters, one named twice: %v, %v", m, err)
	}
}

// TestMergeRefusesOtherSettings: rules on one counter may differ in their
// cost alone. Every other setting, including one that a later change to
// Rule adds, makes the request a mistake.
func TestMergeRefusesOtherSettings(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	base := func() *limit.Rule {
		return &limit.Rule{Name: "m:set", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 20}
	}
	v := reflect.ValueOf(base()).Elem()
	for i := range v.NumField() {
		field := v.Type().Field(i)
		if !field.IsExported() || field.Name == "Name" {
			continue
		}
		other := base()
		f := reflect.ValueOf(other).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Uint8:
			f.SetUint(f.Uint() + 1)
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Struct:
			f.Set(reflect.ValueOf(limit.Rate{Count: 7, Period: time.Minute}))
		case reflect.Pointer:
			f.Set(reflect.ValueOf(time.FixedZone("x", 3600)))
		default:
			t.Fatalf("field %s of kind %s: teach this test to change it", field.Name, f.Kind())
		}
		same := field.Name == "Cost"
		if got := sameSettings(base(), other, now); got != same {
			t.Errorf("rules that differ in %s: same settings %v, want %v", field.Name, got, same)
		}
	}

	a := validRule(t, base())
	b := validRule(t, &limit.Rule{Name: "m:set", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 30})
	if _, err := Merge(&limit.Request{Now: now, Limits: []limit.Limit{{Rule: a, Key: "k"}, {Rule: a, Key: "j"}, {Rule: b, Key: "k"}}}); err == nil {
		t.Fatal("bursts 20 and 30 on one counter were merged")
	}

	// A zone loaded twice is one zone.
	z1, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	z2, _ := time.LoadLocation("Asia/Shanghai")
	day := func(loc *time.Location) *limit.Rule {
		return validRule(t, &limit.Rule{Name: "m:day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: 24 * time.Hour}, Location: loc})
	}
	if _, err := Merge(&limit.Request{Now: now, Limits: []limit.Limit{{Rule: day(z1), Key: "k"}, {Rule: day(z2), Key: "k"}}}); err != nil {
		t.Fatalf("one zone loaded twice: %v", err)
	}
	if _, err := Merge(&limit.Request{Now: now, Limits: []limit.Limit{{Rule: day(z1), Key: "k"}, {Rule: day(nil), Key: "k"}}}); err == nil {
		t.Fatal("days of Shanghai and of UTC on one counter were merged")
	}
}

// TestDecideMerged: every limit gets the decision of its counter, with its
// own rule and key, in its place; a request without two limits on one
// counter goes to the store as it is, and costs no allocation.
func TestDecideMerged(t *testing.T) {
	fixed := validRule(t, &limit.Rule{Name: "m:fixed", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Minute}})
	twice := validRule(t, fixed.WithCost(2))
	other := validRule(t, &limit.Rule{Name: "m:other", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: time.Minute}})
	req := &limit.Request{Limits: []limit.Limit{{Rule: fixed, Key: "a"}, {Rule: other, Key: "a"}, {Rule: twice, Key: "a"}}}
	var got *limit.Request
	res, err := DecideMerged(req, func(m *limit.Request) (limit.Result, error) {
		got = m
		res := limit.Result{Allowed: true}
		for i, l := range m.Limits {
			res.Decisions = append(res.Decisions, limit.Decision{Rule: l.Rule, Key: l.Key, Allowed: true, Remaining: int64(10 * i)})
		}
		return res, nil
	})
	if err != nil || len(got.Limits) != 2 || len(res.Decisions) != 3 {
		t.Fatalf("decided %d limits, answered %d: %v", len(got.Limits), len(res.Decisions), err)
	}
	for i, want := range []int64{0, 10, 0} {
		if d := res.Decisions[i]; d.Rule != req.Limits[i].Rule || d.Key != req.Limits[i].Key || d.Remaining != want {
			t.Fatalf("decision %d: %+v, want the limit's own rule with remaining %d", i, d, want)
		}
	}

	distinct := &limit.Request{Now: time.Unix(1e9, 0), Limits: []limit.Limit{{Rule: fixed, Key: "a"}, {Rule: other, Key: "a"}, {Rule: fixed, Key: "b"}, {Rule: other, Key: "b"}}}
	answer := limit.Result{Allowed: true, Decisions: make([]limit.Decision, 4)}
	decide := func(m *limit.Request) (limit.Result, error) {
		if m != distinct {
			t.Fatal("a request of distinct counters was copied")
		}
		return answer, nil
	}
	if n := testing.AllocsPerRun(100, func() { DecideMerged(distinct, decide) }); n != 0 {
		t.Fatalf("%v allocations to decide distinct counters, want 0", n)
	}
}

// BenchmarkDecideMerged measures what DecideMerged adds to a store's
// decision of four limits: comparing them, and merging two that share a
// counter.
func BenchmarkDecideMerged(b *testing.B) {
	rules := make([]*limit.Rule, 4)
	for i := range rules {
		rules[i] = validRule(b, &limit.Rule{Name: "b:rule-" + strconv.Itoa(i), Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 100, Period: time.Second}})
	}
	answer := limit.Result{Allowed: true, Decisions: make([]limit.Decision, 4)}
	decide := func(*limit.Request) (limit.Result, error) { return answer, nil }
	for _, bc := range []struct {
		name string
		req  *limit.Request
	}{
		{"distinct", &limit.Request{Limits: []limit.Limit{{Rule: rules[0], Key: "global"}, {Rule: rules[1], Key: "route"}, {Rule: rules[2], Key: "user-42"}, {Rule: rules[3], Key: "10.0.0.1"}}}},
		{"twice", &limit.Request{Limits: []limit.Limit{{Rule: rules[0], Key: "global"}, {Rule: rules[1], Key: "route"}, {Rule: rules[2], Key: "user-42"}, {Rule: rules[2], Key: "user-42"}}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecideMerged(bc.req, decide); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
