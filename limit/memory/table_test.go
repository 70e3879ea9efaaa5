package memory

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/floodgate-gw/floodgate/limit"
)

// check fails t unless the index holds exactly one word per slot, each
// reachable from its home without crossing a free word, at most half full.
func (tb *table) check(t *testing.T) {
	t.Helper()
	if len(tb.slots) > 0 && 2*len(tb.slots) > len(tb.index) {
		t.Fatalf("%d slots in an index of %d", len(tb.slots), len(tb.index))
	}
	words := 0
	for i, w := range tb.index {
		if w == 0 {
			continue
		}
		words++
		p := int(uint32(w)) - 1
		if p >= len(tb.slots) || w>>32 != tb.slots[p].hash>>32 {
			t.Fatalf("index word %d (%#x) names no slot of its hash", i, w)
		}
		for j := tb.home(tb.slots[p].hash); j != i; j = (j + 1) & (len(tb.index) - 1) {
			if tb.index[j] == 0 {
				t.Fatalf("slot %d is indexed at %d, past a free word at %d from its home", p, i, j)
			}
		}
	}
	if words != len(tb.slots) {
		t.Fatalf("%d index words for %d slots", words, len(tb.slots))
	}
	for p := len(tb.slots); p < cap(tb.slots); p++ {
		if s := tb.slots[:cap(tb.slots)][p]; s.scope != nil || s.key != "" {
			t.Fatalf("slot %d beyond the length still holds %q", p, s.key)
		}
	}
}

// TestTable holds the table to a map through random adds, removals and
// sweeps, with hashes chosen to collide: few homes and few tags, so
// probes run long, wrap around the index and pass words of other keys.
func TestTable(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	scopes := []*scope{{name: "a:fw.1000e"}, {name: "b:fw.1000e"}}
	type id struct {
		sc  int
		key limit.Key
	}
	hashOf := func(k id) uint64 {
		n, _ := strconv.Atoi(string(k.key))
		// 3 tags, and homes from the low bits the multiplication mixes.
		return uint64(n%3)<<32 | uint64(n*7+k.sc)
	}
	var tb table
	model := map[id]int64{} // Expires
	for step := range 20_000 {
		k := id{rng.IntN(2), limit.Key(strconv.Itoa(rng.IntN(300)))}
		h := hashOf(k)
		p := tb.find(h, scopes[k.sc], k.key)
		exp, ok := model[k]
		if ok != (p >= 0) || ok && tb.slots[p].e.Expires != exp {
			t.Fatalf("step %d: find %v = %d, model has %v (expires %d)", step, k, p, ok, exp)
		}
		switch op := rng.IntN(10); {
		case op < 6 && !ok:
			p = tb.insert(h, scopes[k.sc], k.key)
			exp = rng.Int64N(1000) + 1
			tb.slots[p].e.Expires = exp
			model[k] = exp
		case op < 9 && ok:
			tb.remove(p)
			delete(model, k)
		case op == 9:
			now := rng.Int64N(1000)
			n := 0
			for k, exp := range model {
				if exp <= now {
					delete(model, k)
					n++
				}
			}
			if got := tb.sweep(now); got != n {
				t.Fatalf("step %d: sweep removed %d, want %d", step, got, n)
			}
		}
		tb.check(t)
		if len(tb.slots) != len(model) {
			t.Fatalf("step %d: %d slots, model holds %d", step, len(tb.slots), len(model))
		}
	}
	// A copy of a rule (another *scope of the same name) finds the same
	// slot; a rule of another name does not, whatever the hash.
	tb = table{}
	p := tb.insert(42, scopes[0], "k")
	if got := tb.find(42, &scope{name: scopes[0].name}, "k"); got != p {
		t.Fatalf("the same scope by name: %d, want %d", got, p)
	}
	if got := tb.find(42, scopes[1], "k"); got != -1 {
		t.Fatalf("another scope of the same hash: %d, want -1", got)
	}
}

// TestTableShrinks: once a sweep leaves a quarter of the peak, the slots
// and the index are reallocated at the survivors' size.
func TestTableShrinks(t *testing.T) {
	t.Parallel()
	var tb table
	sc := &scope{name: "a"}
	for i := range 1000 {
		p := tb.insert(rand.Uint64(), sc, limit.Key(strconv.Itoa(i)))
		tb.slots[p].e.Expires = 1
		if i < 10 {
			tb.slots[p].e.Expires = 100
		}
	}
	if n := tb.sweep(50); n != 990 {
		t.Fatalf("swept %d, want 990", n)
	}
	tb.check(t)
	if cap(tb.slots) != 10 || len(tb.index) != 32 || tb.peak != 10 {
		t.Fatalf("after the sweep: cap %d, index %d, peak %d; want 10, 32, 10", cap(tb.slots), len(tb.index), tb.peak)
	}
	tb = table{}
	for i := range 1000 {
		p := tb.insert(rand.Uint64(), sc, limit.Key(strconv.Itoa(i)))
		tb.slots[p].e.Expires = 1
	}
	if tb.sweep(1); tb.slots != nil || tb.index != nil {
		t.Fatalf("an empty table keeps %d slots, %d index words", cap(tb.slots), len(tb.index))
	}
}

// TestShardSize: the layout the shard's comment promises.
func TestShardSize(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(shard{}); n != 128 {
		t.Fatalf("a shard is %d bytes, want 128", n)
	}
	if n := unsafe.Offsetof(shard{}.t) + unsafe.Offsetof(table{}.peak); n > 64 {
		t.Fatalf("a decision's fields end at %d, past the first cache line", n)
	}
}
