// Package protect learns how many requests a second an upstream can take
// now, from the route's own exchanges, and admits no more: a route's
// adaptive protection (protect:).
//
// # The controller, and why
//
// The upstream it guards is a remote API with a capacity in requests a
// second, which it keeps only on a good day: past it, answers turn slow
// (a queue builds in front of its database) and then fail. What the
// gateway can see of it is its own exchanges. The controller (Controller)
// is a rate limit moved by those, once an interval (500 ms):
//
//   - Congestion is any of: at least MinBad answers, and more than 2 % of
//     them, slower than Tolerance × the healthy baseline (and at least
//     MinSlack more) or the upstream's own 429 or 503; requests in flight
//     for longer than that (overdue: seen before they answer, which a 3 s
//     answer would make 3 s late); at least MinBad, and more than 10 %, of
//     exchanges failing. What the application answers (a 4xx, a 500) and
//     what the client does (it left, its deadline ran out) is the caller's
//     to leave out (Dropped): a client can provoke either at will.
//   - On congestion the limit drops to 0.9 × the rate of answers that came
//     in time over the last second: while the limit binds, what the
//     upstream did take, so that one step follows a capacity that halved;
//     a little under it, so that the limit sits under the capacity more
//     than over it. A weak sign (under a fifth of the interval's requests
//     bad) halves the limit at most: a false alarm costs no more. The
//     requests admitted before the cut, and in the second after it (an
//     upstream that counts its capacity by the second still holds the
//     overshoot then), do not cut it again (each one's admission is
//     tagged). A Retry-After with the upstream's 429s and 503s holds any
//     rise, MaxHold at most.
//   - Without congestion, and only while the limit binds (requests were
//     turned away, or admitted at 90 % of the limit), it rises: back
//     towards the rate that last congested by a tenth of the gap an
//     interval (at least 1 %), then, past it, probing by 0.5 % and doubling
//     every other interval up to 10 %, as TCP CUBIC is slow near its last
//     maximum and fast far from it; every other, because a level is seen
//     to hold only an interval or so after it is set. A limit that does not
//     bind does not rise: a limit must not creep up with no evidence. A
//     probe past the last level that congested holds at the first requests
//     in flight past the tolerance, and starts again from its smallest
//     step, rather than overshoot while they grow to congestion. An
//     outage (nothing in time) leaves the last rate taken as it was, to
//     come back to.
//   - The baseline is the lowest median latency of the intervals of the last
//     minute. Unlike an average of recent latencies (Netflix's Gradient2 is
//     reported to drift up under sustained load, and Vegas to need a probe
//     that turns users away), a windowed minimum of medians does not drift
//     up with load and needs no probe. An upstream that has become slower at
//     every load would keep it too low for a minute: when the medians of
//     RebaseAfter intervals in a row, of requests admitted after a cut, stay
//     past the threshold with no other sign, the baseline is the recent
//     median (a latency the gateway's load made comes down with the cut).
//
// It assumes that the upstream's latency rises, or that it answers 429 or
// 503, before it breaks; that it answers within Tolerance × its baseline
// when it is not overloaded; and that the route sends enough requests
// (tens a second) for an interval's median to mean something. It fails
// when those do not hold: an upstream that fails fast without slowing
// (answers 500 at once past its capacity) is seen only through failures
// past 10 %; one whose latency varies by more than Tolerance on its own
// keeps the limit low; with a few requests a second it learns slowly.
// Min and Max bound it, and the route's static limits still apply first.
//
// Warm-up: after an idle spell, and when the route's breaker closes,
// admission ramps from a tenth of the limit learned to all of it over
// WarmUp, as Sentinel's warm-up does for a static limit: a cold cache or
// a recovering upstream does not get the whole surge at once. The limit
// learned stays, and does not rise while the ramp holds demand back.
//
// A fleet (fleet.go): with a shared store, the instances in front of one
// upstream end their intervals together, share their tallies as Reports,
// and each runs the controller on the fleet's sum (Join); the fleet's
// limit is the lowest any proposes, a cut by one is followed by all, and
// each admits its Share, in proportion to its demand. Out of reach of the
// others, an instance protects alone (Alone) with its share as its limit.
//
// Priority (priority.go): Levels shares a gate among levels; a request
// waits for room, up to MaxWait, only while no higher level waits, and
// room goes to the highest level waiting first.
//
// Gate is the request path's side: an admission at the limit (GCRA: one
// compare-and-swap, smooth, with a burst of a few milliseconds), and the
// counts of how the admitted requests ended, all atomic, with no lock and
// no allocation.
package protect
