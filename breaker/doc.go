// Package breaker is floodgate's circuit breaker: one state machine per
// route, deciding on the failure rate and the slow-call rate of a sliding
// window.
//
// A call asks first and reports after (the two-step breaker of
// sony/gobreaker): Allow(now) admits or refuses it, and the done function it
// returns takes the Outcome and the end time, so the proxy reports latency
// and status when it has them. What counts as a failure (statuses,
// connection errors, timeouts) is the caller's configuration; the breaker
// only counts failed, slow, both, or neither. A call the client cancelled
// says nothing about the upstream and is not counted.
//
// CLOSED records each call in a ring of one-second buckets covering Window
// and opens when the window holds at least MinCalls calls and failures/calls
// reaches FailureRate or slow/calls reaches SlowCallRate. OPEN refuses with
// the time left until OpenFor has passed; the next Allow after that starts
// HALF_OPEN, which admits HalfOpenCalls trial calls and refuses the rest.
// When every trial's outcome is in, the trials' own rates decide: below both
// thresholds the breaker closes with an empty window, else it opens for
// another OpenFor. A trial the client cancels frees its slot for another,
// so exactly HalfOpenCalls outcomes decide; a trial not reported within
// TrialTimeout of its start counts as failed as soon as Allow or done
// notices, so a lost report cannot hold the breaker HALF_OPEN.
//
// Every transition starts a new generation, and a call's outcome counts only
// in the generation that admitted it: a call admitted CLOSED that ends
// during the trials, or a trial that reports after the breaker reopened,
// changes nothing.
//
// An operator can Force the breaker open or closed, and back to Auto.
//
// A breaker with Settings.Fleet is one of a fleet's, the breakers of one
// route on several instances, which decide together: it hands the calls it
// counted over (TakeCounts) for a window the fleet shares, takes the
// state the fleet decided (Follow), and asks the fleet for its trials
// (Fleet), so that HalfOpenCalls are the fleet's. Where the fleet keeps
// its window is the caller's (the gateway's is Redis); the breaker only
// counts and follows. It counts its own window all along, so that when the
// fleet is out of reach (Share false) it decides alone at once.
//
// Time is an argument: every method that decides takes now, and time.Now
// stays with the caller, so tests need no sleeps. Buckets are numbered from
// the first time the breaker is given, with Time.Sub, which uses the
// monotonic clock when both times come from time.Now: a step of the wall
// clock does not empty or freeze the window.
//
// The CLOSED path is cheap: Allow reads the state with one atomic load and
// takes no lock, and done takes a mutex for a few counter updates; neither
// allocates when done does not escape the caller. OPEN refuses without a
// lock as well. Transitions happen under the mutex, so each happens once
// however many goroutines report together.
package breaker
