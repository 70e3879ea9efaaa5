package memory

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// MaxKeys caps the keys held at once. A decision that would add a key
	// beyond it fails with limit.ErrFull. Zero means 1,000,000.
	MaxKeys int

	// Shards is the number of independently locked tables; rounded up to a
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

// shard is one lock and the table it guards. The fields a decision reads
// come first, in one cache line; the shard fills two, so that no two
// locks share one.
type shard struct {
	mu sync.Mutex
	t  table
	_  [56]byte
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
// counters, as the Redis store's keys do (core.StoredKey). It is derived
// once per rule (scopeOf), with its hash, so a decision hashes only the
// caller's key.
type scope struct {
	name string
	hash uint64
}

// same reports whether a and b are one scope: the same rule's, or that of
// another rule with the same name and state shape (a copy at another
// cost, a rule loaded again).
func (a *scope) same(b *scope) bool { return a == b || a.name == b.name }

// scopeOf is r's scope. r has been validated.
func (s *Store) scopeOf(r *limit.Rule) *scope {
	return ruledata.Ext(r, s, func(r *limit.Rule) any {
		name := r.Name + ":" + core.StateID(r)
		return &scope{name: name, hash: maphash.String(s.seed, name)}
	}).(*scope)
}

// locate is where the state of sc for k lives: its hash, which also
// picks its shard, and the shard.
func (s *Store) locate(sc *scope, k limit.Key) (uint64, *shard) {
	h := maphash.String(s.seed, string(k)) ^ sc.hash
	return h, &s.shards[h&s.mask]
}

// Decide implements limit.Store. The shards a request touches are locked
// together, in ascending order so that two requests never wait on each
// other, which makes a multi-limit decision atomic. A request of one
// limit, which shares a counter with no other, skips the merging
// (core.DecideMerged) and locks its one shard.
func (s *Store) Decide(_ context.Context, req *limit.Request) (limit.Result, error) {
	if len(req.Limits) != 1 {
		return core.DecideMerged(req, s.decideMerged)
	}
	if err := core.ValidateRequest(req); err != nil {
		return limit.Result{}, err
	}
	at := req.Now
	if at.IsZero() {
		at = time.Now()
	}
	ds := core.Decisions(req, 1)
	now, err := s.decideOne(req, at, &ds[0])
	if err == errNoRoom {
		if s.sweepFull(at) {
			now, err = s.decideOne(req, at, &ds[0])
		}
		if err == errNoRoom {
			err = limit.ErrFull
		}
	}
	if err != nil {
		return limit.Result{}, err
	}
	// A rejection consumes nothing, and a shadow rule's admits the
	// request; only an admission queues (Delay).
	d := &ds[0]
	return limit.Result{Allowed: d.Allowed || d.Rule.Shadow, Decisions: ds, Time: time.UnixMicro(now), Delay: d.Delay}, nil
}

// decideMerged decides a valid request whose limits are all on different
// counters (core.DecideMerged): each entry is judged and committed by
// one limit.
func (s *Store) decideMerged(req *limit.Request) (limit.Result, error) {
	res, err := s.decide(req)
	if err == errNoRoom {
		if s.sweepFull(req.Now) {
			res, err = s.decide(req)
		}
		if err == errNoRoom {
			err = limit.ErrFull
		}
	}
	return res, err
}

// sweepFull sweeps the whole store for a decision that found no room,
// unless a sweep forced so started less than fullSweepGap before now, and
// reports whether it swept. Expired keys may be holding the room.
// Sweeping needs every shard's lock, so it happens outside a decision,
// and at most every fullSweepGap, so that a store that really is full
// does not scan itself on every request.
func (s *Store) sweepFull(at time.Time) bool {
	now := at.UnixMicro()
	if last := s.lastFull.Load(); now-last >= fullSweepGap.Microseconds() && s.lastFull.CompareAndSwap(last, now) {
		s.Sweep(at)
		return true
	}
	return false
}

// errNoRoom is decide's signal that the request needs keys the store has no room for.
var errNoRoom = errors.New("no room")

// fullSweepGap is the least time between two sweeps forced by a full store.
const fullSweepGap = 100 * time.Millisecond

// lockTime is the time a decision on the key of the slot at p of the
// locked table t is made at: at, or the latest time a decision on that
// key was made at (timeOf). Callers read their clocks before they wait
// for the locks, so their times arrive out of order. Deciding at the
// key's latest time keeps its time monotonic, as Redis's single thread
// does; otherwise a late request stamped with an earlier time would
// reopen a fixed window that had already moved on.
//
// The time is the key's own, not its shard's: keys that only share a
// shard, which the hash's random seed picks, share no time. Were it the
// shard's, a key never decided at a later time would still be decided
// at it after the clock stepped back, or not, by the luck of its hash: in
// another window than the Redis store, which decides it at its clock's
// time.
func (t *table) lockTime(p int, at int64) int64 {
	now := max(at, t.timeOf(p))
	if p >= 0 {
		t.slots[p].last = now
	}
	return now
}

// timeOf is the latest time a decision on the key of the slot at p was
// made at; for a key the table does not hold (p < 0), the latest of the
// keys its sweeps removed. A key goes with its slot when its entry
// expires, and a request stamped before its last decision (one that
// waited, or on_error: local's, stamped before the store call that
// failed) must not find it new in the window it had left.
func (t *table) timeOf(p int) int64 {
	if p < 0 {
		return t.swept
	}
	return t.slots[p].last
}

// decideOne decides a valid request of one limit at at (req.Now, or the
// time of the call) into d, and returns the time it decided at, µs: decide
// for one shard, one key, no arrays.
func (s *Store) decideOne(req *limit.Request, at time.Time, d *limit.Decision) (int64, error) {
	l := req.Limits[0]
	r := l.Rule
	sc := s.scopeOf(r)
	h, sh := s.locate(sc, l.Key)

	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.t.find(h, sc, l.Key)
	now := sh.t.lockTime(p, at.UnixMicro())
	// A zone's windows are placed at the decision's time too.
	z := core.ZoneAt(r, time.UnixMicro(now))
	// An absent key is judged against empty state and stored only if the
	// request is admitted.
	var fresh core.Entry
	e := &fresh
	if p >= 0 {
		e = &sh.t.slots[p].e
	}
	dec, _ := core.Check(r, e, now, req.Hits, z)
	dec.Key = l.Key
	if !dec.Allowed {
		*d = dec
		return now, nil
	}
	if p < 0 {
		if s.live.Load()+1 > s.max.Load() {
			s.sweepShard(sh, now)
			if s.live.Load()+1 > s.max.Load() {
				return 0, errNoRoom
			}
		}
		p = sh.t.insert(h, sc, l.Key)
		sh.t.slots[p].e, sh.t.slots[p].last = fresh, now
		s.live.Add(1)
	}
	core.Commit(r, &sh.t.slots[p].e, now, req.Hits, z, req.Lease)
	*d = dec
	return now, nil
}

// limitsBuf is how many limits decide keeps its bookkeeping for on the
// stack.
const limitsBuf = 8

func (s *Store) decide(req *limit.Request) (limit.Result, error) {
	n := len(req.Limits)
	res := limit.Result{Allowed: true, Decisions: core.Decisions(req, n), Time: req.Now}
	if n == 0 {
		return res, nil
	}

	var scBuf [limitsBuf]*scope
	var hashBuf [limitsBuf]uint64
	var idxBuf, lockBuf, posBuf [limitsBuf]int
	var zoneBuf [limitsBuf]core.Zone
	var freshBuf [limitsBuf]core.Entry
	var idleBuf [limitsBuf]core.Idle
	scs, hashes, idx, locks := scBuf[:0], hashBuf[:0], idxBuf[:0], lockBuf[:0]
	pos, zones, fresh, idles := posBuf[:0], zoneBuf[:0], freshBuf[:0], idleBuf[:0]
	if n > limitsBuf {
		pos, zones, fresh, idles = make([]int, 0, n), make([]core.Zone, 0, n), make([]core.Entry, 0, n), make([]core.Idle, 0, n)
	}
	for _, l := range req.Limits {
		sc := s.scopeOf(l.Rule)
		h := maphash.String(s.seed, string(l.Key)) ^ sc.hash
		scs, hashes, idx = append(scs, sc), append(hashes, h), append(idx, int(h&s.mask))
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
	// Decide at the latest time any of these keys has been decided at
	// (lockTime), and make it theirs. A zone's windows are placed at that
	// time too.
	now := req.Now.UnixMicro()
	for j, l := range req.Limits {
		t := &s.shards[idx[j]].t
		p := t.find(hashes[j], scs[j], l.Key)
		pos = append(pos, p)
		now = max(now, t.timeOf(p))
	}
	for j, p := range pos {
		if p >= 0 {
			s.shards[idx[j]].t.slots[p].last = now
		}
	}
	res.Time = time.UnixMicro(now)

	created := 0
	fresh = fresh[:n]
	for j, l := range req.Limits {
		t := &s.shards[idx[j]].t
		p := pos[j]
		// An absent key is judged against empty state and stored only if
		// the request is admitted.
		e := &fresh[j]
		if p >= 0 {
			e = &t.slots[p].e
		}
		zones = append(zones, core.ZoneAt(l.Rule, res.Time))
		d := &res.Decisions[j]
		var idle core.Idle
		*d, idle = core.Check(l.Rule, e, now, req.Hits, zones[j])
		idles = append(idles, idle)
		d.Key = l.Key
		switch {
		case !d.Allowed && !l.Rule.Shadow:
			res.Allowed = false
		case d.Allowed && p < 0:
			created++ // a key to add: a rejecting shadow limit adds none
		}
	}
	if !res.Allowed {
		for j := range res.Decisions {
			res.Decisions[j] = idles[j].Unconsumed(res.Decisions[j])
		}
		return res, nil
	}
	if created > 0 && s.live.Load()+int64(created) > s.max.Load() {
		s.sweepLocked(locks, now)
		// The sweep moved entries, and may have removed expired ones
		// that were judged here as the empty state they stand for: they
		// are added again, and need room as new keys do.
		created = 0
		for j, l := range req.Limits {
			pos[j] = s.shards[idx[j]].t.find(hashes[j], scs[j], l.Key)
			if pos[j] < 0 && res.Decisions[j].Allowed {
				created++
			}
		}
		if s.live.Load()+int64(created) > s.max.Load() {
			return limit.Result{}, errNoRoom
		}
	}
	for j, l := range req.Limits {
		d := &res.Decisions[j]
		if !d.Allowed {
			continue // a shadow limit that rejected consumes nothing
		}
		t := &s.shards[idx[j]].t
		p := pos[j]
		if p < 0 {
			// Adding keys moves no other slot, so the positions found
			// above stay good; pointers into slots may not.
			p = t.insert(hashes[j], scs[j], l.Key)
			t.slots[p].e, t.slots[p].last = fresh[j], now
			s.live.Add(1)
		}
		core.Commit(l.Rule, &t.slots[p].e, now, req.Hits, zones[j], req.Lease)
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
	sc := s.scopeOf(r)
	h, sh := s.locate(sc, k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var fresh core.Entry
	e := &fresh
	if p := sh.t.find(h, sc, k); p >= 0 {
		e = &sh.t.slots[p].e
	}
	return core.Peek(r, e, now.UnixMicro(), core.ZoneAt(r, now)), nil
}

// Reset implements limit.Store.
func (s *Store) Reset(_ context.Context, r *limit.Rule, k limit.Key) error {
	if err := r.Validate(); err != nil {
		return err
	}
	sc := s.scopeOf(r)
	h, sh := s.locate(sc, k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if p := sh.t.find(h, sc, k); p >= 0 {
		sh.t.remove(p)
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
		sc := s.scopeOf(l.Rule)
		h, sh := s.locate(sc, l.Key)
		sh.mu.Lock()
		if p := sh.t.find(h, sc, l.Key); p >= 0 {
			sh.t.slots[p].e.Release(lease)
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
		sc := s.scopeOf(l.Rule)
		h, sh := s.locate(sc, l.Key)
		sh.mu.Lock()
		if p := sh.t.find(h, sc, l.Key); p >= 0 {
			core.Renew(l.Rule, &sh.t.slots[p].e, now.UnixMicro(), lease)
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

// sweepShard removes the locked shard's expired entries (table.sweep).
func (s *Store) sweepShard(sh *shard, now int64) {
	if removed := sh.t.sweep(now); removed > 0 {
		s.live.Add(-int64(removed))
	}
}

// Unexpiring counts the entries that hold no expiry time: the invariant
// that every piece of state expires, checked by the conformance suite.
func (s *Store) Unexpiring() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for p := range sh.t.slots {
			if sh.t.slots[p].e.Expires == 0 {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}
