package limit

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Algorithm is how a rule counts.
type Algorithm uint8

const (
	// FixedWindow admits Rate.Count per window of Rate.Period.
	FixedWindow Algorithm = iota + 1
	// SlidingWindow admits at most Rate.Count in any interval of Rate.Period,
	// keeping a log of admission times.
	SlidingWindow
	// TokenBucket refills Rate.Count tokens per Rate.Period into a bucket of
	// Burst tokens; a request takes Cost tokens.
	TokenBucket
	// Concurrency admits at most Rate.Count requests in flight at once.
	Concurrency
)

var algorithmNames = [...]string{
	FixedWindow: "fixed_window", SlidingWindow: "sliding_window",
	TokenBucket: "token_bucket", Concurrency: "concurrency",
}

func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) && algorithmNames[a] != "" {
		return algorithmNames[a]
	}
	return "algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm reads the configuration name of an algorithm; "" is FixedWindow.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "" {
		return FixedWindow, nil
	}
	for a, name := range algorithmNames {
		if name != "" && name == s {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (fixed_window, sliding_window, token_bucket, concurrency)", s)
}

// Align says where a fixed window begins.
type Align uint8

const (
	// AlignEpoch starts windows at multiples of the window length since the
	// Unix epoch, shifted by the rule's Location, so every key and every
	// gateway shares the same window boundaries.
	AlignEpoch Align = iota
	// AlignFirst starts a key's window at its first admission, as an INCR
	// that sets EXPIRE when it creates the key does.
	AlignFirst
)

// MaxSlidingCount bounds a sliding window's count: its log holds one entry
// per admission in the window.
const MaxSlidingCount = 100_000

// DefaultLeaseTTL is how long a concurrency lease lives when the rule gives no LeaseTTL.
const DefaultLeaseTTL = 30 * time.Second

// Rule is one limit. A Rule is immutable once it has been used: stores
// derive and cache values from it.
type Rule struct {
	// Name identifies the rule's counters in stored keys, for example
	// "lucky-meal:user". Two rules with the same Name and the same
	// algorithm, window and alignment share counters; a change of count,
	// burst or cost keeps them.
	Name string

	Algorithm Algorithm

	// Rate is the window's count and length for the window algorithms, the
	// refill rate for TokenBucket and, through Count alone, the number of
	// requests in flight for Concurrency.
	Rate Rate

	// Burst is the bucket size of a TokenBucket. Zero means Rate.Count.
	Burst int64

	// Cost is what one request takes: tokens or window slots. Zero means 1.
	// Concurrency ignores it: a request holds one lease.
	Cost int64

	// Queue lets a TokenBucket admit a request whose tokens are due within
	// Queue, telling the caller how long to wait (Decision.Delay) instead
	// of rejecting it.
	Queue time.Duration

	// Align and Location place fixed windows. A nil Location is UTC.
	Align    Align
	Location *time.Location

	// Shadow rules are decided and reported but never reject a request.
	Shadow bool

	// Sliced lets a store shared by many instances lease each of them
	// slices of a FixedWindow's current window, which the instance admits
	// from without asking the store, for keys that every request shares (a
	// global limit, a route's). The limit holds fleet-wide; with demand above
	// it, what the instances hold unused when the window ends is not
	// admitted. A store in one process ignores it.
	Sliced bool

	// LeaseTTL is how long a Concurrency lease lives if it is neither
	// released nor renewed, so that a caller that dies cannot hold quota
	// for ever. Zero means DefaultLeaseTTL.
	LeaseTTL time.Duration

	once sync.Once
	err  error
	p    params
	ext  atomic.Pointer[[]extension] // never changed in place: replaced whole
	span atomic.Pointer[zoneSpan]    // the last window ZoneAt placed
}

// params are the rule in microseconds, derived once.
type params struct {
	n      int64   // count, burst or concurrency limit
	window int64   // µs: the window, or the token bucket's period
	cost   int64   // per request
	queue  int64   // µs
	lease  int64   // µs
	perUS  float64 // token bucket: tokens per µs
	fixedZ bool    // fixed window, epoch alignment, UTC: offset always 0
	state  string  // StateID
}

type extension struct {
	owner any
	value any
}

// Validate reports the first problem of the rule, naming the field and the
// value. Stores call it before they decide a rule.
func (r *Rule) Validate() error {
	r.once.Do(func() { r.err = r.derive() })
	return r.err
}

func (r *Rule) derive() error {
	if err := validName(r.Name); err != nil {
		return err
	}
	cost := r.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 0 {
		return fmt.Errorf("rule %s: cost %d must be positive", r.Name, r.Cost)
	}
	p := params{n: r.Rate.Count, cost: cost, window: r.Rate.Period.Microseconds()}
	switch r.Algorithm {
	case FixedWindow, SlidingWindow, TokenBucket:
		if err := r.Rate.validate(); err != nil {
			return fmt.Errorf("rule %s: rate %v: %v", r.Name, r.Rate, err)
		}
	case Concurrency:
		if r.Rate.Count <= 0 || r.Rate.Count > MaxCount {
			return fmt.Errorf("rule %s: concurrency limit %d must be in 1..%d", r.Name, r.Rate.Count, MaxCount)
		}
		p.cost = 1
		lease := r.LeaseTTL
		if lease == 0 {
			lease = DefaultLeaseTTL
		}
		if lease < MinPeriod {
			return fmt.Errorf("rule %s: lease_ttl %v is shorter than %v", r.Name, r.LeaseTTL, MinPeriod)
		}
		p.lease = lease.Microseconds()
	default:
		return fmt.Errorf("rule %s: unknown algorithm %v", r.Name, r.Algorithm)
	}
	if r.Queue < 0 || (r.Queue > 0 && r.Algorithm != TokenBucket) {
		return fmt.Errorf("rule %s: queue %v: only a token_bucket may queue, for a positive time", r.Name, r.Queue)
	}
	if r.Burst != 0 && r.Algorithm != TokenBucket {
		return fmt.Errorf("rule %s: burst %d: only a token_bucket has a burst", r.Name, r.Burst)
	}
	switch r.Algorithm {
	case FixedWindow:
		if p.cost > p.n {
			return fmt.Errorf("rule %s: cost %d is larger than the count %d", r.Name, p.cost, p.n)
		}
		p.fixedZ = r.Align == AlignEpoch && (r.Location == nil || r.Location == time.UTC)
	case SlidingWindow:
		if p.n > MaxSlidingCount {
			return fmt.Errorf("rule %s: sliding_window count %d is above %d (its log holds one entry per admission)", r.Name, p.n, MaxSlidingCount)
		}
		if p.cost > p.n {
			return fmt.Errorf("rule %s: cost %d is larger than the count %d", r.Name, p.cost, p.n)
		}
	case TokenBucket:
		if r.Burst < 0 || r.Burst > MaxCount {
			return fmt.Errorf("rule %s: burst %d must be in 1..%d", r.Name, r.Burst, MaxCount)
		}
		if r.Burst > 0 {
			p.n = r.Burst
		}
		if p.cost > p.n {
			return fmt.Errorf("rule %s: burst %d is smaller than the cost %d", r.Name, p.n, p.cost)
		}
		p.queue = r.Queue.Microseconds()
		p.perUS = float64(r.Rate.Count) / float64(p.window)
	}
	if r.Align > AlignFirst {
		return fmt.Errorf("rule %s: unknown alignment %d", r.Name, r.Align)
	}
	if r.Sliced && r.Algorithm != FixedWindow {
		return fmt.Errorf("rule %s: only a fixed_window may be leased in slices, not a %v", r.Name, r.Algorithm)
	}
	r.p = p
	r.p.state = r.StateID()
	return nil
}

// validName accepts the characters of route and limit names plus the
// separators callers join them with. Braces would move the Redis Cluster
// hash tag, so they are never allowed.
func validName(s string) error {
	if s == "" {
		return fmt.Errorf("rule name is empty")
	}
	if len(s) > 200 {
		return fmt.Errorf("rule name %.20q... is longer than 200 bytes", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':' || c == '.' || c == '#') {
			return fmt.Errorf("rule name %q: only a-z, 0-9, _ - : . # are allowed", s)
		}
	}
	return nil
}

// Limit is what the rule admits: the window's count, the bucket's burst or
// the number of requests in flight.
func (r *Rule) Limit() int64 {
	if r.Algorithm == TokenBucket && r.Burst > 0 {
		return r.Burst
	}
	return r.Rate.Count
}

// Window is the window length, or for a token bucket the time an empty
// bucket takes to fill, ⌈burst / rate⌉ rounded up to whole seconds
// (the "w" of the RateLimit-Policy header). Concurrency has none.
func (r *Rule) Window() time.Duration {
	switch r.Algorithm {
	case FixedWindow, SlidingWindow:
		return r.Rate.Period
	case TokenBucket:
		secs := math.Ceil(float64(r.Limit()) / r.Rate.PerSecond())
		return time.Duration(secs) * time.Second
	}
	return 0
}

// StateID names the shape of the rule's stored state: the algorithm and,
// for windows, their length and alignment. Stores put it in the stored key
// so that a change of any of these starts fresh counters while a change of
// count, burst or cost keeps them (docs/configuration.md, Hot reload).
func (r *Rule) StateID() string {
	if r.p.state != "" {
		return r.p.state
	}
	switch r.Algorithm {
	case FixedWindow:
		a := "e"
		if r.Align == AlignFirst {
			a = "f"
		}
		return "fw." + strconv.FormatInt(r.Rate.Period.Milliseconds(), 10) + a
	case SlidingWindow:
		return "sw." + strconv.FormatInt(r.Rate.Period.Milliseconds(), 10)
	case TokenBucket:
		return "tb"
	case Concurrency:
		return "cc"
	}
	return "x"
}

// maxExt is how many owners a rule keeps values for: a rule meets a few
// stores at most (the Redis store, the memory store, the gateway's local
// fallback), and the oldest value goes when a further owner asks.
const maxExt = 4

// Ext returns the value a store derived from this rule for itself, building
// it with build the first time owner asks. It lets a store cache, for
// example, formatted script arguments without a map keyed by rules that
// would outlive them. Owners do not evict each other, so a rule used by two
// stores in turn builds each value once; callers that race on a first ask
// may each build one, and all get the one that was kept.
func (r *Rule) Ext(owner any, build func(*Rule) any) any {
	if v, ok := find(r.ext.Load(), owner); ok {
		return v
	}
	v := build(r)
	for {
		old := r.ext.Load()
		if kept, ok := find(old, owner); ok {
			return kept
		}
		var es []extension
		if old != nil {
			es = append(es, (*old)[max(len(*old)-maxExt+1, 0):]...)
		}
		es = append(es, extension{owner: owner, value: v})
		if r.ext.CompareAndSwap(old, &es) {
			return v
		}
	}
}

func find(es *[]extension, owner any) (any, bool) {
	if es == nil {
		return nil, false
	}
	for _, e := range *es {
		if e.owner == owner {
			return e.value, true
		}
	}
	return nil, false
}

// WithCost returns a new rule with r's settings and Cost cost: it shares
// r's counters, which depend on the name, algorithm, window and alignment,
// not on the cost (the Envoy rate-limit service counts a descriptor's own
// hits_addend this way).
func (r *Rule) WithCost(cost int64) *Rule {
	return &Rule{
		Name: r.Name, Algorithm: r.Algorithm, Rate: r.Rate, Burst: r.Burst, Cost: cost, Queue: r.Queue,
		Align: r.Align, Location: r.Location, Shadow: r.Shadow, LeaseTTL: r.LeaseTTL, Sliced: r.Sliced,
	}
}

// Params exposes the rule in microseconds for stores that run the
// algorithms elsewhere (the Redis store's scripts). Call Validate first.
func (r *Rule) Params() (n, windowUS, cost, queueUS, leaseUS int64) {
	return r.p.n, r.p.window, r.p.cost, r.p.queue, r.p.lease
}
