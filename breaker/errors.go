package breaker

import (
	"errors"
	"fmt"
	"time"
)

// ErrOpen is what a refused call's error matches (errors.Is). The error
// itself is an *OpenError, which says when to come back.
var ErrOpen = errors.New("breaker: open")

// OpenError is the error Allow returns when it refuses a call.
type OpenError struct {
	// State is OPEN, or HALF_OPEN when every trial slot is taken.
	State State

	// Forced is true when an operator forced the breaker open.
	Forced bool

	// RetryAt is when the breaker may admit calls again: the end of
	// OpenFor when OPEN; when HALF_OPEN, the moment by which every trial in
	// flight has reported or timed out, so the trials are decided (they
	// may be decided sooner). Zero when forced open: no trial is
	// scheduled.
	RetryAt time.Time

	// RetryAfter is RetryAt less the time given to Allow; zero when
	// RetryAt is.
	RetryAfter time.Duration
}

func (e *OpenError) Error() string {
	switch {
	case e.Forced:
		return "breaker: forced open"
	case e.State == HalfOpen:
		return fmt.Sprintf("breaker: half-open, all trial calls in flight; decided within %v", e.RetryAfter)
	}
	return fmt.Sprintf("breaker: open, next trial in %v", e.RetryAfter)
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }
