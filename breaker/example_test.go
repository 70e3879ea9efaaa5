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
