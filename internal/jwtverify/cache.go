package jwtverify

import (
	"crypto/sha256"
	"math"
	"sync"
	"time"
)

// digest names a token in the cache: the SHA-256 of its text, so that a
// hit is the very token verified before and the cache does not keep the
// tokens themselves.
type digest [sha256.Size]byte

// cache remembers verified tokens until their exp, and failures for a few
// seconds, so that a flood of retries carrying one token costs one
// signature check rather than one per request. Each map is bounded; when
// one is full, an entry chosen at random (Go randomises where a map's
// iteration starts) makes room. A change of the key set empties both: a
// token signed by a key that is gone must stop verifying, and one whose
// key just arrived must not stay refused.
type cache struct {
	mu   sync.RWMutex
	gen  uint64 // the key set's generation; entries made under another are dropped
	good map[digest]goodEntry
	bad  map[digest]badEntry

	maxGood, maxBad int
}

type goodEntry struct {
	t     *Token
	until int64 // unix nanoseconds: exp plus the leeway
}

type badEntry struct {
	err   error
	until int64
}

// noExpiry is the until of a token without exp.
const noExpiry = math.MaxInt64

func newCache(maxGood, maxBad int) *cache {
	return &cache{
		good: make(map[digest]goodEntry), bad: make(map[digest]badEntry),
		maxGood: maxGood, maxBad: maxBad,
	}
}

// outcome is what Verify returns.
type outcome struct {
	t   *Token
	err error
}

// get returns the remembered outcome of the token of d, if it still holds
// at now, and the generation to put a new outcome under.
func (c *cache) get(d *digest, now time.Time) (o outcome, hit bool, gen uint64) {
	n := now.UnixNano()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, ok := c.good[*d]; ok && n < e.until {
		return outcome{t: e.t}, true, c.gen
	}
	if e, ok := c.bad[*d]; ok && n < e.until {
		return outcome{err: e.err}, true, c.gen
	}
	return outcome{}, false, c.gen
}

// putGood remembers a verified token until until (unix nanoseconds),
// unless the key set changed since gen: the keys it was verified with may
// be gone.
func (c *cache) putGood(d *digest, gen uint64, t *Token, until int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.good[*d]; !ok && len(c.good) >= c.maxGood {
		evictOne(c.good)
	}
	c.good[*d] = goodEntry{t: t, until: until}
	delete(c.bad, *d)
}

// putBad remembers a failure until until.
func (c *cache) putBad(d *digest, gen uint64, err error, until int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.bad[*d]; !ok && len(c.bad) >= c.maxBad {
		evictOne(c.bad)
	}
	c.bad[*d] = badEntry{err: err, until: until}
}

// reset forgets everything, for a new key set.
func (c *cache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.good = make(map[digest]goodEntry)
	c.bad = make(map[digest]badEntry)
}

// len is the number of remembered tokens and failures.
func (c *cache) len() (good, bad int) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.good), len(c.bad)
}

func evictOne[V any](m map[digest]V) {
	for k := range m {
		delete(m, k)
		return
	}
}
