// Package core is what the stores share beneath limit's API: the four
// algorithms' arithmetic on one key's state (Entry, Check, Commit, Peek),
// on the stores' clock in microseconds; where a zone's windows lie (ZoneAt,
// ZoneNear); where a store keeps a counter (StoredKey); and how limits on
// one counter are decided as one (DecideMerged).
//
// The memory store runs it on its entries; the Redis store runs the same
// arithmetic in Lua, and its tests replay every answer of the script
// against this package.
package core

import (
	"time"

	"github.com/floodgate-gw/floodgate/internal/ruledata"
	"github.com/floodgate-gw/floodgate/limit"
)

// MaxCost bounds what one request takes, its rule's cost times its hits:
// a larger product saturates here. It is far above every count
// (limit.MaxCount), so such a request is rejected, never wrapped around
// into an admission, and a Lua number holds it exactly.
const MaxCost = 1 << 53

// Params is r in microseconds. Call Validate on r first.
func Params(r *limit.Rule) *ruledata.Params { return params(r) }

func params(r *limit.Rule) *ruledata.Params { return ruledata.ParamsOf(r) }

// StateID names the shape of r's stored state: the algorithm and, for
// windows, their length and alignment. Stores put it in the stored key so
// that a change of any of these starts fresh counters while a change of
// count, burst or cost keeps them. It is empty for a rule that is not
// valid.
func StateID(r *limit.Rule) string {
	if s := params(r).State; s != "" {
		return s
	}
	r.Validate()
	return params(r).State
}

// Limit is what r admits: the window's count, the bucket's burst or the
// number of requests in flight.
func Limit(r *limit.Rule) int64 {
	if r.Algorithm == limit.TokenBucket && r.Burst > 0 {
		return r.Burst
	}
	return r.Rate.Count
}

// PerSecond is r's rate as events per second.
func PerSecond(r limit.Rate) float64 { return float64(r.Count) / r.Period.Seconds() }

// Decisions returns the slice a store answers req's n decisions in:
// req.Into's array when it holds n, a new slice else.
func Decisions(req *limit.Request, n int) []limit.Decision {
	if cap(req.Into) >= n {
		ds := req.Into[:n]
		clear(ds)
		return ds
	}
	return make([]limit.Decision, n)
}

// StoredKey is where a store keeps the state of rule r for key k:
// PREFIX{NAME:KEY}:STATEID. The braces are a Redis Cluster hash tag that
// holds one logical key's state in one slot; neither the prefix, the name
// nor the key may contain a brace, so the tag is always this one.
func StoredKey(prefix string, r *limit.Rule, k limit.Key) string {
	id := StateID(r)
	return string(AppendStoredKey(make([]byte, 0, len(prefix)+len(r.Name)+len(k)+len(id)+4), prefix, r, k))
}

// AppendStoredKey appends StoredKey(prefix, r, k) to b.
func AppendStoredKey(b []byte, prefix string, r *limit.Rule, k limit.Key) []byte {
	b = append(b, prefix...)
	b = append(b, '{')
	b = append(b, r.Name...)
	b = append(b, ':')
	b = append(b, k...)
	b = append(b, "}:"...)
	return append(b, StateID(r)...)
}

func us(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
