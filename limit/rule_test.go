package limit

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRuleValidate(t *testing.T) {
	sec := Rate{Count: 10, Period: time.Second}
	for _, tc := range []struct {
		r    *Rule
		want string
	}{
		{&Rule{Name: "a", Algorithm: FixedWindow, Rate: Rate{0, time.Second}}, "count 0 must be positive"},
		{&Rule{Name: "a", Algorithm: FixedWindow, Rate: Rate{-3, time.Second}}, "count -3 must be positive"},
		{&Rule{Name: "a", Algorithm: FixedWindow, Rate: Rate{5, time.Microsecond}}, "shorter than 1ms"},
		{&Rule{Name: "a", Algorithm: TokenBucket, Rate: sec, Burst: 2, Cost: 3}, "burst 2 is smaller than the cost 3"},
		{&Rule{Name: "a", Algorithm: FixedWindow, Rate: sec, Cost: 11}, "cost 11 is larger than the count 10"},
		{&Rule{Name: "a", Algorithm: FixedWindow, Rate: sec, Cost: -1}, "cost -1 must be positive"},
		{&Rule{Name: "a", Algorithm: SlidingWindow, Rate: Rate{100_001, time.Second}}, "sliding_window count 100001 is above 100000"},
		{&Rule{Name: "a", Algorithm: FixedWindow, Rate: sec, Queue: time.Second}, "only a token_bucket may queue"},
		{&Rule{Name: "a", Algorithm: FixedWindow, Rate: sec, Burst: 5}, "only a token_bucket has a burst"},
		{&Rule{Name: "a", Algorithm: Concurrency}, "concurrency limit 0 must be in"},
		{&Rule{Name: "a", Algorithm: Algorithm(9), Rate: sec}, "unknown algorithm"},
		{&Rule{Name: "", Algorithm: FixedWindow, Rate: sec}, "rule name is empty"},
		{&Rule{Name: "a{b}", Algorithm: FixedWindow, Rate: sec}, "only a-z"},
	} {
		err := tc.r.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.r.Rate, err, tc.want)
		}
	}
	ok := &Rule{Name: "route:user", Algorithm: TokenBucket, Rate: Rate{100, time.Second}, Burst: 200, Queue: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.limit() != 200 || ok.Window() != 2*time.Second {
		t.Fatalf("Limit %d Window %v, want 200 and 2s", ok.limit(), ok.Window())
	}
}

func TestStateID(t *testing.T) {
	a := &Rule{Name: "r:l", Algorithm: FixedWindow, Rate: Rate{5, 10 * time.Second}}
	b := &Rule{Name: "r:l", Algorithm: FixedWindow, Rate: Rate{50, 10 * time.Second}}
	c := &Rule{Name: "r:l", Algorithm: FixedWindow, Rate: Rate{5, 20 * time.Second}}
	d := &Rule{Name: "r:l", Algorithm: FixedWindow, Rate: Rate{5, 10 * time.Second}, Align: AlignFirst}
	e := &Rule{Name: "r:l", Algorithm: SlidingWindow, Rate: Rate{5, 10 * time.Second}}
	if a.stateID() != b.stateID() {
		t.Error("a change of count changed the state id: counters would be lost on reload")
	}
	seen := map[string]bool{}
	for _, r := range []*Rule{a, c, d, e} {
		if seen[r.stateID()] {
			t.Errorf("state id %q reused across a change of window, alignment or algorithm", r.stateID())
		}
		seen[r.stateID()] = true
	}
}

// TestWithCost: the copy has every setting of the rule, but its cost, and
// none of its state; a setting added to Rule and not copied fails here.
func TestWithCost(t *testing.T) {
	r := &Rule{}
	v := reflect.ValueOf(r).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() {
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 2))
		case reflect.Uint8:
			f.SetUint(uint64(i + 2))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Struct:
			f.Set(reflect.ValueOf(Rate{Count: 7, Period: time.Minute}))
		case reflect.Pointer:
			f.Set(reflect.ValueOf(time.FixedZone("x", 3600)))
		default:
			t.Fatalf("field %s of kind %s: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	c := r.WithCost(99)
	cv := reflect.ValueOf(c).Elem()
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if !v.Type().Field(i).IsExported() {
			continue
		}
		got, want := cv.Field(i).Interface(), v.Field(i).Interface()
		if name == "Cost" {
			want = int64(99)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("WithCost: %s = %v, want %v", name, got, want)
		}
	}
}
