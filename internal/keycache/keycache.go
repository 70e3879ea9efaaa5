// Package keycache keeps the keys (limit.NewKey) that requests were
// limited by lately, so that a client whose requests come again and
// again, one that is being rejected most of all, costs no new key per
// request.
//
// A key is a function of its parts, and a cached one is returned only
// when it is the very key limit.NewKey would make of the parts asked for:
// the cache compares the parts with the key itself, byte by byte, and
// keeps no part, so that it holds on to no more than the keys it returns
// (a value may be a slice of a much longer string, a cookie header's).
package keycache

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"

	"github.com/floodgate-gw/floodgate/limit"
)

// A Cache is a table of sets of ways keys each, which starts small and
// grows, by four times, when a new key finds its set full, up to maxSlots
// keys; a full table replaces a key of the set at random. At its largest
// it takes 128 KiB, and the keys it holds.
const (
	ways     = 4
	minSlots = 64 * ways
	maxSlots = 4096 * ways
)

// Cache keeps recent keys. The zero value is not usable; a nil *Cache
// makes every key anew. It is safe for concurrent use.
type Cache struct {
	seed  maphash.Seed
	table atomic.Pointer[table]
}

type table struct {
	mask  uint64 // the number of sets, less one
	slots []atomic.Pointer[entry]
}

type entry struct {
	hash uint64
	key  limit.Key
}

// New returns an empty cache.
func New() *Cache { return &Cache{seed: maphash.MakeSeed()} }

// Key returns limit.NewKey(parts...): a key it made before for the same
// parts, or a new one, which it keeps.
func (c *Cache) Key(parts ...limit.Part) limit.Key {
	if c == nil {
		return limit.NewKey(parts...)
	}
	h := uint64(len(parts))
	for i := range parts {
		p := &parts[i]
		if len(p.Value) > limit.MaxPartBytes {
			// Its key holds a digest, which matches cannot check
			// without computing it: rare enough to make anew.
			return limit.NewKey(parts...)
		}
		v := maphash.String(c.seed, p.Value)
		if p.Fallback {
			v = ^v
		}
		h = bits.RotateLeft64(h, 23) ^ v
	}
	t := c.table.Load()
	if t != nil {
		set := t.set(h)
		for i := range set {
			if e := set[i].Load(); e != nil && e.hash == h && matches(string(e.key), parts) {
				return e.key
			}
		}
	}
	k := limit.NewKey(parts...)
	c.add(t, &entry{hash: h, key: k})
	return k
}

func (t *table) set(h uint64) []atomic.Pointer[entry] {
	i := (h & t.mask) * ways
	return t.slots[i : i+ways : i+ways]
}

// add puts e in t, the table as the caller found it: in a free way of its
// set, in a table four times as large when there is none, or in place of
// another key once the table is as large as it grows. Two requests that
// add at once may both grow the table, and a key added to a table being
// replaced may be lost: it is made again when it is next asked for.
func (c *Cache) add(t *table, e *entry) {
	for {
		if t == nil {
			t = newTable(minSlots)
			if !c.table.CompareAndSwap(nil, t) {
				t = c.table.Load()
			}
		}
		set := t.set(e.hash)
		for i := range set {
			if set[i].CompareAndSwap(nil, e) {
				return
			}
		}
		if len(t.slots) >= maxSlots {
			set[rand.Uint32()%ways].Store(e)
			return
		}
		bigger := newTable(len(t.slots) * ways)
		for i := range t.slots {
			if old := t.slots[i].Load(); old != nil {
				bigger.put(old)
			}
		}
		if c.table.CompareAndSwap(t, bigger) {
			t = bigger
		} else {
			t = c.table.Load()
		}
	}
}

func newTable(slots int) *table {
	return &table{mask: uint64(slots/ways - 1), slots: make([]atomic.Pointer[entry], slots)}
}

// put adds e to a table no other goroutine sees yet, if its set has room.
func (t *table) put(e *entry) {
	set := t.set(e.hash)
	for i := range set {
		if set[i].Load() == nil {
			set[i].Store(e)
			return
		}
	}
}

// matches reports whether k is limit.NewKey(parts...), for parts whose
// values are at most limit.MaxPartBytes long: the parts as Kind=Value
// pairs, joined by ':', "!" before the kind of a fallback part, and every
// byte outside [A-Za-z0-9-._/@+,] written as %XX.
func matches(k string, parts []limit.Part) bool {
	for i := range parts {
		p := &parts[i]
		if i > 0 {
			if k == "" || k[0] != ':' {
				return false
			}
			k = k[1:]
		}
		if p.Fallback {
			if k == "" || k[0] != '!' {
				return false
			}
			k = k[1:]
		}
		var ok bool
		if k, ok = cutEscaped(k, p.Kind); !ok {
			return false
		}
		if k == "" || k[0] != '=' {
			return false
		}
		if k, ok = cutEscaped(k[1:], p.Value); !ok {
			return false
		}
	}
	return k == ""
}

// cutEscaped returns what follows s, escaped, at the start of k.
func cutEscaped(k, s string) (string, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safe(c) {
			if k == "" || k[0] != c {
				return "", false
			}
			k = k[1:]
			continue
		}
		if len(k) < 3 || k[0] != '%' || k[1] != hexDigits[c>>4] || k[2] != hexDigits[c&15] {
			return "", false
		}
		k = k[3:]
	}
	return k, true
}

const hexDigits = "0123456789ABCDEF"

func safe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '/' || c == '@' || c == '+' || c == ','
}
