// Package ruledata is what is derived from a limit.Rule and kept with it,
// out of the rule's public API: the validation's result, the rule in
// microseconds, the last window a zone placed, and the values its users
// build from it once (a store's formatted script arguments, the gateway's
// scaled copy).
//
// A limit.Rule embeds a Data in a field of its own package, so only this
// package can reach it: Rule, the interface every *limit.Rule satisfies,
// is what the functions here take. They cost no lookup: the data is in
// the rule, and a map keyed by rules would outlive them or need weak
// pointers, which cost more than the decisions they would serve.
package ruledata

import (
	"sync"
	"sync/atomic"
)

// Params are a rule in microseconds, derived once when it is validated.
type Params struct {
	N         int64   // count, burst or concurrency limit
	Window    int64   // µs: the window, or the token bucket's period
	Cost      int64   // per request
	Queue     int64   // µs
	Lease     int64   // µs
	PerUS     float64 // token bucket: tokens per µs
	FixedZone bool    // fixed window, epoch alignment, UTC: offset always 0
	State     string  // the shape of the stored state (limit's StateID)
}

// Span is a window of a rule's Location, placed around a time: its bounds
// in µs, the window and offset that place it, the bounds of the windows
// before and after it (the previous one's start, its start, its end, the
// next one's end), and whether all three have the same window and offset.
type Span struct {
	Start, End  int64
	Window, Off int64
	Near        [4]int64
	Alike       bool
}

// Data is what a rule keeps of itself. Its zero value is a rule not yet
// validated.
type Data struct {
	once sync.Once
	err  error
	p    Params
	ext  atomic.Pointer[[]extension] // never changed in place: replaced whole
	span atomic.Pointer[Span]        // the last window a zone placed
}

func (d *Data) ruleData() *Data { return d }

// Rule is a *limit.Rule: a type that embeds a Data.
type Rule interface{ ruleData() *Data }

// Validate runs derive the first time it is asked for r and keeps its
// answer: the params on success, the error else.
func Validate(r Rule, derive func() (Params, error)) error {
	d := r.ruleData()
	d.once.Do(func() {
		p, err := derive()
		if err != nil {
			d.err = err
			return
		}
		d.p = p
	})
	return d.err
}

// SetParams makes r, not yet validated, valid with p: a rule a store
// derived from validated ones (the merge of limits on one counter), whose
// cost Validate would refuse.
func SetParams(r Rule, p Params) {
	d := r.ruleData()
	d.once.Do(func() { d.p = p })
}

// ParamsOf returns r's params: zero until r has been validated.
func ParamsOf(r Rule) *Params { return &r.ruleData().p }

// SpanOf returns where r keeps the last window its Location placed.
func SpanOf(r Rule) *atomic.Pointer[Span] { return &r.ruleData().span }

type extension struct {
	owner any
	value any
}

// maxExt is how many owners a rule keeps values for: a rule meets a few
// stores at most (the Redis store, the memory store, the gateway's local
// fallback), and the oldest value goes when a further owner asks.
const maxExt = 4

// Ext returns the value owner derived from r, building it with build the
// first time owner asks. It lets a store cache, for example, formatted
// script arguments without a map keyed by rules that would outlive them.
// Owners do not evict each other, so a rule used by two stores in turn
// builds each value once; callers that race on a first ask may each build
// one, and all get the one that was kept.
func Ext[R Rule](r R, owner any, build func(R) any) any {
	x := &r.ruleData().ext
	if v, ok := find(x.Load(), owner); ok {
		return v
	}
	v := build(r)
	for {
		old := x.Load()
		if kept, ok := find(old, owner); ok {
			return kept
		}
		var es []extension
		if old != nil {
			es = append(es, (*old)[max(len(*old)-maxExt+1, 0):]...)
		}
		es = append(es, extension{owner: owner, value: v})
		if x.CompareAndSwap(old, &es) {
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
