package gateway

import (
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/accesslog"
)

// ReloadFailed counts a reload that never reached Reload because the new
// configuration did not load or validate.
func (g *Gateway) ReloadFailed() { g.metrics.reloaded(false, g.now()) }

// ReloadUnchanged counts a reload of a file identical to the one the
// running configuration came from: it succeeded, with nothing to rebuild.
// The access log's file is opened again all the same: logrotate renames
// the file and sends SIGHUP with the config unchanged. If it cannot be,
// the log goes on in the file it was in, and an ERROR line says why.
func (g *Gateway) ReloadUnchanged() {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if cfg := g.Config(); cfg.Server.AccessLog != config.AccessLogOff {
		if sink, err := accesslog.Open(cfg, g.stdout, g.stderr); err != nil {
			g.log.Error("cannot open the access log again; it goes on where it was", "error", err.Error())
		} else {
			g.access.Use(sink)
		}
	}
	g.metrics.reloaded(true, g.now())
}
