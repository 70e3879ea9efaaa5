// Package memory is floodgate's embedded store: every algorithm of package
// limit, with the same answers as the Redis store, for one gateway
// instance or as the local fallback when Redis fails.
//
// State lives in sharded maps. A decision merges the limits that share a
// counter (limit.DecideMerged), locks the shards of its keys in ascending
// order, checks every limit, and commits only if the request is admitted.
// Memory is bounded: expired state is swept, maps that shrank are rebuilt,
// and MaxKeys caps the keys held at once.
package memory
