// Package redisstore is the Redis limit.Store: the four algorithms of
// package limit, run by Lua scripts inside Redis, so that any number of
// gateway instances share exact limits and give the same answers as the
// memory store, to the microsecond.
//
// # One round trip per request
//
// Decide sends every limit of a request to one script, decide.lua, with
// EVALSHA (EVAL when Redis answers NOSCRIPT). The script reads its clock
// from Redis TIME, judges every limit without writing anything but expired
// state, and records the request only if every non-shadow limit admitted
// it: a rejected request consumes no quota anywhere. Concurrent decisions
// from many goroutines are pipelined by rueidis over a few connections.
//
// # Keys known to be exhausted
//
// Unless Options.NoLocalRejects, the store remembers what Redis's answers
// say about keys that cannot admit a request before some time: a rejection,
// or an admission that left less than the next request needs. Until then it
// rejects such requests itself (Decision.Local), asking Redis nothing; the
// request's other limits are Undecided. Nothing but time makes such a key
// admit sooner, so no request Redis would admit is turned away; the entries
// end a little early, on the instance's monotonic clock, whatever its wall
// clock says. Reset forgets its key on every instance, by a message on the
// channel PREFIX + "forget" (forget.go), as does a give-back on a cluster.
// The package limit/internal/exhausted says per algorithm why this is
// exact.
//
// # Batches
//
// Requests whose limits are all fixed windows (mode d below) are also
// batched (batch.go): while four such calls are in flight, further
// decisions queue, and each returning call sends everything queued as one
// call of mode b, which decides the requests one after the other
// exactly as separate calls would. An idle gateway sends every decision at
// once; a busy one makes fewer, larger calls, which read and write the keys
// that requests share (a global limit, a route's) once per batch and cost
// Redis a fifth to a third less CPU per decision (BENCHMARKS.md).
//
// # Stored state
//
// Each limit of a key is one Redis key, limit.StoredKey(prefix, rule, key),
// PREFIX{NAME:KEY}:STATEID, whose braces are the Redis Cluster hash tag:
//
//	fixed_window    string "start:count": window start µs, admitted count
//	sliding_window  sorted set of admissions, score = time µs
//	token_bucket    hash {t: tokens (%.17g), ts: time of t µs}
//	concurrency     sorted set lease id -> expiry µs
//
// Every key a script writes has an expiry: the window's end, the newest
// admission plus the window, the time until the bucket is full again (at
// least 1 ms), the longest lease. The scripts judge liveness from the
// stored times, not from the key's existence, exactly as limit.Entry does.
//
// Fixed windows were hashes {s, c} before they were strings, a layout that
// cost Redis more CPU per decision. The script reads them with MGET, which
// reads a key of another type as nil, so a window left as a hash is no
// window: after an upgrade each such key forgets at most one window's
// count and is replaced as a string by its next admission.
//
// # decide.lua arguments
//
// KEYS[i] is the state of limit i. A request's keys are distinct: limits
// on one counter, which is one key, are merged into one whose cost is
// their sum before the store decides (limit.DecideMerged). ARGV:
//
//	1  mode: "d" decides a request whose limits are all fixed windows
//	   (but a zone's window next to a change of offset), "D" any other
//	   request, "p" peeks at KEYS[1] (Peek), "b" a batch of requests of
//	   mode d, "r" gives back (below)
//	2  clock offset µs added to TIME: 0, except in tests
//	3  decision token: makes sliding-window members unique (token:i, token:i:copy)
//	4  lease id, for concurrency limits
//	then per limit, from 5:
//	   algorithm (f fixed epoch, z fixed epoch in a Location, F fixed
//	   first, s sliding, t bucket, c concurrency), shadow (0|1), n (count,
//	   burst or limit), window µs (lease ttl µs for concurrency), cost
//	   (rule cost × hits); then for z the zone offset µs and four bounds
//	   µs, or for t tokens per µs and queue µs. For z, window, offset and
//	   bounds are limit.Rule.ZoneNear's at the caller's time: the window
//	   that holds it (on a day the zone's offset changes, a day window's
//	   real length and an offset that puts its start at local midnight),
//	   and the bounds of it and its two neighbours, among which the script
//	   places Redis's time
//
// A limit's first four arguments (and a bucket's last two) are formatted
// once per rule and cached with limit.Rule.Ext. The reply is a flat integer
// array: the store's time in µs, then three numbers per limit: remaining,
// reset after µs, and the delay µs if the limit admits the request or
// -1 - retry after µs if it rejects it. The request is admitted when every
// limit that is not a shadow admits it. In "p" mode the reply is the time,
// remaining, reset after µs and the leases in flight.
//
// In "r" mode KEYS are the keys of an earlier "d" or "D" call and a marker
// key in their slot; ARGV are that call's, with cost 0 for the limits that
// took nothing, and then the time it decided at. The reply is the time and
// then, per limit, remaining and reset after µs once given back.
//
// In "b" mode KEYS are the distinct keys of the batch, ARGV 3 is the
// number of requests and ARGV 4 the number of distinct sets of limit
// arguments. ARGV 5 holds the sets, 30 bytes each: the algorithm's and the
// shadow flag's characters as in "d", then n, window, cost and the zone
// offset plus 2^47 as 56-bit numbers, high byte first. ARGV 6 holds the
// requests as 16-bit numbers, high byte first: each request's number of
// limits and, per limit, the index of its key in KEYS and of its argument
// set (a batch holds at most 256 limits). The reply is the time and then,
// for every limit of every request in order, the three numbers of "d" for
// a window aligned to its first admission (F), and one for a window
// aligned to the clock (f, z): the remaining count where the limit admits
// the request, -1 - the remaining count where it rejects it. Those
// windows' reset and retry follow from the time, the window and the zone
// offset, so the store works them out as the script would (about 500
// instructions of Redis's per number it does not send back).
//
// # Failures
//
// Every call runs under Options.Timeout, connecting included, and is never
// retried: a script that timed out may have run, and running it again
// would count one request twice. Every failure to get an answer wraps
// limit.ErrStoreUnavailable, so that callers apply their on_error policy,
// and its cause. A store whose Redis is unreachable at New keeps
// connecting in the background and fails every call at once meanwhile.
//
// # Cluster and Sentinel
//
// Options.Mode picks the server: one standalone Redis, a Redis Cluster
// (the store learns the nodes from seed addresses and follows MOVED and
// ASK; each node loads the scripts on its first NOSCRIPT), or a master
// watched by Redis Sentinel (the store follows failovers). On a cluster a
// script may only touch one slot, so a request's limits are decided in
// groups of one hash tag each, the most selective group first and the
// others together after it, and a request that a later group rejects
// gives back what the earlier ones took, once (slots.go, mode r above).
// There the guarantee is "never more than the limit": between its take and
// its give-back a rejected request holds quota. Cluster decisions are not
// batched, as a batch's keys would span slots.
package redisstore
