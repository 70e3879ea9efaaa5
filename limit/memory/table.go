package memory

import (
	"math/bits"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// table is one shard's state: its entries in a dense array of slots, and
// an open-addressed index of their hashes that finds them. A decision
// reads one word of the index and the slot it points to, which holds the
// entry itself: a Go map of pointers to entries would read its control
// word, its slot and then the entry, three places in memory rather than
// two, and hash the key a second time. Keys add no allocation either:
// the array grows by doubling.
//
// Positions in slots are stable while keys are only added; removing keys
// (remove, sweep) moves other entries, so a caller that holds positions
// across a removal must find its keys again.
type table struct {
	slots []slot
	// index has a power-of-two length, at least twice len(slots), so
	// that linear probing stays short. A word is 0 when free, else the
	// high 32 bits of the slot's hash (which no shard shares: the shard
	// is chosen by the low ones) and the slot's position plus one.
	index []uint64
	peak  int // the largest len(slots) since slots was last reallocated
	// swept is the latest time a decision was made at on a key a sweep
	// removed, µs (timeOf).
	swept int64
}

// slot is one key's state: the entry of rule scope sc for key, and the
// latest time a decision on it was made at, µs (lockTime).
type slot struct {
	hash  uint64
	scope *scope
	key   limit.Key
	last  int64
	e     core.Entry
}

// fibonacci spreads a hash over the index: the index position is the top
// bits of hash × 2⁶⁴/φ, which depend on every bit of the hash, so the low
// bits that chose the shard, the same for every key of the shard, do not
// bunch its keys together.
const fibonacci = 0x9e3779b97f4a7c15

// home is where h's probe sequence starts in the index.
func (t *table) home(h uint64) int {
	return int((h * fibonacci) >> (64 - bits.TrailingZeros(uint(len(t.index)))))
}

// find returns the position of the slot of sc and k, whose hash is h, or
// -1 when the table holds none.
func (t *table) find(h uint64, sc *scope, k limit.Key) int {
	if len(t.index) == 0 {
		return -1
	}
	m := len(t.index) - 1
	tag := h >> 32
	for i := t.home(h); ; i = (i + 1) & m {
		w := t.index[i]
		if w == 0 {
			return -1
		}
		if w>>32 == tag {
			p := int(uint32(w)) - 1
			if s := &t.slots[p]; s.hash == h && s.key == k && s.scope.same(sc) {
				return p
			}
		}
	}
}

// insert adds an empty entry for sc and k, which the table must not hold,
// and returns its position.
func (t *table) insert(h uint64, sc *scope, k limit.Key) int {
	if 2*(len(t.slots)+1) > len(t.index) {
		t.reindex(max(8, 2*len(t.index)))
	}
	p := len(t.slots)
	t.slots = append(t.slots, slot{hash: h, scope: sc, key: k})
	t.peak = max(t.peak, len(t.slots))
	t.place(h, p)
	return p
}

// place indexes the slot at p, whose hash is h.
func (t *table) place(h uint64, p int) {
	m := len(t.index) - 1
	i := t.home(h)
	for t.index[i] != 0 {
		i = (i + 1) & m
	}
	t.index[i] = h>>32<<32 | uint64(p+1)
}

// lookup returns the index position of the word that points to the slot
// at p.
func (t *table) lookup(p int) int {
	m := len(t.index) - 1
	w := t.slots[p].hash>>32<<32 | uint64(p+1)
	i := t.home(t.slots[p].hash)
	for t.index[i] != w {
		i = (i + 1) & m
	}
	return i
}

// remove deletes the slot at p. The last slot moves into its place.
func (t *table) remove(p int) {
	t.unindex(t.lookup(p))
	last := len(t.slots) - 1
	if p != last {
		i := t.lookup(last)
		t.slots[p] = t.slots[last]
		t.index[i] = t.index[i]>>32<<32 | uint64(p+1)
	}
	t.slots[last] = slot{} // the array must not keep the key's memory
	t.slots = t.slots[:last]
}

// unindex frees the index word at i, moving back the words after it that
// probing would otherwise no longer reach (linear probing's deletion,
// which leaves no tombstones).
func (t *table) unindex(i int) {
	m := len(t.index) - 1
	for {
		t.index[i] = 0
		j := i
		for {
			j = (j + 1) & m
			w := t.index[j]
			if w == 0 {
				return
			}
			// The word at j stays unless its probe starts at or before
			// the freed word i, cyclically: then it moves to i.
			h := t.home(t.slots[int(uint32(w))-1].hash)
			if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
				t.index[i] = w
				i = j
				break
			}
		}
	}
}

// reindex rebuilds the index with n words, a power of two.
func (t *table) reindex(n int) {
	if cap(t.index) >= n && len(t.index) == n {
		clear(t.index)
	} else {
		t.index = make([]uint64, n)
	}
	for p := range t.slots {
		t.place(t.slots[p].hash, p)
	}
}

// sweep removes the entries that have expired at now and returns how many
// it removed. Once the table has shrunk to a quarter of its peak, its
// survivors move to a new array and index of their size: a Go slice never
// gives back the memory beyond its length, so without this a burst of
// ten million keys would keep its slots for ever.
func (t *table) sweep(now int64) int {
	kept := 0
	for p := range t.slots {
		if !t.slots[p].e.Live(now) {
			t.swept = max(t.swept, t.slots[p].last)
			continue
		}
		if kept != p {
			t.slots[kept] = t.slots[p]
		}
		kept++
	}
	removed := len(t.slots) - kept
	clear(t.slots[kept:])
	t.slots = t.slots[:kept]
	switch {
	case t.peak > 64 && kept*4 <= t.peak:
		if kept == 0 {
			t.slots, t.index = nil, nil
		} else {
			t.slots = append(make([]slot, 0, kept), t.slots...)
			t.reindex(max(8, 1<<bits.Len(uint(2*kept-1))))
		}
		t.peak = kept
	case removed > 0:
		t.reindex(len(t.index))
	}
	return removed
}
