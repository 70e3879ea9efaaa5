//go:build race

package framing

// raceEnabled: the race detector drops some of what a sync.Pool is
// given, so a pooled value may be a new one.
const raceEnabled = true
