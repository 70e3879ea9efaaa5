//go:build !race

package httplimit

const raceEnabled = false
