package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-gw/floodgate/breaker"
)

// A call asks Allow first and reports its outcome through done when it
// ends; the breaker opens once enough of the window's calls failed.
func Example() {
	b, err := breaker.New(breaker.Settings{
		Window:        10 * time.Second,
		MinCalls:      4,
		FailureRate:   0.5,
		SlowCallRate:  1,
		OpenFor:       30 * time.Second,
		HalfOpenCalls: 2,
		TrialTimeout:  3 * time.Second,
		OnTransition: func(from, to breaker.State, at time.Time) {
			fmt.Printf("%v -> %v at %s\n", from, to, at.Format("15:04:05"))
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	for i, status := range []int{200, 502, 200, 503, 200} {
		done, err := b.Allow(now)
		if errors.Is(err, breaker.ErrOpen) {
			var oe *breaker.OpenError
			errors.As(err, &oe)
			fmt.Printf("call %d refused: retry after %v\n", i, oe.RetryAfter)
			continue
		}
		// ... the upstream call, which took 80 ms and answered status ...
		end := now.Add(80 * time.Millisecond)
		done(breaker.Outcome{Failed: status >= 500, Duration: end.Sub(now)}, end)
		now = now.Add(time.Second)
	}

	// After OpenFor, trial calls decide.
	now = now.Add(30 * time.Second)
	for range 2 {
		done, err := b.Allow(now)
		if err != nil {
			fmt.Println(err)
			return
		}
		done(breaker.Outcome{Duration: 50 * time.Millisecond}, now.Add(50*time.Millisecond))
	}
	fmt.Println(b.State())
	// Output:
	// CLOSED -> OPEN at 10:00:03
	// call 4 refused: retry after 29.08s
	// OPEN -> HALF_OPEN at 10:00:34
	// HALF_OPEN -> CLOSED at 10:00:34
	// CLOSED
}

// oneTrial is a fleet's trial desk, as a store shared by the instances
// would keep it: here, one trial for the whole fleet.
type oneTrial struct{ taken bool }

func (d *oneTrial) Trial(now time.Time) (uint64, bool) {
	if d.taken {
		return 0, false
	}
	d.taken = true
	return 1, true
}

func (d *oneTrial) TrialDone(id uint64, o breaker.Outcome, slow bool, end time.Time) {
	fmt.Printf("trial %d reported, failed %v\n", id, o.Failed)
}

// A breaker of a fleet hands its counts over (TakeCounts) for the fleet's
// window, takes the fleet's decisions (Follow) and asks the fleet for its
// trials.
func ExampleBreaker_Follow() {
	b, err := breaker.New(breaker.Settings{
		Window: 10 * time.Second, MinCalls: 4, FailureRate: 0.5, SlowCallRate: 1,
		OpenFor: 30 * time.Second, HalfOpenCalls: 1, TrialTimeout: 3 * time.Second,
		Fleet: &oneTrial{},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	for range 4 {
		done, _ := b.Allow(now)
		done(breaker.Outcome{Failed: true}, now)
	}
	counts, episode := b.TakeCounts()
	fmt.Printf("%v, %+v of episode %d for the fleet\n", b.State(), counts, episode)

	// The fleet's window, with the other instances' calls, opened it.
	b.Follow(breaker.FleetState{State: breaker.Open, Episode: 1, OpenedAt: now}, now)
	fmt.Println(b.State())
	now = now.Add(30 * time.Second)
	done, err := b.Allow(now)
	fmt.Println("trial admitted:", err == nil)
	_, err = b.Allow(now)
	fmt.Println("another:", err)
	done(breaker.Outcome{}, now)
	// Output:
	// CLOSED, {Calls:4 Failures:4 Slow:0} of episode 0 for the fleet
	// OPEN
	// trial admitted: true
	// another: breaker: half-open, all trial calls in flight; decided within 3s
	// trial 1 reported, failed false
}
