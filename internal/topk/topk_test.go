package topk

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestHeavyKeysExactAndBound(t *testing.T) {
	s := New(16, time.Minute)
	truth := map[string]uint64{}
	for i := range 10000 {
		k := fmt.Sprint("u", i) // unique noise
		if i%4 == 0 {
			k = "heavy"
		} else if i%10 == 1 {
			k = "second"
		}
		truth[k]++
		s.AddString(t0, k)
	}
	top, _ := s.Top(t0, 16)
	if top[0].Key != "heavy" || top[1].Key != "second" {
		t.Fatalf("top = %+v", top[:2])
	}
	for _, e := range top {
		if tr := truth[e.Key]; tr > e.Count || e.Count-e.Error > tr {
			t.Errorf("%s: true %d outside [%d, %d]", e.Key, tr, e.Count-e.Error, e.Count)
		}
		if e.Error > 10000/16 {
			t.Errorf("%s: error %d above N/k", e.Key, e.Error)
		}
	}
}

func TestEpochsForget(t *testing.T) {
	s := New(8, 5*time.Minute)
	s.AddString(t0, "old")
	s.AddString(t0.Add(6*time.Minute), "new")
	if top, _ := s.Top(t0.Add(6*time.Minute), 10); len(top) != 2 {
		t.Fatalf("top = %+v", top)
	}
	if top, _ := s.Top(t0.Add(11*time.Minute), 10); len(top) != 1 || top[0].Key != "new" {
		t.Fatalf("top = %+v", top)
	}
	if top, _ := s.Top(t0.Add(time.Hour), 10); len(top) != 0 {
		t.Fatalf("top = %+v", top)
	}
}

func TestTruncated(t *testing.T) {
	s := New(8, time.Minute)
	s.AddString(t0, strings.Repeat("x", 1<<20))
	top, _ := s.Top(t0, 1)
	if len(top[0].Key) != MaxKey || !top[0].Truncated {
		t.Fatalf("len %d truncated %v", len(top[0].Key), top[0].Truncated)
	}
}

func TestConcurrent(t *testing.T) {
	s := New(32, time.Minute)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				s.AddString(t0, fmt.Sprint(g, "-", i%50))
				s.AddString(t0, "hot")
			}
		})
	}
	wg.Wait()
	top, _ := s.Top(t0, 1)
	if top[0].Key != "hot" || top[0].Count-top[0].Error > 16000 || top[0].Count < 16000 {
		t.Fatalf("top = %+v", top[0])
	}
}

func BenchmarkAddHit(b *testing.B) {
	s := New(DefaultSize, time.Minute)
	k := []byte("user-42")
	s.Add(t0, k)
	b.ReportAllocs()
	for b.Loop() {
		s.Add(t0, k)
	}
}

func BenchmarkAddMiss(b *testing.B) {
	s := New(DefaultSize, time.Minute)
	keys := make([][]byte, 4096)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user-%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Add(t0, keys[i%len(keys)])
		i++
	}
}

// A flood of ever new keys, far more bytes of them than an arena holds:
// the counts stay right, the keys read back as they were added, a Top
// read before more keys came stays what it was, and a new key costs no
// allocation but the arena's now and then.
func TestNewKeysReuseTheArena(t *testing.T) {
	s := New(64, time.Minute)
	var first []Entry
	for i := range 200_000 {
		s.AddString(t0, fmt.Sprintf("user-%07d", i))
		if i%5 == 0 {
			s.AddString(t0, "hot")
		}
		if i == 1000 {
			first, _ = s.Top(t0, 64)
		}
	}
	copied := make([]Entry, len(first))
	copy(copied, first)
	for i := range 100_000 {
		s.AddString(t0, fmt.Sprintf("later-%07d", i))
	}
	for i := range first {
		if first[i] != copied[i] {
			t.Fatalf("a Top read earlier changed: %+v, was %+v", first[i], copied[i])
		}
	}
	top, _ := s.Top(t0, 64)
	if top[0].Key != "hot" || top[0].Count < 40_000 {
		t.Errorf("top %+v, want hot, counted 40,000 times", top[0])
	}
	for _, e := range top[1:] {
		if !strings.HasPrefix(e.Key, "later-") && !strings.HasPrefix(e.Key, "user-") || len(e.Key) != len("later-0000000") && len(e.Key) != len("user-0000000") {
			t.Errorf("key %q is not one that was added", e.Key)
		}
	}

	key := make([]byte, 2, 16)
	copy(key, "k-")
	i := 0
	allocs := testing.AllocsPerRun(20_000, func() {
		i++
		s.Add(t0, strconv.AppendInt(key[:2], int64(i), 10))
	})
	if allocs > 0.05 {
		t.Errorf("%.3f allocations per new key, want at most an arena's now and then", allocs)
	}
}

// The heap stays a min-heap over the slots, and the index, the slots and
// the places agree, whatever the order of hits, new keys and evictions.
func TestTableStaysConsistent(t *testing.T) {
	s := New(16, time.Minute)
	rng := uint64(1)
	for n := range 20_000 {
		rng = rng*6364136223846793005 + 1442695040888963407
		// A few heavy keys and a long tail of new ones.
		k := fmt.Sprint("k", (rng>>33)%8)
		if rng>>60 > 9 {
			k = fmt.Sprint("tail", (rng>>20)%5000)
		}
		s.AddString(t0, k)
		tb := s.cur
		if len(tb.index) != len(tb.entries) || len(tb.heap) != len(tb.entries) || len(tb.pos) != len(tb.entries) {
			t.Fatalf("after %d: %d keys indexed, %d entries, heap %d, pos %d", n, len(tb.index), len(tb.entries), len(tb.heap), len(tb.pos))
		}
		for i, slot := range tb.heap {
			if int(tb.pos[slot]) != i {
				t.Fatalf("after %d: slot %d at %d, pos says %d", n, slot, i, tb.pos[slot])
			}
			if got := tb.index[tb.entries[slot].Key]; got != slot {
				t.Fatalf("after %d: key %q in slot %d, index says %d", n, tb.entries[slot].Key, slot, got)
			}
			if i > 0 && tb.count((i-1)/2) > tb.count(i) {
				t.Fatalf("after %d: heap out of order at %d", n, i)
			}
		}
	}
}
