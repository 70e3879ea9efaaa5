package gateway

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// alone says whether a part of the gateway that follows the fleet through
// Redis (a fleet breaker, a protected route) decides on this instance's
// own, the fleet being out of reach, and why; its gauge says it too. Safe
// for concurrent use.
type alone struct {
	gauge prometheus.Gauge

	mu    sync.Mutex
	on    bool
	cause string
}

func newAlone(gauge prometheus.Gauge) alone {
	gauge.Set(0)
	return alone{gauge: gauge}
}

// set records err as why it decides alone, and reports whether that is
// new: the caller's line to log.
func (a *alone) set(err error) bool {
	a.mu.Lock()
	was := a.on
	a.on, a.cause = true, err.Error()
	a.mu.Unlock()
	if !was {
		a.gauge.Set(1)
	}
	return !was
}

// clear records that it follows the fleet again, and reports whether it
// was alone.
func (a *alone) clear() bool {
	a.mu.Lock()
	was := a.on
	a.on, a.cause = false, ""
	a.mu.Unlock()
	if was {
		a.gauge.Set(0)
	}
	return was
}

// why is the cause while alone; false while it follows the fleet.
func (a *alone) why() (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cause, a.on
}
