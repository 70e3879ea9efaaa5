// Package redisstore is the Redis limit.Store: the four algorithms of
// package limit, run by Lua scripts inside Redis, so that any number of
// gateway instances share exact limits and give the same answers as the
// memory store, to the microsecond.
//
// # Use
//
// New takes Options: the Mode (Standalone, the default; Cluster, whose
// Addrs are seed nodes; or Sentinel, whose Addrs are the sentinels, with
// MasterName), credentials, TLS, a key Prefix and the Timeout of one call.
// It fails only on invalid options: a store whose Redis cannot be reached
// yet keeps connecting in the background, and every call fails at once
// meanwhile with an error wrapping limit.ErrStoreUnavailable, the signal
// for the caller's on_error policy. The Store is safe for concurrent use;
// Close it when done.
//
//	store, err := redisstore.New(redisstore.Options{Addrs: []string{"127.0.0.1:6379"}})
//	if err != nil {
//		return err // invalid options
//	}
//	defer store.Close()
//	res, err := store.Decide(ctx, &limit.Request{Now: time.Now(), Limits: limits})
//
// # Failures
//
// Every call runs under Options.Timeout, connecting included, and is never
// retried: a script that timed out may have run, and running it again
// would count one request twice. Every failure to get an answer wraps
// limit.ErrStoreUnavailable and its cause.
//
// The store guards itself against a failing node, as limit.Guard guards a
// store, and needs no limit.Guard around it (which would stop asking a
// whole cluster when one master fails). After three consecutive failures
// of a node, a timeout as well as a refused connection, the decisions and
// peeks that need it fail at once with limit.ErrStoreUnavailable for
// 250 ms; then one call probes the node, and its success ends the rest,
// its failure starts another. In Standalone and Sentinel mode the node is
// the one server; on a cluster it is each master, so while one fails, the
// keys of the others are still decided exactly, and a decision whose slot
// groups span several masters fails at once if one of them rests, as it
// would fail once asked. The store learns which master serves which slot
// from CLUSTER SLOTS, every second and whenever a guard trips, and keeps
// rueidis's own map of the slots fresh at the same pace, so that a
// replica that took over a stalled master's slots is asked within about a
// second (nodes.go). While no node fails, guarding costs a decision one
// atomic load: only a failed call works out its key's slot.
//
// # Cluster and Sentinel
//
// With Cluster the store learns the nodes from the seed addresses and
// follows MOVED and ASK; each node loads the scripts on its first
// NOSCRIPT. With Sentinel it follows the master through failovers. On a
// cluster a script may only touch one slot, so a request's limits are
// decided in groups of one hash tag each, the most selective group first
// and the others together after it, and a request that a later group
// rejects gives back what the earlier ones took, once (slots.go). There
// the guarantee is "never more than the limit": between its take and its
// give-back a rejected request holds quota. Cluster decisions are not
// batched, as a batch's keys would span slots.
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
// Requests whose limits are all fixed windows (mode d of decide.lua) are also
// batched (batch.go): while four such calls are in flight, further
// decisions queue, and each returning call sends everything queued as one
// call of mode b, which decides the requests one after the other
// exactly as separate calls would. An idle gateway sends every decision at
// once; a busy one makes fewer, larger calls, which read and write the keys
// that requests share (a global limit, a route's) once per batch and cost
// Redis a fifth to a third less CPU per decision (docs/bench-log.md).
//
// # Stored state
//
// Each limit of a key is one Redis key, core.StoredKey(prefix, rule, key),
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
// stored times, not from the key's existence, exactly as core.Entry does.
//
// The arguments and replies of decide.lua, mode by mode, are described
// next to it, in decide.go.
//
// # The fleet bus
//
// This package is only the store. The gateway instances that share it
// also share announcements, versioned sets (runtime overrides, fleet
// forces), control messages and the windows of fleet breakers, on the
// fleet bus, floodgate's internal/fleetbus, which keeps its own keys and
// channels under the same prefix. The bus rides on the store: Client,
// Prefix, Timeout and Go lend it the store's connection, prefix, timeout
// and life (bus.go), and are of no use to a limiter.
package redisstore
