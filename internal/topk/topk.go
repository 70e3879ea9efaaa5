// Package topk keeps the most frequent keys of a stream in bounded memory:
// the space-saving sketch (Metwally, Agrawal, El Abbadi, "Efficient
// computation of frequent and top-k elements in data streams", 2005), over
// two epochs so that what it answers is recent.
package topk

import (
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// MaxKey is the length a key is cut to, so that a huge header cannot
// bloat the sketch; a cut key is marked Truncated.
const MaxKey = 256

// DefaultSize is the number of keys a sketch counts per epoch.
const DefaultSize = 256

// Entry is one key's count: the true count is at most Count and at least
// Count-Error.
type Entry struct {
	Key       string
	Count     uint64
	Error     uint64
	Truncated bool
}

// table is one epoch's space-saving summary. An entry stays in its slot
// of entries for as long as it is counted; heap orders the slots as a
// min-heap by count, and pos is each slot's place in heap, so that
// moving an entry up or down the heap touches two small integers and
// not the index (a map keyed by the key, hashed once per Add).
//
// The keys' bytes live in arena, which is only appended to: a key is a
// string over its bytes, and a new key costs no allocation while the
// arena has room. A full arena is replaced by a new one holding the keys
// still counted, so that a stream of ever new keys (the usual flood:
// thousands of users over their limit, each one a new key once the
// table is full) allocates once per arenaMin bytes of keys or so, not
// once per key. An arena is never written over: the strings made from
// it stay what they were.
type table struct {
	index   map[string]int32 // key to slot
	entries []Entry
	heap    []int32 // slots, the least counted first
	pos     []int32 // slot to its place in heap
	arena   []byte
	live    int // bytes of the keys in entries
}

// arenaMin is the least room a new arena has.
const arenaMin = 4 << 10

func newTable(size int) *table {
	return &table{
		index:   make(map[string]int32, size),
		entries: make([]Entry, 0, size),
		heap:    make([]int32, 0, size),
		pos:     make([]int32, 0, size),
	}
}

func (t *table) reset() {
	clear(t.index)
	t.entries = t.entries[:0]
	t.heap = t.heap[:0]
	t.pos = t.pos[:0]
	// The next key starts a new arena: strings of this one may still
	// be held by whoever read them.
	t.arena, t.live = nil, 0
}

// keep copies key into the arena and returns it as a string.
func (t *table) keep(key []byte) string {
	if len(key) == 0 {
		return ""
	}
	if len(t.arena)+len(key) > cap(t.arena) {
		fresh := make([]byte, 0, max(arenaMin, 2*(t.live+len(key))))
		for i := range t.entries {
			k := t.entries[i].Key
			if k == "" {
				continue
			}
			off := len(fresh)
			fresh = append(fresh, k...)
			nk := unsafe.String(&fresh[off], len(k))
			t.entries[i].Key = nk
			t.index[nk] = int32(i) // the same key: the map keeps its slot, now over the new bytes
		}
		t.arena = fresh
	}
	off := len(t.arena)
	t.arena = append(t.arena, key...)
	t.live += len(key)
	return unsafe.String(&t.arena[off], len(key))
}

// count is the count of the entry at place i of the heap.
func (t *table) count(i int) uint64 { return t.entries[t.heap[i]].Count }

func (t *table) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.pos[t.heap[i]] = int32(i)
	t.pos[t.heap[j]] = int32(j)
}

func (t *table) down(i int) {
	n := len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.count(r) < t.count(l) {
			m = r
		}
		if t.count(m) >= t.count(i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

func (t *table) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.count(p) <= t.count(i) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

// bump counts the entry in slot once more.
func (t *table) bump(slot int32) {
	t.entries[slot].Count++
	t.down(int(t.pos[slot]))
}

// min is the smallest count of a full table, the most a key it lacks
// can have been seen; 0 when the table is not full.
func (t *table) min(size int) uint64 {
	if len(t.entries) < size {
		return 0
	}
	return t.count(0)
}

// Sketch counts keys. Its methods are safe for concurrent use.
type Sketch struct {
	mu    sync.Mutex
	size  int
	epoch time.Duration
	start time.Time // of the current epoch
	cur   *table
	prev  *table
}

// New returns a sketch of size keys per epoch (DefaultSize if size <= 0)
// that answers from the current and the previous epoch.
func New(size int, epoch time.Duration) *Sketch {
	if size <= 0 {
		size = DefaultSize
	}
	return &Sketch{size: size, epoch: epoch, cur: newTable(size), prev: newTable(size)}
}

func (s *Sketch) rotate(now time.Time) {
	if s.start.IsZero() {
		s.start = now
		return
	}
	switch d := now.Sub(s.start); {
	case d < s.epoch:
	case d < 2*s.epoch:
		s.prev.reset()
		s.prev, s.cur = s.cur, s.prev
		s.start = s.start.Add(s.epoch)
	default:
		s.prev.reset()
		s.cur.reset()
		s.start = now
	}
}

// Add counts key once at now. A key already counted costs no allocation.
func (s *Sketch) Add(now time.Time, key []byte) {
	truncated := len(key) > MaxKey
	if truncated {
		key = key[:MaxKey]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rotate(now)
	t := s.cur
	if slot, ok := t.index[string(key)]; ok {
		t.bump(slot)
		return
	}
	k := t.keep(key)
	if len(t.entries) < s.size {
		slot := int32(len(t.entries))
		t.entries = append(t.entries, Entry{Key: k, Count: 1, Truncated: truncated})
		t.index[k] = slot
		t.heap = append(t.heap, slot)
		t.pos = append(t.pos, int32(len(t.heap)-1))
		t.up(len(t.heap) - 1)
		return
	}
	// The least counted key makes way; the new one inherits its count.
	slot := t.heap[0]
	old := t.entries[slot]
	delete(t.index, old.Key)
	t.live -= len(old.Key)
	t.entries[slot] = Entry{Key: k, Count: old.Count + 1, Error: old.Count, Truncated: truncated}
	t.index[k] = slot
	t.down(0)
}

// AddString is Add of a string key.
func (s *Sketch) AddString(now time.Time, key string) {
	k := key
	if len(k) > MaxKey {
		k = k[:MaxKey]
	}
	s.mu.Lock()
	s.rotate(now)
	t := s.cur
	if slot, ok := t.index[k]; ok {
		t.bump(slot)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	// Read only: Add copies the key into the sketch.
	s.Add(now, unsafe.Slice(unsafe.StringData(key), len(key)))
}

// Top returns the n most counted keys of the current and previous epochs
// at now, most counted first, and the start of the time they cover.
func (s *Sketch) Top(now time.Time, n int) ([]Entry, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rotate(now)
	since := s.start
	if len(s.prev.entries) > 0 {
		since = s.start.Add(-s.epoch)
	}
	mc, mp := s.cur.min(s.size), s.prev.min(s.size)
	out := make([]Entry, 0, len(s.cur.entries)+len(s.prev.entries))
	for _, e := range s.cur.entries {
		if i, ok := s.prev.index[e.Key]; ok {
			p := s.prev.entries[i]
			e.Count += p.Count
			e.Error += p.Error
		} else {
			e.Count += mp
			e.Error += mp
		}
		out = append(out, e)
	}
	for _, e := range s.prev.entries {
		if _, ok := s.cur.index[e.Key]; ok {
			continue
		}
		e.Count += mc
		e.Error += mc
		out = append(out, e)
	}
	// The keys are the arenas' bytes; the caller keeps copies.
	for i := range out {
		out[i].Key = strings.Clone(out[i].Key)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out, since
}
