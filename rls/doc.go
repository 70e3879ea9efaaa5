// Package rls is floodgate's Envoy rate-limit service: it answers
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit with rules in
// the YAML format of envoyproxy/ratelimit, so that an Envoy or Istio
// deployment can switch to floodgate by changing an address.
//
// Rules are read from a directory, one domain per file, with every problem
// reported as FILE:LINE (parse.go); descriptors are matched (tree.go) as
// envoyproxy/ratelimit matches them (exact value, then the first value
// with '*' in it, in file order, that matches, then the key alone). The
// values a share_threshold wildcard matches share one counter. Each
// rate_limit becomes an epoch-aligned fixed window, envoyproxy/ratelimit's
// own algorithm, whose rule name depends only on the domain and the
// descriptor path, so that a reload that changes a rate keeps the
// counters. detailed_metric, value_to_metric, quota_mode and metadata are
// kept on the Limit; docs/rls.md says what each does.
//
// The Service (service.go) decides every limit a request's descriptors
// match in one call to a limit.Store, the gateway's: the memory store, or
// Redis (standalone, Cluster, Sentinel) shared by any number of instances.
// Where envoyproxy/ratelimit counts every descriptor it is sent, even when
// another is over its limit, a request that one limit rejects consumes
// nothing from the others. shadow_mode limits are counted and reported but
// never reject; replaces drops the named limits when both match, and a
// name no limit has replaces nothing; shadow_mode on a descriptor without
// a limit has no effect, as in envoyproxy/ratelimit. hits_addend, the
// request's or a descriptor's own, is the cost: descriptors of different
// costs are still decided in one call, all or nothing, and hits above a
// limit's count reject the request at once, counting nothing anywhere. A
// descriptor's hits_addend set to 0 checks its limit and counts nothing:
// it rejects the request when the limit is used up (the request's own
// hits_addend of 0 means 1). A store that fails answers UNAVAILABLE, and
// Envoy's failure_mode_deny decides.
//
// Every status of a descriptor with a limit reports what the limit has
// left and when it resets: a limit that the request's rejection kept out
// of the store call is read for its status without counting. Only a limit
// that the store did not ask (limit.Decision.Undecided: on Redis Cluster, a
// limit in another slot than the one that rejected the request; with the
// Redis store's local rejects, every other limit of a request rejected from
// its memory of exhausted keys, so that a flood of such requests costs no
// Redis call at all) and one whose read failed are reported without. As in
// envoyproxy/ratelimit, a limit that rejects reports 0 left (even when the
// hits it was asked for are more than what it has), the time until
// reset is in whole seconds, rounded up, and an unlimited descriptor
// reports math.MaxUint32 left.
//
// requests_per_unit: 0 rejects every request, as in envoyproxy/ratelimit,
// without counting. A descriptor's own limit (RateLimitDescriptor.limit)
// applies instead of the rule it matches, as in envoyproxy/ratelimit, and
// counts apart from any rule (override.go). Not supported: negative hits,
// an override's unit_multiplier other than 1, requests_per_unit above
// limit.MaxCount, and more than MaxDescriptors descriptors in one request
// (InvalidArgument).
//
// Options.Shadow answers OK over every limit, as envoyproxy/ratelimit's
// SHADOW_MODE (the statuses still say OVER_LIMIT); Options.QuotaMode makes
// every limit a quota, as quota_mode makes one (QUOTA_MODE); Options.Metadata
// sends dynamic metadata that names the quotas a request is over
// (RESPONSE_DYNAMIC_METADATA); Options.Headers adds
// rate-limit headers for Envoy to send (answer.go). Each descriptor's
// Outcome, in the terms of envoyproxy/ratelimit's stats (near_limit
// included), goes to gateway_rls_descriptor_hits_total when there is an
// Options.Registerer (metrics.go, with its bound on labels that name
// request values), and to Options.Observe.
package rls
