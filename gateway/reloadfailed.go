package gateway

// ReloadFailed counts a reload that never reached Reload because the new
// configuration did not load or validate.
func (g *Gateway) ReloadFailed() { g.metrics.reloads.WithLabelValues("error").Inc() }
