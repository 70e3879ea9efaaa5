//go:build race

package answer

// raceEnabled: the race detector drops some of what a sync.Pool is
// given, so a buffer from a pool may be a new one.
const raceEnabled = true
