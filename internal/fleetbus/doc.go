// Package fleetbus is the fleet bus: the Redis-backed channel through which
// the gateway instances that share a Redis store coordinate. It carries
//
//   - announcements (announce.go): each instance says every few seconds
//     that it is alive and what it runs (Announce), so that on_error: local
//     knows what share of a limit one instance may grant alone, and GET
//     /admin/fleet lists the fleet (Instances); a stopping instance leaves
//     at once (Withdraw);
//   - versioned sets (versioned.go): small maps every instance keeps alike,
//     each change a new version of the whole, announced on a channel; an
//     instance that missed an announcement learns of it by asking for the
//     version, one small read (Put, Delete, Read, SetVersion). The gateway
//     keeps its runtime overrides and its fleet breaker forces in two;
//   - control messages (control.go): messages whose meaning is the
//     gateway's own, such as a breaker forced for the fleet or a reset the
//     others should log, published to every instance subscribed (Publish,
//     Subscribe);
//   - the fleet breaker's window (breakerwindow.go): the counts, state and
//     trials of each breaker of scope fleet, which every instance adds to
//     and follows (BreakerTick, BreakerTrial, BreakerTrialDone,
//     BreakerReset);
//   - the reports of protected routes (protect.go): each instance sends
//     what its gate saw once an interval and reads the others' in the
//     same call, so that the instances hold one limit between them
//     (ProtectReport, ProtectLeave).
//
// # The bus and the store
//
// The bus has no connection of its own: it rides on a *redisstore.Store
// (New takes one, as a Conn), and uses the store's Redis client, key
// prefix, timeout and life. A gateway thus opens one set of connections to
// Redis; a reload that keeps the store keeps the bus; closing the store
// ends the bus's subscriptions. The store decides limits and knows nothing
// of the bus; its own channel, PREFIX + "forget", which makes every
// instance forget what it remembers of a key that was reset, is not the
// bus's, and no kind may name it.
//
// Every failure to get an answer from Redis wraps
// limit.ErrStoreUnavailable, as the store's do, and a change whose answer
// did not come wraps ErrUnknown too: it may have been made.
//
// # Stored state
//
// The keys and channels are those of the store's prefix, and must stay as
// they are: the instances of a fleet run different versions during a
// rolling upgrade, and Lua scripts that changed would be other scripts.
//
//	PREFIX + "instances"               sorted set: instance id -> expiry (µs)
//	"{" + PREFIX + "instances}:info"   hash: instance id -> "SEEN INFO"
//	"{" + PREFIX + KIND + "}:set"      hash: a versioned set (versioned.lua)
//	PREFIX + "{breaker/NAME}:window"   hash: a fleet breaker's window
//	PREFIX + "{breaker/NAME}:state"    hash: its state and trials
//	PREFIX + "{protect/ROUTE}:fleet"   hash: instance id -> "MS REPORT"
//	channel PREFIX + KIND              a set's versions, or control messages
//
// The hash tags keep each script's keys in one slot of a Redis Cluster.
package fleetbus
