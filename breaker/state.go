package breaker

import "strconv"

// State is a breaker's state. The numbers are the ones the
// gateway_circuit_breaker_state gauge exports (docs/metrics.md).
type State uint8

// The states.
const (
	Closed   State = 0 // calls pass and are counted in the window
	Open     State = 1 // calls are refused
	HalfOpen State = 2 // a fixed number of trial calls pass; their outcomes decide
)

// String returns CLOSED, OPEN or HALF_OPEN, the names the logs, the
// transition metric's labels and the admin API use.
func (s State) String() string {
	switch s {
	case Closed:
		return "CLOSED"
	case Open:
		return "OPEN"
	case HalfOpen:
		return "HALF_OPEN"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Mode is what Force sets: normal operation or a state held by an operator.
type Mode uint8

// The modes.
const (
	// Auto is normal operation. Forcing it always restarts the breaker
	// CLOSED with an empty window, so it also serves as a reset.
	Auto Mode = iota
	// ForceOpen refuses every call until the mode changes; the refusals
	// carry no retry time, since no trial is scheduled.
	ForceOpen
	// ForceClosed admits every call and records nothing.
	ForceClosed
)

// String returns auto, force_open or force_closed.
func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case ForceOpen:
		return "force_open"
	case ForceClosed:
		return "force_closed"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}
