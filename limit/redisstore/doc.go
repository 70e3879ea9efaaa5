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
// # Stored state
//
// Each limit of a key is one Redis key, limit.StoredKey(prefix, rule, key),
// PREFIX{NAME:KEY}:STATEID, whose braces are the Redis Cluster hash tag:
//
//	fixed_window    hash {s: window start µs, c: count}
//	sliding_window  sorted set of admissions, score = time µs
//	token_bucket    hash {t: tokens (%.17g), ts: time of t µs}
//	concurrency     sorted set lease id -> expiry µs
//
// Every key a script writes has an expiry: the window's end, the newest
// admission plus the window, the time until the bucket is full again (at
// least 1 ms), the longest lease. The scripts judge liveness from the
// stored times, not from the key's existence, exactly as limit.Entry does.
//
// # decide.lua arguments
//
// KEYS[i] is the state of limit i. ARGV:
//
//	1  mode: "d" decides every limit, "p" peeks at KEYS[1] (Peek)
//	2  clock offset µs added to TIME: 0, except in tests
//	3  decision token: makes sliding-window members unique (token:i, token:i:copy)
//	4  lease id, for concurrency limits
//	then 8 per limit, from 5+8(i-1):
//	   algorithm (f fixed epoch, F fixed first, s sliding, t bucket, c concurrency),
//	   shadow (0|1), n (count, burst or limit), window µs (lease ttl µs for
//	   concurrency), tokens per µs (bucket, else 0), queue µs,
//	   cost (rule cost × hits), zone offset µs (fixed epoch with a Location)
//
// The first six of a limit's arguments are formatted once per rule and
// cached with limit.Rule.Ext. The reply is a flat integer array: the
// store's time in seconds and microseconds, 1 if the request is admitted,
// then per limit: allowed, remaining, reset after µs, retry after µs,
// delay µs. In "p" mode it is the time, remaining, reset after µs and the
// leases in flight.
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
// Standalone Redis only, for now; keys already carry the hash tag that
// Redis Cluster needs.
package redisstore
