package keycache

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate-gw/floodgate/limit"
)

// randomParts makes parts of every shape a key meets: safe and unsafe
// bytes, empty and long values, fallback parts.
func randomParts(r *rand.Rand) []limit.Part {
	const alphabet = "aZ09-._/@+,:=!%#{} \x00\xff"
	str := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	ps := make([]limit.Part, 1+r.IntN(3))
	for i := range ps {
		ps[i] = limit.Part{Kind: str(r.IntN(4)), Value: str(r.IntN(6)), Fallback: r.IntN(3) == 0}
		if r.IntN(20) == 0 {
			ps[i].Value = str(limit.MaxPartBytes - 1 + r.IntN(3))
		}
	}
	return ps
}

func TestMatchesIsNewKey(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		a, b := randomParts(r), randomParts(r)
		long := false
		for _, p := range append(a[:len(a):len(a)], b...) {
			long = long || len(p.Value) > limit.MaxPartBytes
		}
		if long {
			continue
		}
		ka, kb := string(limit.NewKey(a...)), string(limit.NewKey(b...))
		if !matches(ka, a) {
			t.Fatalf("matches(NewKey(%+v), %+v) = false", a, a)
		}
		if got := matches(ka, b); got != (ka == kb) {
			t.Fatalf("matches(NewKey(%+v), %+v) = %v, and the keys are %q and %q", a, b, got, ka, kb)
		}
	}
}

func TestKey(t *testing.T) {
	c := New()
	r := rand.New(rand.NewPCG(3, 4))
	var seen [][]limit.Part
	for range 20000 {
		ps := randomParts(r)
		if len(seen) > 0 && r.IntN(2) == 0 {
			ps = seen[r.IntN(len(seen))]
		} else {
			seen = append(seen, ps)
		}
		if got, want := c.Key(ps...), limit.NewKey(ps...); got != want {
			t.Fatalf("Key(%+v) = %q, want %q", ps, got, want)
		}
	}
	var nilCache *Cache
	if got, want := nilCache.Key(limit.Part{Kind: "k", Value: "v"}), limit.NewKey(limit.Part{Kind: "k", Value: "v"}); got != want {
		t.Fatalf("a nil cache's Key = %q, want %q", got, want)
	}
}

// A key asked for again costs nothing, also once the table is full.
func TestKeyAgainAllocatesNothing(t *testing.T) {
	c := New()
	for i := range 3 * maxSlots {
		c.Key(limit.Part{Kind: "header:x-user-id", Value: fmt.Sprint(i)})
	}
	if n := len(c.table.Load().slots); n != maxSlots {
		t.Fatalf("the table has %d slots, want %d", n, maxSlots)
	}
	ps := []limit.Part{{Kind: "header:x-user-id", Value: "alice"}, {Kind: "ip", Value: "192.0.2.1", Fallback: true}}
	c.Key(ps...)
	if n := testing.AllocsPerRun(100, func() { c.Key(ps...) }); n != 0 {
		t.Fatalf("Key of a cached key made %v allocations", n)
	}
}

// A table that grows keeps the keys it held: a few hundred keys, which
// never fill a set of the largest table.
func TestGrowKeeps(t *testing.T) {
	c := New()
	const n = 300
	for i := range n {
		c.Key(limit.Part{Kind: "k", Value: fmt.Sprint(i)})
	}
	held := 0
	slots := c.table.Load().slots
	for i := range slots {
		if slots[i].Load() != nil {
			held++
		}
	}
	if held != n || len(c.table.Load().slots) == minSlots {
		t.Fatalf("a table of %d slots holds %d keys of %d", len(c.table.Load().slots), held, n)
	}
}

func TestConcurrent(t *testing.T) {
	c := New()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20000 {
				v := fmt.Sprint((i * (g + 1)) % 5000)
				p := limit.Part{Kind: "k", Value: v}
				if got, want := c.Key(p), limit.NewKey(p); got != want {
					t.Errorf("Key(%q) = %q, want %q", v, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkKey(b *testing.B) {
	c := New()
	ps := make([][]limit.Part, 2000)
	for i := range ps {
		ps[i] = []limit.Part{{Kind: "header:x-user-id", Value: fmt.Sprint(i)}}
		c.Key(ps[i]...)
	}
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			c.Key(ps[i%len(ps)]...)
			i++
		}
	})
	b.Run("NewKey", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			limit.NewKey(ps[i%len(ps)]...)
			i++
		}
	})
}
