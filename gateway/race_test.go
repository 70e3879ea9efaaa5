//go:build race

package gateway

// raceEnabled: the race detector drops some of what a sync.Pool is
// given, and instruments what it runs, so a request's allocations under
// it are not those of the gateway as built.
const raceEnabled = true
