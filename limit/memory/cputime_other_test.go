//go:build !unix

package memory_test

import "time"

// cpuTime is the CPU time the process has used: unknown here.
func cpuTime() (time.Duration, bool) { return 0, false }
