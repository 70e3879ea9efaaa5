// Package limit holds floodgate's rate-limit core: rules, the four
// algorithms, keys, decisions and the Store interface that the memory and
// Redis stores implement. It knows nothing of HTTP or Redis.
//
// A request is decided against every limit that applies to it in one call
// (Store.Decide): it is admitted only if every non-shadow limit admits it,
// and a rejected request consumes nothing from any limit. Limits on one
// counter (the same rule name and key, and the same algorithm and window)
// are decided as one, on the sum of their costs (DecideMerged).
//
// Time is an argument. The algorithms take the store's clock in
// microseconds; the memory store reads Request.Now and the Redis store
// reads Redis TIME inside its script, so gateway instances whose clocks
// disagree still agree on every window.
package limit
