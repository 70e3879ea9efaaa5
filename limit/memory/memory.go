package memory

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// MaxKeys caps the keys held at once. A decision that would add a key
	// beyond it fails with limit.ErrFull. Zero means 1,000,000.
	MaxKeys int

	// Shards is the number of independently locked maps; rounded up to a
	// power of two. Zero means 256.
	Shards int

	// SweepEvery is how often expired state is removed in the background.
	// Zero means one second; a negative value disables the background
	// sweep (call Sweep yourself).
	SweepEvery time.Duration

	// Now is the clock the background sweep uses. Nil means time.Now. It
	// must agree with the Request.Now the store is given, or the sweep
	// removes state early or late.
	Now func() time.Time
}

// Store is the embedded, single-instance store. Its zero value is not
// usable; call New.
type Store struct {
	shards []shard
	mask   uint64
	seed   maphash.Seed
	live   atomic.Int64
	// lastFull is when a full store last swept itself, µs.
	lastFull atomic.Int64
	max      atomic.Int64
	now      func() time.Time

	stop chan struct{}
	done sync.WaitGroup
	once sync.Once
}

type shard struct {
	mu   sync.Mutex
	m    map[mapKey]*limit.Entry
	peak int   // the largest len(m) since the map was last rebuilt
	last int64 // the latest time a decision on this shard was made at, µs
	_    [32]byte
}

// mapKey avoids building a string per decision: the rule's scope is
// derived once per rule (see scopeOf), the key is the caller's.
type mapKey struct {
	scope string
	key   limit.Key
}

var _ limit.Store = (*Store)(nil)

// New returns a store and starts its background sweep.
func New(o Options) *Store {
	if o.MaxKeys <= 0 {
		o.MaxKeys = 1_000_000
	}
	n := 256
	if o.Shards > 0 {
		n = 1
		for n < o.Shards {
			n <<= 1
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		seed:   maphash.MakeSeed(),
		now:    o.Now,
		stop:   make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[mapKey]*limit.Entry)
	}
	s.max.Store(int64(o.MaxKeys))
	every := o.SweepEvery
	if every == 0 {
		every = time.Second
	}
	if every > 0 {
		s.done.Add(1)
		go s.sweepLoop(every)
	}
	return s
}

// scope is the rule's name and state shape: rules that share it share
// counters, as limit.StoredKey does for the Redis store. Its hash is
// computed once per rule, so a decision hashes only the caller's key.
type scope struct {
	name string
	hash uint64
}

func (s *Store) locate(r *limit.Rule, k limit.Key) (mapKey, int) {
	sc := r.Ext(s, func(r *limit.Rule) any {
		name := r.Name + ":" + r.StateID()
		return &scope{name: name, hash: maphash.String(s.seed, name)}
	}).(*scope)
	h := maphash.String(s.seed, string(k)) ^ sc.hash
	return mapKey{scope: sc.name, key: k}, int(h & s.mask)
}

// Decide implements limit.Store. The shards a request touches are locked
// together, in ascending order so that two requests never wait on each
// other, which makes a multi-limit decision atomic.
func (s *Store) Decide(_ context.Context, req *limit.Request) (limit.Result, error) {
	return limit.DecideMerged(req, s.decideMerged)
}

// decideMerged decides a valid request whose limits are all on different
// counters (limit.DecideMerged): each map entry is judged and committed
// by one limit.
func (s *Store) decideMerged(req *limit.Request) (limit.Result, error) {
	res, err := s.decide(req)
	if err == errNoRoom {
		// Expired keys may be holding the room. Sweeping needs every
		// shard's lock, so it happens outside decide, and at most every
		// fullSweepGap, so that a store that really is full does not scan
		// itself on every request.
		now := req.Now.UnixMicro()
		if last := s.lastFull.Load(); now-last >= fullSweepGap.Microseconds() && s.lastFull.CompareAndSwap(last, now) {
			s.Sweep(req.Now)
			res, err = s.decide(req)
		}
		if err == errNoRoom {
			err = limit.ErrFull
		}
	}
	return res, err
}

// errNoRoom is decide's signal that the request needs keys the store has no room for.
var errNoRoom = errors.New("no room")

// fullSweepGap is the least time between two sweeps forced by a full store.
const fullSweepGap = 100 * time.Millisecond

func (s *Store) decide(req *limit.Request) (limit.Result, error) {
	n := len(req.Limits)
	res := limit.Result{Allowed: true, Decisions: make([]limit.Decision, n), Time: req.Now}
	if n == 0 {
		return res, nil
	}

	var keysBuf [8]mapKey
	var idxBuf, lockBuf [8]int
	var entBuf [8]*limit.Entry
	keys, idx, locks, ents := keysBuf[:0], idxBuf[:0], lockBuf[:0], entBuf[:0]
	for _, l := range req.Limits {
		mk, i := s.locate(l.Rule, l.Key)
		keys, idx = append(keys, mk), append(idx, i)
	}
	locks = append(locks, idx...)
	if n > 1 {
		slices.Sort(locks)
		locks = slices.Compact(locks)
	}
	for _, i := range locks {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locks {
			s.shards[i].mu.Unlock()
		}
	}()
	// Callers read their clocks before they wait for the locks, so their
	// times arrive out of order. Deciding at the latest time any of these
	// shards has seen keeps each key's time monotonic, as Redis's single
	// thread does; otherwise a late request stamped with an earlier time
	// would reopen a fixed window that had already moved on. A zone's
	// windows are placed at that time too.
	now := req.Now.UnixMicro()
	for _, i := range locks {
		now = max(now, s.shards[i].last)
	}
	for _, i := range locks {
		s.shards[i].last = now
	}
	res.Time = time.UnixMicro(now)

	created := 0
	for j, l := range req.Limits {
		e := s.shards[idx[j]].m[keys[j]]
		if e == nil {
			// An absent key is judged against empty state and stored
			// only if the request is admitted.
			e = new(limit.Entry)
			created++
		}
		ents = append(ents, e)
		d := l.Rule.Check(e, now, req.Hits, l.Rule.ZoneAt(res.Time))
		d.Key = l.Key
		res.Decisions[j] = d
		if !d.Allowed && !l.Rule.Shadow {
			res.Allowed = false
		}
	}
	if !res.Allowed {
		for j := range res.Decisions {
			res.Decisions[j] = res.Decisions[j].Unconsumed()
		}
		return res, nil
	}
	if created > 0 && s.live.Load()+int64(created) > s.max.Load() {
		s.sweepLocked(locks, now)
		if s.live.Load()+int64(created) > s.max.Load() {
			return limit.Result{}, errNoRoom
		}
	}
	for j, l := range req.Limits {
		d := &res.Decisions[j]
		if !d.Allowed {
			continue // a shadow limit that rejected consumes nothing
		}
		e := ents[j]
		if sh := &s.shards[idx[j]]; created > 0 && sh.m[keys[j]] == nil {
			sh.m[keys[j]] = e
			sh.peak = max(sh.peak, len(sh.m))
			s.live.Add(1)
		}
		l.Rule.Commit(e, now, req.Hits, l.Rule.ZoneAt(res.Time), req.Lease)
		res.Delay = max(res.Delay, d.Delay)
	}
	return res, nil
}

// Peek implements limit.Store.
func (s *Store) Peek(_ context.Context, now time.Time, r *limit.Rule, k limit.Key) (limit.State, error) {
	if now.IsZero() {
		now = time.Now()
	}
	if err := r.Validate(); err != nil {
		return limit.State{}, err
	}
	mk, i := s.locate(r, k)
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[mk]
	if e == nil {
		e = new(limit.Entry)
	}
	return r.Peek(e, now.UnixMicro(), r.ZoneAt(now)), nil
}

// Reset implements limit.Store.
func (s *Store) Reset(_ context.Context, r *limit.Rule, k limit.Key) error {
	if err := r.Validate(); err != nil {
		return err
	}
	mk, i := s.locate(r, k)
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[mk]; ok {
		delete(sh.m, mk)
		s.live.Add(-1)
	}
	return nil
}

// Release implements limit.Store.
func (s *Store) Release(_ context.Context, lease string, limits ...limit.Limit) error {
	for _, l := range limits {
		if l.Rule == nil || l.Rule.Algorithm != limit.Concurrency {
			continue
		}
		mk, i := s.locate(l.Rule, l.Key)
		sh := &s.shards[i]
		sh.mu.Lock()
		if e := sh.m[mk]; e != nil {
			e.Release(lease)
		}
		sh.mu.Unlock()
	}
	return nil
}

// Renew implements limit.Store.
func (s *Store) Renew(_ context.Context, now time.Time, lease string, limits ...limit.Limit) error {
	for _, l := range limits {
		if l.Rule == nil || l.Rule.Algorithm != limit.Concurrency {
			continue
		}
		if err := l.Rule.Validate(); err != nil {
			return err
		}
		mk, i := s.locate(l.Rule, l.Key)
		sh := &s.shards[i]
		sh.mu.Lock()
		if e := sh.m[mk]; e != nil {
			l.Rule.Renew(e, now.UnixMicro(), lease)
		}
		sh.mu.Unlock()
	}
	return nil
}

// SetMaxKeys changes MaxKeys; n <= 0 leaves it as it is. Keys already
// held beyond a lowered cap stay until they expire.
func (s *Store) SetMaxKeys(n int) {
	if n > 0 {
		s.max.Store(int64(n))
	}
}

// Len is the number of keys the store holds, expired ones not yet swept included.
func (s *Store) Len() int { return int(s.live.Load()) }

// Close stops the background sweep.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	s.done.Wait()
	return nil
}

func (s *Store) sweepLoop(every time.Duration) {
	defer s.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Sweep(s.now())
		}
	}
}

// Sweep removes the state that has expired at now, one shard at a time.
func (s *Store) Sweep(now time.Time) {
	t := now.UnixMicro()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweepShard(sh, t)
		sh.mu.Unlock()
	}
}

func (s *Store) sweepLocked(locks []int, now int64) {
	for _, i := range locks {
		s.sweepShard(&s.shards[i], now)
	}
}

// sweepShard deletes expired entries and, when the map has shrunk to a
// quarter of its peak, moves the survivors to a new map: Go maps never
// give back the memory of deleted entries, so without this a burst of
// ten million keys would keep its buckets for ever.
func (s *Store) sweepShard(sh *shard, now int64) {
	removed := 0
	for k, e := range sh.m {
		if !e.Live(now) {
			delete(sh.m, k)
			removed++
		}
	}
	if removed > 0 {
		s.live.Add(-int64(removed))
	}
	if sh.peak > 64 && len(sh.m)*4 <= sh.peak {
		m := make(map[mapKey]*limit.Entry, len(sh.m))
		for k, e := range sh.m {
			m[k] = e
		}
		sh.m, sh.peak = m, len(m)
	}
}

// Unexpiring counts the entries that hold no expiry time: the invariant
// that every piece of state expires, checked by the conformance suite.
func (s *Store) Unexpiring() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			if e.Expires == 0 {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}
