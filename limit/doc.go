// Package limit is floodgate's rate-limit model: rules and their four
// algorithms, keys, decisions, and the Store interface that the memory
// store (limit/memory) and the Redis store (limit/redisstore) implement.
// It knows nothing of HTTP or Redis.
//
// A request is decided against every limit that applies to it in one call
// (Store.Decide): it is admitted only if every non-shadow limit admits it,
// and a rejected request consumes nothing from any limit. Limits on one
// counter (the same rule name and key, and the same algorithm and window)
// are decided as one, on the sum of their costs.
//
// Time is an argument: the memory store decides at Request.Now, and the
// Redis store reads Redis's clock inside its script, so that gateway
// instances whose clocks disagree still agree on every window.
package limit
