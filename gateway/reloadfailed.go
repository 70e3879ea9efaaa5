package gateway

import "time"

// ReloadFailed counts a reload that never reached Reload because the new
// configuration did not load or validate.
func (g *Gateway) ReloadFailed() { g.metrics.reloaded(false, time.Now()) }

// ReloadUnchanged counts a reload of a file identical to the one the
// running configuration came from: it succeeded, with nothing to rebuild.
func (g *Gateway) ReloadUnchanged() { g.metrics.reloaded(true, time.Now()) }
