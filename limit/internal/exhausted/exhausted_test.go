package exhausted

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

func rule(t *testing.T, r *limit.Rule) *limit.Rule {
	t.Helper()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	ms  = int64(time.Millisecond)
	sec = int64(time.Second)
)

func TestRejectionIsRememberedUntilItsRetry(t *testing.T) {
	tb := New(0)
	r := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: 10 * time.Second}})
	k := limit.StringKey("u1")
	sent := 100 * ms
	tb.Note(tb.Gen(), Call{Sent: sent}, limit.Limit{Rule: r, Key: k}, 1, &limit.Decision{
		Rule: r, Key: k, Allowed: false, Limit: 5, Remaining: 0, ResetAfter: 4 * time.Second, RetryAfter: 4 * time.Second,
	})
	// 4 s less the margin: 1 ms and 4 ms.
	until := sent + 4*sec - 5*ms
	for _, tc := range []struct {
		now, need int64
		hit       bool
	}{
		{sent, 1, true},
		{until - 1, 1, true},
		{until, 1, false},
		{sent + 10*sec, 1, false},
		{sent, 3, true}, // needs more: rejected too
	} {
		d, _, ok := tb.Lookup(r, k, tc.need, tc.now)
		if ok != tc.hit {
			t.Errorf("Lookup at %v, need %d: %v, want %v", time.Duration(tc.now), tc.need, ok, tc.hit)
			continue
		}
		// RetryAfter is the store's, from the call's send; only the
		// entry ends early.
		if ok && (d.Allowed || !d.Local || d.Remaining != 0 || d.Limit != 5 || d.RetryAfter != time.Duration(sent+4*sec-tc.now) || d.ResetAfter < d.RetryAfter) {
			t.Errorf("Lookup at %v: %+v", time.Duration(tc.now), d)
		}
	}
	if _, _, ok := tb.Lookup(r, limit.StringKey("u2"), 1, sent); ok {
		t.Error("another key is rejected")
	}
}

func TestAdmissionThatLeftTooLittle(t *testing.T) {
	tb := New(0)
	r := rule(t, &limit.Rule{Name: "w", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: time.Minute}, Cost: 3})
	k := limit.StringKey("a")
	l := limit.Limit{Rule: r, Key: k}
	// 3 remain: the next request of 3 fits, nothing to remember.
	tb.Note(tb.Gen(), Call{Sent: 0}, l, 3, &limit.Decision{Allowed: true, Remaining: 3, ResetAfter: time.Minute})
	if tb.Len() != 0 {
		t.Fatalf("%d entries after an admission that left enough", tb.Len())
	}
	// 1 remains: a request of 2 or more is rejected until the window ends.
	tb.Note(tb.Gen(), Call{Sent: 0}, l, 3, &limit.Decision{Allowed: true, Remaining: 1, ResetAfter: time.Minute})
	if _, _, ok := tb.Lookup(r, k, 1, sec); ok {
		t.Error("a request of 1 is rejected with 1 remaining")
	}
	d, _, ok := tb.Lookup(r, k, 3, sec)
	if !ok || d.Remaining != 1 {
		t.Errorf("a request of 3 with 1 remaining: %v %+v", ok, d)
	}
}

func TestTokenBucketEndsWhenTheNextTokenIsDue(t *testing.T) {
	tb := New(0)
	// 10 tokens/s, burst 5: a bucket left empty by an admission is full
	// again in 500 ms, and has its next token 400 ms before that.
	r := rule(t, &limit.Rule{Name: "b", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 5})
	k := limit.StringKey("a")
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: k}, 1, &limit.Decision{Allowed: true, Remaining: 0, ResetAfter: 500 * time.Millisecond})
	due := 100 * ms
	d, _, ok := tb.Lookup(r, k, 1, 0)
	if !ok || d.RetryAfter != time.Duration(due) {
		t.Fatalf("empty bucket: %v, RetryAfter %v, want %v", ok, d.RetryAfter, time.Duration(due))
	}
	if _, _, ok := tb.Lookup(r, k, 1, due-2*ms); !ok {
		t.Fatal("the entry ended more than 2 ms before the token")
	}
	if _, _, ok := tb.Lookup(r, k, 1, due-ms); ok {
		t.Fatal("the entry lasts to within 1 ms of the token")
	}
	// With a queue of 60 ms, the next request is queued 60 ms sooner.
	q := rule(t, &limit.Rule{Name: "q", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 10, Period: time.Second}, Burst: 5, Queue: 60 * time.Millisecond})
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: q, Key: k}, 1, &limit.Decision{Allowed: true, Remaining: 0, ResetAfter: 500 * time.Millisecond})
	if _, _, ok := tb.Lookup(q, k, 1, 38*ms); !ok {
		t.Fatal("queued bucket: the entry ended before 38 ms")
	}
	if _, _, ok := tb.Lookup(q, k, 1, 40*ms); ok {
		t.Fatal("queued bucket: the entry lasts past 40 ms, when the queue would take the request")
	}
	// A rejection's RetryAfter is when its tokens are due.
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: limit.StringKey("c")}, 1, &limit.Decision{Allowed: false, Remaining: 0, ResetAfter: 450 * time.Millisecond, RetryAfter: 50 * time.Millisecond})
	if d, _, ok := tb.Lookup(r, limit.StringKey("c"), 1, 0); !ok || d.RetryAfter != 50*time.Millisecond {
		t.Fatalf("rejection: %v, RetryAfter %v", ok, d.RetryAfter)
	}
	if _, _, ok := tb.Lookup(r, limit.StringKey("c"), 1, 49*ms); ok {
		t.Fatal("rejection: the entry lasts to within 1 ms of its tokens")
	}
}

func TestNeverRemembered(t *testing.T) {
	tb := New(0)
	k := limit.StringKey("a")
	for _, r := range []*limit.Rule{
		rule(t, &limit.Rule{Name: "c", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 1}}),
		rule(t, &limit.Rule{Name: "s", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Minute}, Shadow: true}),
	} {
		tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: k}, 1, &limit.Decision{Allowed: false, RetryAfter: time.Minute, ResetAfter: time.Minute})
	}
	r := rule(t, &limit.Rule{Name: "f", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Minute}})
	for _, d := range []limit.Decision{
		{Undecided: true, Allowed: true},
		{Local: true, RetryAfter: time.Minute},
		{Allowed: false, RetryAfter: time.Millisecond, ResetAfter: time.Millisecond}, // ends within the margin
	} {
		tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: k}, 1, &d)
	}
	if tb.Len() != 0 {
		t.Fatalf("%d entries", tb.Len())
	}
}

// A rule whose rate, burst or window changed (a reload, an override) is
// not answered from what was noted under the old one.
func TestChangedRuleMisses(t *testing.T) {
	tb := New(0)
	k := limit.StringKey("a")
	old := rule(t, &limit.Rule{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Minute}, Burst: 2})
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: old, Key: k}, 1, &limit.Decision{Allowed: false, RetryAfter: time.Minute, ResetAfter: time.Minute})
	same := rule(t, &limit.Rule{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Minute}, Burst: 2})
	if _, _, ok := tb.Lookup(same, k, 1, 0); !ok {
		t.Error("an equal rule (a reload that changed nothing) misses")
	}
	for _, r := range []*limit.Rule{
		{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 2, Period: time.Minute}, Burst: 2},
		{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Minute}, Burst: 3},
		{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 2, Period: time.Minute}},
		{Name: "other", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Minute}, Burst: 2},
		{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Minute}, Burst: 2, Queue: time.Minute},
	} {
		if _, _, ok := tb.Lookup(rule(t, r), k, 1, 0); ok {
			t.Errorf("rule %+v is answered from an entry of %+v", r, old)
		}
	}
}

// A day window moved to another zone (a reload's tz) is another window.
func TestChangedZoneMisses(t *testing.T) {
	tb := New(0)
	k := limit.StringKey("a")
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	utc := rule(t, &limit.Rule{Name: "day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 24 * time.Hour}})
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: utc, Key: k}, 1, &limit.Decision{Allowed: false, RetryAfter: time.Hour, ResetAfter: time.Hour})
	moved := rule(t, &limit.Rule{Name: "day", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: 24 * time.Hour}, Location: tokyo})
	if _, _, ok := tb.Lookup(moved, k, 1, 0); ok {
		t.Error("a window in another zone is answered from an entry of UTC's")
	}
}

func TestForget(t *testing.T) {
	tb := New(0)
	r := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Minute}})
	no := &limit.Decision{Allowed: false, RetryAfter: time.Minute, ResetAfter: time.Minute}
	a, b := limit.StringKey("a"), limit.StringKey("b")
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: a}, 1, no)
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: b}, 1, no)

	// A call that was out when its key was reset may have read the
	// counter before the reset: its answer is dropped.
	gen := tb.Gen()
	tb.Forget("user", a)
	if _, _, ok := tb.Lookup(r, a, 1, 0); ok {
		t.Fatal("a forgotten key is still rejected")
	}
	if _, _, ok := tb.Lookup(r, b, 1, 0); !ok {
		t.Fatal("Forget dropped another key")
	}
	tb.Note(gen, Call{Sent: 0}, limit.Limit{Rule: r, Key: a}, 1, no)
	if _, _, ok := tb.Lookup(r, a, 1, 0); ok {
		t.Fatal("an answer from before the reset was kept")
	}
	tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: a}, 1, no)
	if _, _, ok := tb.Lookup(r, a, 1, 0); !ok {
		t.Fatal("an answer from after the reset was dropped")
	}
	tb.ForgetAll()
	if tb.Len() != 0 {
		t.Fatalf("%d entries after ForgetAll", tb.Len())
	}
}

// A flood of new keys cannot grow the table past its cap: expired
// entries, or the earliest to end, make room.
func TestBounded(t *testing.T) {
	const max = 640
	tb := New(max)
	r := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20_000 {
				k := limit.StringKey(strconv.Itoa(g) + "." + strconv.Itoa(i))
				tb.Note(tb.Gen(), Call{Sent: int64(i) * ms}, limit.Limit{Rule: r, Key: k}, 1, &limit.Decision{Allowed: false, RetryAfter: time.Duration(1+i%7) * time.Second, ResetAfter: time.Hour})
			}
		})
	}
	wg.Wait()
	n := 0
	for i := range tb.shards {
		n += len(tb.shards[i].m)
	}
	if n > max || tb.Len() != n {
		t.Fatalf("%d entries (Len %d), cap %d", n, tb.Len(), max)
	}
	if n < max/2 {
		t.Fatalf("%d entries: the cap of %d is not used", n, max)
	}
	// A full table still takes a new key: room is made for it.
	late := limit.StringKey("late")
	tb.Note(tb.Gen(), Call{Sent: 20 * sec}, limit.Limit{Rule: r, Key: late}, 1, &limit.Decision{Allowed: false, RetryAfter: time.Minute, ResetAfter: time.Hour})
	if _, _, ok := tb.Lookup(r, late, 1, 20*sec); !ok {
		t.Error("a new key is not remembered in a full table")
	}
	if tb.Len() > max {
		t.Errorf("%d entries after one more, cap %d", tb.Len(), max)
	}
}

func BenchmarkLookup(b *testing.B) {
	tb := New(0)
	r := &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}}
	if err := r.Validate(); err != nil {
		b.Fatal(err)
	}
	keys := make([]limit.Key, 100_000)
	for i := range keys {
		keys[i] = limit.StringKey(strconv.Itoa(i))
		tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: keys[i]}, 1, &limit.Decision{Allowed: false, RetryAfter: time.Hour, ResetAfter: time.Hour})
	}
	start := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if _, _, ok := tb.Lookup(r, keys[i%len(keys)], 1, int64(time.Since(start))); !ok {
				b.Fatal("miss")
			}
		}
	})
}

// The cap is the table's, not rounded up per shard.
func TestSmallCap(t *testing.T) {
	tb := New(10)
	r := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	for i := range 1000 {
		tb.Note(tb.Gen(), Call{Sent: 0}, limit.Limit{Rule: r, Key: limit.StringKey(strconv.Itoa(i))}, 1, &limit.Decision{Allowed: false, RetryAfter: time.Hour, ResetAfter: time.Hour})
	}
	if tb.Len() > 10 || tb.Len() == 0 {
		t.Fatalf("%d entries, cap 10", tb.Len())
	}
}
