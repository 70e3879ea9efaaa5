package breaker

import (
	"errors"
	"fmt"
	"time"
)

// Settings configure a Breaker. The fields mirror config.Breaker, plus
// TrialTimeout and OnTransition, which the gateway supplies; which
// responses count as failures is the caller's judgement and not a setting
// here.
type Settings struct {
	// Window is the sliding window, a whole number of seconds from 1s to
	// MaxWindow. It is kept as a ring of one-second buckets, made when the
	// Breaker is.
	Window time.Duration

	// MinCalls is the fewest calls in the window that allow a decision; at
	// least 1.
	MinCalls int

	// FailureRate opens the breaker when failures/calls reach it; in
	// (0, 1].
	FailureRate float64

	// SlowCallDuration makes a call slow when it takes longer. Zero: calls
	// are never slow.
	SlowCallDuration time.Duration

	// SlowCallRate opens the breaker when slow/calls reach it; in (0, 1].
	SlowCallRate float64

	// OpenFor is how long the breaker refuses before its trial calls;
	// positive.
	OpenFor time.Duration

	// HalfOpenCalls is the number of trial calls whose outcomes decide
	// between CLOSED and OPEN; from 1 to MaxHalfOpenCalls.
	HalfOpenCalls int

	// TrialTimeout is how long a trial call may go unreported before it
	// counts as failed, so a lost done cannot hold the breaker HALF_OPEN
	// for ever. The gateway passes the upstream timeout. Positive.
	TrialTimeout time.Duration

	// OnTransition, if not nil, is told of every change of state. Calls
	// are made one at a time, in the order of the transitions, and never
	// while the breaker's lock is held, so the function may call any
	// method of the Breaker (a transition it causes is delivered after it
	// returns). It may run on the goroutine of a later call than the one
	// that caused the transition, and it delays that call while it runs:
	// keep it short (a log line, a metric).
	OnTransition func(from, to State, at time.Time)

	// Fleet, if not nil, makes the breaker one of a fleet's, which open
	// and close together and share HalfOpenCalls trials (fleet.go). Nil:
	// the breaker decides alone.
	Fleet Fleet
}

// The largest Window and HalfOpenCalls: a breaker holds a bucket per second
// of its window and a slot per trial call from the start, so these bound
// its memory (about 100 KB) where a typing slip ("2000000h") would
// otherwise stop the process when the breaker is made.
const (
	MaxWindow        = time.Hour
	MaxHalfOpenCalls = 10000
)

// A SettingError is one problem of Settings: the field at fault, by its
// Go name, its value, and why it is refused.
type SettingError struct {
	Field string
	Value any
	Why   string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("breaker: %s %v %s", e.Field, e.Value, e.Why)
}

// Validate returns every problem of s, each a *SettingError, joined; nil
// when New would accept s. A configuration reader reports them at its own
// names for the fields.
func (s *Settings) Validate() error {
	var errs []error
	bad := func(field string, value any, why string) {
		errs = append(errs, &SettingError{Field: field, Value: value, Why: why})
	}
	switch {
	case s.Window < time.Second:
		bad("Window", s.Window, "is shorter than 1s")
	case s.Window%time.Second != 0:
		bad("Window", s.Window, "is not a whole number of seconds (the window is kept in 1s buckets)")
	case s.Window > MaxWindow:
		bad("Window", s.Window, "is longer than "+MaxWindow.String())
	}
	if s.MinCalls < 1 {
		bad("MinCalls", s.MinCalls, "must be at least 1")
	}
	if !(s.FailureRate > 0 && s.FailureRate <= 1) {
		bad("FailureRate", s.FailureRate, "is outside (0,1]")
	}
	if s.SlowCallDuration < 0 {
		bad("SlowCallDuration", s.SlowCallDuration, "is negative (0s: calls are never slow)")
	}
	if !(s.SlowCallRate > 0 && s.SlowCallRate <= 1) {
		bad("SlowCallRate", s.SlowCallRate, "is outside (0,1]")
	}
	if s.OpenFor <= 0 {
		bad("OpenFor", s.OpenFor, "must be positive")
	}
	if s.HalfOpenCalls < 1 || s.HalfOpenCalls > MaxHalfOpenCalls {
		bad("HalfOpenCalls", s.HalfOpenCalls, fmt.Sprintf("is outside 1..%d", MaxHalfOpenCalls))
	}
	if s.TrialTimeout <= 0 {
		bad("TrialTimeout", s.TrialTimeout, "must be positive (a trial that never reports would hold the breaker HALF_OPEN)")
	}
	return errors.Join(errs...)
}
