package limit

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
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

// String is the algorithm's configuration name, as ParseAlgorithm reads it.
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

// maxSlidingCount bounds a sliding window's count: its log holds one entry
// per admission in the window.
const maxSlidingCount = 100_000

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

	//lint:ignore U1000 used through its promoted method, by package ruledata
	derived // what stores derive from the rule, kept with it
}

// derived is kept in a field of limit's own, out of the rule's API.
//
//lint:ignore U1000 used through the field of Rule
type derived = ruledata.Data

// Validate reports the first problem of the rule, naming the field and the
// value. Stores call it before they decide a rule.
func (r *Rule) Validate() error { return ruledata.Validate(r, r.derive) }

func (r *Rule) derive() (ruledata.Params, error) {
	if err := validName(r.Name); err != nil {
		return ruledata.Params{}, err
	}
	cost := r.Cost
	if cost == 0 {
		cost = 1
	}
	if cost < 0 {
		return ruledata.Params{}, fmt.Errorf("rule %s: cost %d must be positive", r.Name, r.Cost)
	}
	p := ruledata.Params{N: r.Rate.Count, Cost: cost, Window: r.Rate.Period.Microseconds()}
	switch r.Algorithm {
	case FixedWindow, SlidingWindow, TokenBucket:
		if err := r.Rate.validate(); err != nil {
			return ruledata.Params{}, fmt.Errorf("rule %s: rate %v: %v", r.Name, r.Rate, err)
		}
	case Concurrency:
		if r.Rate.Count <= 0 || r.Rate.Count > MaxCount {
			return ruledata.Params{}, fmt.Errorf("rule %s: concurrency limit %d must be in 1..%d", r.Name, r.Rate.Count, MaxCount)
		}
		p.Cost = 1
		lease := r.LeaseTTL
		if lease == 0 {
			lease = DefaultLeaseTTL
		}
		if lease < MinPeriod {
			return ruledata.Params{}, fmt.Errorf("rule %s: lease_ttl %v is shorter than %v", r.Name, r.LeaseTTL, MinPeriod)
		}
		p.Lease = lease.Microseconds()
	default:
		return ruledata.Params{}, fmt.Errorf("rule %s: unknown algorithm %v", r.Name, r.Algorithm)
	}
	if r.Queue < 0 || (r.Queue > 0 && r.Algorithm != TokenBucket) {
		return ruledata.Params{}, fmt.Errorf("rule %s: queue %v: only a token_bucket may queue, for a positive time", r.Name, r.Queue)
	}
	if r.Burst != 0 && r.Algorithm != TokenBucket {
		return ruledata.Params{}, fmt.Errorf("rule %s: burst %d: only a token_bucket has a burst", r.Name, r.Burst)
	}
	switch r.Algorithm {
	case FixedWindow:
		if p.Cost > p.N {
			return ruledata.Params{}, fmt.Errorf("rule %s: cost %d is larger than the count %d", r.Name, p.Cost, p.N)
		}
		p.FixedZone = r.Align == AlignEpoch && (r.Location == nil || r.Location == time.UTC)
	case SlidingWindow:
		if p.N > maxSlidingCount {
			return ruledata.Params{}, fmt.Errorf("rule %s: sliding_window count %d is above %d (its log holds one entry per admission)", r.Name, p.N, maxSlidingCount)
		}
		if p.Cost > p.N {
			return ruledata.Params{}, fmt.Errorf("rule %s: cost %d is larger than the count %d", r.Name, p.Cost, p.N)
		}
	case TokenBucket:
		if r.Burst < 0 || r.Burst > MaxCount {
			return ruledata.Params{}, fmt.Errorf("rule %s: burst %d must be in 1..%d", r.Name, r.Burst, MaxCount)
		}
		if r.Burst > 0 {
			p.N = r.Burst
		}
		if p.Cost > p.N {
			return ruledata.Params{}, fmt.Errorf("rule %s: burst %d is smaller than the cost %d", r.Name, p.N, p.Cost)
		}
		p.Queue = r.Queue.Microseconds()
		p.PerUS = float64(r.Rate.Count) / float64(p.Window)
	}
	if r.Align > AlignFirst {
		return ruledata.Params{}, fmt.Errorf("rule %s: unknown alignment %d", r.Name, r.Align)
	}
	if r.Sliced && r.Algorithm != FixedWindow {
		return ruledata.Params{}, fmt.Errorf("rule %s: only a fixed_window may be leased in slices, not a %v", r.Name, r.Algorithm)
	}
	p.State = r.stateID()
	return p, nil
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

// limit is what the rule admits: the window's count, the bucket's burst or
// the number of requests in flight.
func (r *Rule) limit() int64 {
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
		secs := math.Ceil(float64(r.limit()) / r.Rate.perSecond())
		return time.Duration(secs) * time.Second
	}
	return 0
}

// stateID names the shape of the rule's stored state: the algorithm and,
// for windows, their length and alignment. Stores put it in the stored key
// so that a change of any of these starts fresh counters while a change of
// count, burst or cost keeps them (docs/configuration.md, Hot reload).
func (r *Rule) stateID() string {
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
