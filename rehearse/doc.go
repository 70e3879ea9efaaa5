// Package rehearse holds the tools that rehearse a surge before it happens:
// a mock downstream that degrades the way a fragile third-party API does,
// and an open-loop load generator that offers a flash sale's traffic and
// measures what came back. The floodgate upstream and floodgate load
// commands are thin wrappers around it.
//
// Upstream is the mock downstream: a base latency with jitter, a share of
// 500s, a capacity per 1-second window past which answers turn slow and
// then fail, and a scripted outage. It is an http.Handler that reports what
// it served on GET /stats.
//
// Run is the load generator. A Profile (const, step or surge) gives the
// rate at every moment, a Schedule turns it into the send time of each
// request, and Run sends each request at its time whether or not the
// earlier ones were answered, measuring latency from the scheduled time, so
// a slow target cannot hide its queueing by slowing the test down
// (coordinated omission). Answers are summed per second of scheduled send
// time into a series of Seconds, with latencies kept in a log-linear
// Histogram; WriteSecond, WriteSummary, CSVWriter and WriteHTML print it.
//
// Time is an argument wherever it can be: Upstream.Decide and Upstream.Stats
// take now, Profile.RateAt and Schedule are pure functions of the profile,
// and the per-second bookkeeping takes offsets from the start of a run, so
// their tests need no clock and no sleeps. Only Upstream.ServeHTTP and Run
// read the clock.
package rehearse
