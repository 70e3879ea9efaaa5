package fleetbus

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// A circuit breaker of scope fleet keeps its window, its state and its
// trials here, for every instance to share (breaker.lua): the gateway adds
// the counts of its calls a few times a second (BreakerTick), which also
// tells it what the fleet decided, and asks for each trial call and
// reports it (BreakerTrial, BreakerTrialDone). Times are Redis TIME's,
// the window's seconds included, so that the instances' clocks need not
// agree.
//
// A breaker's two keys are PREFIX{breaker/NAME}:window and :state: one
// hash tag, so one slot of a cluster and one script. No limit's key has
// that tag, since a limit's name has no '/'.

//go:embed breaker.lua
var breakerSource string

var breakerScript = rueidis.NewLuaScript(breakerSource)

// BreakerRule is what a fleet's breaker decides by: breaker.Settings'
// fields of the same names. Every instance of the fleet should give the
// same; each call decides by the one it is given.
type BreakerRule struct {
	Window        time.Duration // whole seconds
	MinCalls      int
	FailureRate   float64
	SlowCallRate  float64
	OpenFor       time.Duration
	HalfOpenCalls int
	TrialTimeout  time.Duration
}

// BreakerState is a fleet's breaker as Redis holds it, times by the Redis
// clock.
type BreakerState struct {
	State    uint8 // 0 closed, 1 open, 2 half-open: breaker.State's numbers
	Episode  uint64
	OpenedAt time.Time // OPEN and HALF_OPEN: when the fleet's breaker opened
	Now      time.Time // Redis TIME when the call ran

	// Calls, Failures and Slow are the fleet's window; CLOSED.
	Calls, Failures, Slow int64
}

// BreakerTick adds calls, failures and slow calls to the window of the
// breaker name, when the fleet is CLOSED in episode (counts of another
// episode are dropped), opens the fleet's breaker if the window reaches a
// threshold, and returns the state. With nothing to add it only reads.
func (b *Bus) BreakerTick(ctx context.Context, name string, r BreakerRule, episode uint64, calls, failures, slow int64) (BreakerState, error) {
	_, st, err := b.breakerCall(ctx, name, r, "tick", episode,
		strconv.FormatInt(calls, 10), strconv.FormatInt(failures, 10), strconv.FormatInt(slow, 10))
	return st, err
}

// BreakerTrial asks for one of the trial calls of the breaker name: ok
// when the fleet is HALF_OPEN (or OPEN for OpenFor, which starts the
// trials) and fewer than HalfOpenCalls are taken. A trial not reported
// within TrialTimeout counts as failed. The state says where the fleet is
// otherwise.
func (b *Bus) BreakerTrial(ctx context.Context, name string, r BreakerRule) (ok bool, st BreakerState, err error) {
	return b.breakerCall(ctx, name, r, "trial", 0, "0", "0", "0")
}

// BreakerTrialDone reports a trial the fleet admitted in episode: failed,
// slow, or cancelled (which frees its place). The last outcome of
// HalfOpenCalls decides: the fleet closes, or opens again.
func (b *Bus) BreakerTrialDone(ctx context.Context, name string, r BreakerRule, episode uint64, failed, slow, cancelled bool) (BreakerState, error) {
	_, st, err := b.breakerCall(ctx, name, r, "done", episode, flag(failed), flag(slow), flag(cancelled))
	return st, err
}

// BreakerReset closes the breaker name for the fleet with an empty
// window, a new episode: an operator gave it back to its window.
func (b *Bus) BreakerReset(ctx context.Context, name string, r BreakerRule) (BreakerState, error) {
	_, st, err := b.breakerCall(ctx, name, r, "reset", 0, "0", "0", "0")
	return st, err
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// breakerKeys are the window and the state of the breaker name.
func (b *Bus) breakerKeys(name string) []string {
	tag := b.prefix + "{breaker/" + name + "}"
	return []string{tag + ":window", tag + ":state"}
}

func (b *Bus) breakerCall(ctx context.Context, name string, r BreakerRule, op string, episode uint64, x, y, z string) (bool, BreakerState, error) {
	what := "breaker " + op
	if r.Window < time.Second || r.HalfOpenCalls < 1 || r.MinCalls < 1 {
		return false, BreakerState{}, fmt.Errorf("redisstore: %s: bad rule %+v", what, r)
	}
	cl, err := b.conn.Client(what)
	if err != nil {
		return false, BreakerState{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	vs, err := breakerScript.Exec(ctx, cl, b.breakerKeys(name), []string{
		op,
		strconv.FormatInt(int64(r.Window/time.Second), 10),
		strconv.Itoa(r.MinCalls),
		strconv.FormatFloat(r.FailureRate, 'g', -1, 64),
		strconv.FormatFloat(r.SlowCallRate, 'g', -1, 64),
		strconv.FormatInt(r.OpenFor.Milliseconds(), 10),
		strconv.Itoa(r.HalfOpenCalls),
		strconv.FormatInt(r.TrialTimeout.Milliseconds(), 10),
		strconv.FormatUint(episode, 10),
		x, y, z,
		strconv.FormatInt(b.offset.Load()/1000, 10),
	}).ToArray()
	if err != nil {
		return false, BreakerState{}, unavailable(what, err)
	}
	if len(vs) != 8 {
		return false, BreakerState{}, unavailable(what, fmt.Errorf("answer of %d values", len(vs)))
	}
	var n [8]int64
	for i, v := range vs {
		if n[i], err = v.AsInt64(); err != nil {
			return false, BreakerState{}, unavailable(what, fmt.Errorf("bad answer: %w", err))
		}
	}
	st := BreakerState{
		State: uint8(n[1]), Episode: uint64(n[2]), Now: time.UnixMilli(n[4]),
		Calls: n[5], Failures: n[6], Slow: n[7],
	}
	if st.State != 0 {
		st.OpenedAt = time.UnixMilli(n[3])
	}
	return n[0] == 1, st, nil
}
