package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// A key is decided at the latest time that key was decided at, not at the
// latest time of its shard: on a store of one shard, where every key
// shares it, a clock set back is the time of the keys not yet decided
// later, through both paths (one limit, several), while a key that was
// decided later keeps its own time.
func TestKeyTimeIsTheKeys(t *testing.T) {
	t.Parallel()
	s := memory.New(memory.Options{Shards: 1, SweepEvery: -1})
	defer s.Close()
	day := &limit.Rule{Name: "t:day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 3, Period: 24 * time.Hour}}
	ctx := context.Background()
	decide := func(at time.Time, keys ...limit.Key) limit.Result {
		t.Helper()
		var ls []limit.Limit
		for _, k := range keys {
			ls = append(ls, limit.Limit{Rule: day, Key: k})
		}
		res, err := s.Decide(ctx, &limit.Request{Limits: ls, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	later := time.Date(2030, 11, 4, 0, 0, 0, 1e6, time.UTC)
	earlier := time.Date(2030, 3, 10, 6, 30, 0, 1e6, time.UTC)
	decide(later, "a")
	for _, tc := range []struct {
		what string
		keys []limit.Key
		at   time.Time
	}{
		{"a new key", []limit.Key{"b"}, earlier},
		{"a key decided at the earlier time", []limit.Key{"b"}, earlier},
		{"two keys decided at the earlier time", []limit.Key{"b", "c"}, earlier},
		{"a key decided later", []limit.Key{"a"}, later},
		{"a key decided later, with one that was not", []limit.Key{"b", "a"}, later},
		{"that one, alone", []limit.Key{"b"}, later},
	} {
		res := decide(earlier, tc.keys...)
		if !res.Time.Equal(tc.at) {
			t.Fatalf("%s: decided at %v, want %v", tc.what, res.Time, tc.at)
		}
		want := 24*time.Hour - tc.at.Sub(tc.at.Truncate(24*time.Hour))
		for i, d := range res.Decisions {
			if d.ResetAfter != want {
				t.Fatalf("%s: limit %d: ResetAfter %v, want %v", tc.what, i, d.ResetAfter, want)
			}
		}
	}
}

// A key's time must not go back when a sweep removes it: a request stamped
// before the key's last decision (as on_error: local's are, by the failed
// store call) that arrives after a sweep must not reopen a window the key
// has left.
func TestKeyTimeSurvivesSweep(t *testing.T) {
	s := memory.New(memory.Options{Shards: 1, SweepEvery: -1})
	defer s.Close()
	minute := &limit.Rule{Name: "t:min", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Minute}}
	ctx := context.Background()
	at := func(sec int) time.Time {
		return time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(sec) * time.Second)
	}
	decide := func(sec int, keys ...limit.Key) limit.Result {
		t.Helper()
		var ls []limit.Limit
		for _, k := range keys {
			ls = append(ls, limit.Limit{Rule: minute, Key: k})
		}
		res, err := s.Decide(ctx, &limit.Request{Limits: ls, Now: at(sec)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	admitted := 0
	if decide(30, "a").Allowed { // 12:00:30, window 12:00
		admitted++
	}
	decide(61, "b")                               // 12:01:01: b's one for window 12:01
	if res := decide(62, "a", "b"); res.Allowed { // rejected by b; a is decided at 12:01:02
		t.Fatal("a and b at 12:01:02 allowed")
	}
	s.Sweep(at(65))        // a's window ended at 12:01:00: a is removed
	res := decide(40, "a") // a late request stamped 12:00:40
	t.Logf("the late request: decided at %v, allowed %v", res.Time.Format("15:04:05"), res.Allowed)
	if res.Time.Before(at(62)) {
		t.Errorf("a decided at %v after it was decided at 12:01:02", res.Time.Format("15:04:05"))
	}
	if res.Allowed {
		admitted++
	}
	if decide(70, "a").Allowed { // 12:01:10
		admitted++
	}
	if admitted > 2 {
		t.Errorf("%d admitted over windows 12:00 and 12:01, limit 1 each", admitted)
	}
}
