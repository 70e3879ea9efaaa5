package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/filewatch"
)

// errStopping refuses a reload that comes in while serve shuts down: the
// gateway it would swap into is being closed.
var errStopping = errors.New("floodgate is shutting down; reload refused")

// A reloader re-reads the config file and swaps it into the gateway. The
// three triggers (SIGHUP, POST /admin/reload and a change of the file) all
// call reload, so they log, count and fail alike, and never overlap.
type reloader struct {
	path  string
	flags config.Flags // applied to every load, as at start
	gw    *gateway.Gateway
	log   *slog.Logger

	// started is the config serve bound its listeners with; a reload
	// cannot move them, only warn.
	started *config.Config

	// rlsCerts, when set, reads the TLS files of the rate-limit service
	// and of its xDS connection again at every reload: with
	// --watch=false, or where the files' directories cannot be watched,
	// SIGHUP still rotates them.
	rlsCerts func()

	// certs, when set, is the TLS listener's certificates: read again at
	// every reload, as rlsCerts, and replaced by those of a config that
	// names other files or settings.
	certs *edgeTLS

	mu      sync.Mutex
	sum     [sha256.Size]byte // of the file the running config came from
	stopped bool

	// refused is what /readyz says while the running config is not the
	// file's, because the last reload refused the file; nil once a
	// reload succeeds. Atomic, because a reload may hold mu while it
	// waits for a store, and a probe must not wait with it.
	refused atomic.Pointer[string]
}

// reload loads the file and, if it is valid and changed, swaps it in.
// trigger names the cause in the log. On failure the running config stays,
// one ERROR line lists every problem, and the error is returned (a
// config.Errors when the file does not load).
func (r *reloader) reload(trigger string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return errStopping
	}
	if r.rlsCerts != nil {
		r.rlsCerts()
	}
	if r.certs != nil {
		r.certs.reread()
	}
	cfg, sum, err := config.LoadWithFlags(r.path, r.flags)
	if err == nil && sum == r.sum {
		// An editor that saves twice, a touch, or SIGHUP sent "just in
		// case": the running config is the file's, so nothing is
		// rebuilt, but the reload happened and says so.
		r.gw.ReloadUnchanged()
		r.refused.Store(nil)
		r.log.Info("config reloaded; the file is unchanged", "trigger", trigger, "file", r.path)
		return nil
	}
	prev := r.gw.Config()
	if err != nil {
		// A file that does not load never reaches Gateway.Reload, which
		// counts only the failures it sees: count this one here.
		r.gw.ReloadFailed()
	} else {
		err = r.gw.Reload(cfg) // counts its own result
	}
	if err != nil {
		lines := admin.ErrorLines(err)
		r.log.Error("config reload failed; the running config stays",
			"trigger", trigger, "file", r.path, "errors", lines)
		detail := refusal(r.path, err, lines)
		r.refused.Store(&detail)
		return err
	}
	r.refused.Store(nil)
	r.sum = sum
	r.gw.SetConfigDigest(hex.EncodeToString(sum[:]))
	r.log.Info("config reloaded", "trigger", trigger, "file", r.path,
		"routes", len(cfg.Routes), "limits", limitCount(cfg), "changes", config.Diff(prev, cfg).String())
	logWarnings(r.log, cfg)
	r.warnRestart(cfg)
	if r.certs != nil {
		r.certs.configure(cfg.Server.TLS)
	}
	return nil
}

// maxRefusal bounds the message /readyz quotes of a refused file: it is a
// probe's answer, and a message may quote a long value of the file.
const maxRefusal = 300

// refusal is the /readyz detail of a reload that refused the file at
// path with err (whose lines are lines): the first problem, as check
// prints it, and how many more there are.
func refusal(path string, err error, lines []string) string {
	first := lines[0]
	var errs config.Errors
	if !errors.As(err, &errs) {
		// A config that loads but cannot be built (a JWKS file, the
		// events sink) or a store that does not answer: no line to name.
		first = path + ": " + first
	}
	if len(first) > maxRefusal {
		n := maxRefusal
		for n > 0 && !utf8.RuneStart(first[n]) {
			n--
		}
		first = first[:n] + "…"
	}
	detail := "config: rejected " + first
	if n := len(lines) - 1; n == 1 {
		detail += " (and 1 more problem)"
	} else if n > 1 {
		detail += fmt.Sprintf(" (and %d more problems)", n)
	}
	return detail
}

// status is what /readyz adds about the config: "" while the running
// config is the file's.
func (r *reloader) status() string {
	if d := r.refused.Load(); d != nil {
		return *d
	}
	return ""
}

// logWarnings logs what config.Parse found probably wrong in a valid
// config, one WARN line each.
func logWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings {
		log.Warn("config warning", "file", w.File, "line", w.Line, "warning", w.Msg)
	}
}

// warnRestart says which of cfg's settings the running process cannot
// apply: the listeners were bound at start and keep serving where they are.
func (r *reloader) warnRestart(cfg *config.Config) {
	changed := func(setting string, was, now any) {
		if was != now {
			r.log.Warn("a listener setting changed; it takes effect after a restart",
				"setting", setting, "running", was, "file", now)
		}
	}
	changed("server.listen", r.started.Server.Listen, cfg.Server.Listen)
	changed("server.max_header_bytes", r.started.Server.MaxHeaderBytes, cfg.Server.MaxHeaderBytes)
	changed("server.listen_tls", r.started.Server.ListenTLS, cfg.Server.ListenTLS)
	changed("server.h2c", r.started.Server.H2C, cfg.Server.H2C)
	changed("server.http2", r.started.Server.HTTP2, cfg.Server.HTTP2)
	changed("admin.listen", r.started.Admin.Listen, cfg.Admin.Listen)
	changed("rls.listen", r.started.RLS.Listen, cfg.RLS.Listen)
	// The rate-limit service watches the directory it started with.
	changed("rls.config_dir", r.started.RLS.ConfigDir, cfg.RLS.ConfigDir)
	// The service's answers are set when it starts.
	changed("rls.shadow", r.started.RLS.Shadow, cfg.RLS.Shadow)
	changed("rls.quota_mode", r.started.RLS.QuotaMode, cfg.RLS.QuotaMode)
	changed("rls.response_metadata", r.started.RLS.ResponseMetadata, cfg.RLS.ResponseMetadata)
	changed("rls.response_headers", r.started.RLS.ResponseHeaders, cfg.RLS.ResponseHeaders)
	// And the TLS files it started with; what they hold reloads.
	changed("rls.tls", tlsFiles(r.started), tlsFiles(cfg))
	// And the management server it subscribed to.
	changed("rls.xds", xdsServer(r.started), xdsServer(cfg))
}

// xdsSubscription is rls.xds by value, so that two can be compared.
type xdsSubscription struct {
	Addr, NodeID string
	TLS          config.RLSXDSTLS
	Plaintext    bool
}

// xdsServer is rls.xds of cfg, the zero value when it is absent.
func xdsServer(cfg *config.Config) xdsSubscription {
	x := cfg.RLS.XDS
	if x == nil {
		return xdsSubscription{}
	}
	s := xdsSubscription{Addr: x.Addr, NodeID: x.NodeID, Plaintext: x.TLS == nil}
	if x.TLS != nil {
		s.TLS = *x.TLS
	}
	return s
}

// tlsFiles is rls.tls of cfg, the zero value when it is absent.
func tlsFiles(cfg *config.Config) config.RLSTLS {
	if cfg.RLS.TLS == nil {
		return config.RLSTLS{}
	}
	return *cfg.RLS.TLS
}

// stop refuses every later reload and waits for a running one to finish,
// so that the gateway is not closed under a swap.
func (r *reloader) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
}

// watch reloads whenever the config file changes, until the returned
// function is called.
//
// It watches the file's directory, not the file: editors and deployment
// tools replace a file by writing a new one and renaming it over the old,
// and a watch on the old file's inode would see it removed and then
// nothing. Kubernetes mounts a ConfigMap as symlinks through a "..data"
// entry that it swaps on update, so a change of "..data" counts as a change
// of the file too.
func (r *reloader) watch() (stop func(), err error) {
	abs, err := filepath.Abs(r.path)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(abs)
	return filewatch.Dir(filepath.Dir(abs), func(base string) bool { return base == name || base == "..data" },
		func() { r.reload("file change") },
		func(err error) { r.log.Warn("watching the config file", "file", r.path, "error", err.Error()) })
}

// limitCount is the number of limits a config declares, global ones
// included.
func limitCount(cfg *config.Config) int {
	n := len(cfg.GlobalLimits)
	for _, r := range cfg.Routes {
		n += len(r.Limits)
	}
	return n
}
