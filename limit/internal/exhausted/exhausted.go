// Package exhausted remembers the keys a store said cannot admit a
// request before some time, so that the requests that follow are rejected
// without asking the store again.
//
// # Why a rejection from memory is exact
//
// An entry says: rule R's counter for key K admits no request that needs
// Need or more before Until. It is written only from an answer of the
// store, and only when the algorithm guarantees that nothing but time can
// make the counter admit such a request sooner:
//
//   - Fixed window: the window's count only grows until the window ends.
//     A key whose window holds count − r admissions admits nothing that
//     needs more than r until the end (Decision.ResetAfter, and RetryAfter
//     of a rejection).
//   - Sliding window: the log only grows until its oldest admission leaves
//     the window, which is what ResetAfter says for a key that has
//     admissions; a rejection's RetryAfter is when enough of them have left
//     for the request. Before that no slot frees.
//   - Token bucket: tokens come back at the rule's rate and at no other
//     time. With r whole tokens left, a request of r+1 needs the tokens due
//     when the bucket is (burst − r − 1)/rate short of full, that is
//     ResetAfter − (burst − r − 1)/rate; a rejection's RetryAfter is when
//     its own tokens are due. A rule with a queue admits a request whose
//     tokens are due within the queue, so its entry ends that much sooner.
//   - Concurrency: a release frees a lease at any time. Never remembered.
//
// Shadow rules never reject, so they are neither remembered nor answered;
// sliced rules (limit.Rule.Sliced) know when their window is used up from
// their slices.
//
// What can still change a key's answer is the store's own business (a
// reset of the key) or a change of the rule, so an entry also holds the
// settings it was made under and is used only for a rule with the same
// ones: a reload or an override that changes the count, the burst or the
// rate misses it and asks the store. Forget drops a key's entries when the
// key is reset.
//
// # Time
//
// The store answers in durations from its own clock. An entry's Until is
// the instance's monotonic time at which the call was sent plus that
// duration: the store decided after it was sent, so the true end is never
// earlier. It is then shortened by a margin of 1 ms plus 1/1000 of the
// duration, for a store clock that runs a little fast, so that an entry
// ends a little early, never late. The instance's wall clock plays no part:
// an instance whose clock is wrong rejects nothing the store would admit.
//
// # Bounds
//
// The table is sharded, with a cap on its entries shared out among the
// shards; a shard that is full makes room by dropping expired entries, or
// the one of a few it samples that ends first. Nothing runs in the
// background: an expired entry is ignored until it is overwritten or
// dropped, and a shard's map keeps the memory it grew to (about 400 bytes
// an entry, with its key).
package exhausted

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// DefaultMax is the table's cap when New is given none.
const DefaultMax = 1_000_000

const shards = 64

// sample is how many entries a full shard looks at to make room.
const sample = 8

// Table is the memory of exhausted keys. Its methods are safe for
// concurrent use. Its times (now, Call.Sent, Call.Recv) are ns of one
// monotonic clock of the caller's.
type Table struct {
	gen    atomic.Uint64 // advanced by every Forget
	size   atomic.Int64
	shards [shards]shard
}

type shard struct {
	mu  sync.RWMutex
	m   map[id]entry
	cap int      // of m: the table's cap shared out
	_   [32]byte // keeps shards' locks off one cache line
}

// id is a counter, as core.StoredKey names it, but for the state id,
// which the entry holds.
type id struct {
	name string
	key  limit.Key
}

type entry struct {
	// The settings of the rule the entry was made under.
	state string // the rule's StateID
	rate  limit.Rate
	burst int64
	queue time.Duration
	loc   *time.Location

	need      int64 // a request needing need or more is rejected
	remaining int64 // what Decision.Remaining reads
	until     int64 // the time at which the entry ends
	retry     int64 // the time at which Decision.RetryAfter ends: the store's, not shortened
	reset     int64 // the time at which Decision.ResetAfter ends
	at        int64 // the store's clock when it decided, in µs since the epoch
	recv      int64 // the time its answer came
}

// Call is when a store call was made: Sent and Recv on the caller's
// monotonic clock, and At, the store's own clock when it decided (Result.Time).
type Call struct {
	Sent, Recv int64
	At         time.Time
}

// New returns a table of at most max entries; max 0 is DefaultMax.
func New(max int) *Table {
	if max <= 0 {
		max = DefaultMax
	}
	t := &Table{}
	for i := range t.shards {
		t.shards[i].m = make(map[id]entry)
		t.shards[i].cap = max / shards
		if i < max%shards {
			t.shards[i].cap++
		}
	}
	return t
}

// Gen is the table's generation: Note drops an answer to a call sent
// under an earlier one, since a key may have been reset while the call was
// out.
func (t *Table) Gen() uint64 { return t.gen.Load() }

// Len is the number of entries, expired ones included.
func (t *Table) Len() int { return int(t.size.Load()) }

func (t *Table) shard(name string, k limit.Key) *shard {
	// FNV-1a over the key, then the name's length: enough to spread keys
	// over 64 shards; the map inside hashes with its own seed.
	h := uint32(2166136261)
	for i := 0; i < len(k); i++ {
		h = (h ^ uint32(k[i])) * 16777619
	}
	h = (h ^ uint32(len(name))) * 16777619
	return &t.shards[h%shards]
}

// Lookup returns the rejection of a request that needs need from r's
// counter for k, if the table knows that counter cannot admit it at now,
// and a time on the store's clock at which the store would have rejected
// it too (Result.Time): the store's time when it decided, plus what has
// passed since its answer came, which is no later than the store's clock
// now. (A look-up at a now read before the answer came, by a goroutine
// that then waited, is placed at the decision.)
func (t *Table) Lookup(r *limit.Rule, k limit.Key, need, now int64) (limit.Decision, time.Time, bool) {
	if r.Shadow || r.Sliced || r.Algorithm == limit.Concurrency {
		return limit.Decision{}, time.Time{}, false
	}
	sh := t.shard(r.Name, k)
	sh.mu.RLock()
	e, ok := sh.m[id{r.Name, k}]
	sh.mu.RUnlock()
	if !ok || now >= e.until || need < e.need || !e.fits(r) {
		return limit.Decision{}, time.Time{}, false
	}
	retry := time.Duration(max(e.retry, e.until) - now)
	return limit.Decision{
		Rule: r, Key: k, Local: true,
		Limit:      core.Limit(r),
		Remaining:  e.remaining,
		RetryAfter: retry,
		ResetAfter: max(time.Duration(e.reset-now), retry),
	}, time.UnixMicro(e.at + max(now-e.recv, 0)/1000), true
}

// fits reports whether e was made under r's settings.
func (e *entry) fits(r *limit.Rule) bool {
	return e.rate == r.Rate && e.burst == r.Burst && e.queue == r.Queue && e.loc == r.Location && e.state == core.StateID(r)
}

// Note remembers what d, the store's decision of l for a request that
// needed need from it, says about the counter, if it says that a request
// needing as much cannot be admitted for a while. gen is the generation
// when the call was sent.
func (t *Table) Note(gen uint64, call Call, l limit.Limit, need int64, d *limit.Decision) {
	r := l.Rule
	sent := call.Sent
	if d.Undecided || d.Local || r.Shadow || r.Sliced || r.Algorithm == limit.Concurrency {
		return
	}
	if d.Allowed && d.Remaining >= need {
		return // the next such request fits
	}
	e := entry{state: core.StateID(r), rate: r.Rate, burst: r.Burst, queue: r.Queue, loc: r.Location, reset: sent + int64(d.ResetAfter)}
	var wait time.Duration
	if d.Allowed {
		// Nothing more than Remaining fits until its next slot or token.
		e.need, e.remaining = d.Remaining+1, d.Remaining
		wait = d.ResetAfter
		if r.Algorithm == limit.TokenBucket {
			wait -= tokensTime(r, core.Limit(r)-e.need)
		}
	} else {
		e.need, e.remaining = need, d.Remaining
		wait = d.RetryAfter
	}
	// What the store would answer as RetryAfter: the wait for the tokens
	// or the window, unshortened.
	e.retry = sent + int64(wait)
	if r.Algorithm == limit.TokenBucket {
		// The queue admits a request whose tokens are due within it; the
		// store rounds a bucket's times up to whole µs, and admits a
		// hair's breadth of a token early (2 µs: one for the rounding of
		// ResetAfter or RetryAfter, one for that of the refill time).
		wait -= r.Queue + 2*time.Microsecond + tokensTime(r, 0)
	}
	wait -= time.Millisecond + wait/1000
	if wait <= 0 {
		return
	}
	e.until = sent + int64(wait)
	e.at, e.recv = call.At.UnixMicro(), max(call.Recv, sent)
	sh := t.shard(r.Name, l.Key)
	k := id{r.Name, l.Key}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// Under the shard's lock, which Forget holds as it advances the
	// generation: an answer is either dropped here or forgotten there.
	if gen != t.gen.Load() {
		return
	}
	if _, ok := sh.m[k]; !ok {
		if sh.cap == 0 {
			return // a table smaller than its shards has none here
		}
		if len(sh.m) >= sh.cap {
			sh.makeRoom(t, sent)
		}
		t.size.Add(1)
	}
	sh.m[k] = e
}

// tokensTime is how long r's bucket takes to refill n tokens, and, for n
// 0, how early the store's tolerance on a token admits a request; never
// more than the exact time.
func tokensTime(r *limit.Rule, n int64) time.Duration {
	perNS := core.PerSecond(r.Rate) / 1e9
	if n == 0 {
		// The store admits a request 1e-9 tokens short (core.tokenEpsilon).
		return time.Duration(min(math.Ceil(1e-9/perNS), math.MaxInt64/2))
	}
	if t := math.Floor(float64(n) / perNS); t < math.MaxInt64 {
		return time.Duration(t)
	}
	return math.MaxInt64 // a rule so slow that nothing it waits for is remembered
}

// makeRoom drops the expired entries among a few of the shard's, or the
// one of them that ends first. Map iteration starts at a random entry, so
// the sample differs from call to call.
func (sh *shard) makeRoom(t *Table, now int64) {
	var first id
	firstUntil, seen, dropped := int64(math.MaxInt64), 0, 0
	for k, e := range sh.m {
		if e.until <= now {
			delete(sh.m, k)
			dropped++
		} else if e.until < firstUntil {
			first, firstUntil = k, e.until
		}
		if seen++; seen == sample {
			break
		}
	}
	if dropped == 0 && firstUntil != math.MaxInt64 {
		delete(sh.m, first)
		dropped++
	}
	t.size.Add(int64(-dropped))
}

// Forget drops what the table knows of rule name's counters for k, and
// makes every answer to a call that is out now, which may have read the
// counter before it was reset, be dropped as it arrives.
func (t *Table) Forget(name string, k limit.Key) {
	sh := t.shard(name, k)
	sh.mu.Lock()
	t.gen.Add(1)
	if _, ok := sh.m[id{name, k}]; ok {
		delete(sh.m, id{name, k})
		t.size.Add(-1)
	}
	sh.mu.Unlock()
}

// ForgetAll drops every entry, for a change that may touch any key (a
// broadcast from another instance that the table cannot place).
func (t *Table) ForgetAll() {
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
	t.gen.Add(1)
	for i := range t.shards {
		sh := &t.shards[i]
		t.size.Add(int64(-len(sh.m)))
		clear(sh.m)
		sh.mu.Unlock()
	}
}
