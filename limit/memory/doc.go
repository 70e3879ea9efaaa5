// Package memory is floodgate's embedded store: every algorithm of package
// limit, with the same answers as the Redis store, for one gateway
// instance or as the local fallback when Redis fails.
//
// State lives in shards, each a lock and a table: the entries of its keys
// in one array, found through an open-addressed index of their hashes, so
// that a decision reads one index word and then the entry itself. A
// decision merges the limits that share a counter (core.DecideMerged; a
// request of one limit has nothing to merge and skips it), locks the
// shards of its keys in ascending order, checks every limit, and commits
// only if the request is admitted. It answers in the array the request
// brings (limit.Request.Into), and then allocates nothing. Memory is
// bounded: expired state is swept, tables that shrank are reallocated,
// and MaxKeys caps the keys held at once.
package memory
