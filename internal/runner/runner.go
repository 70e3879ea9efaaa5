// Package runner runs floodgate serve: it binds the gateway's listeners
// (clear, TLS, h2c), the admin listener and the rate-limit service,
// reloads the configuration on SIGHUP, on POST /admin/reload and when the
// file changes (refusing a file that does not load, the running one
// staying), and on SIGINT or SIGTERM drains in order: /readyz first, the
// gateway's requests, the rate-limit service's calls, then the admin
// listener.
package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/edge"
	"github.com/floodgate-gw/floodgate/internal/rlsserver"
)

// Timeouts of the HTTP servers that the config does not set. A client gets
// ReadHeaderTimeout to send its headers, so that slow-header clients cannot
// hold connections open (Slowloris); an idle keep-alive connection is closed
// after IdleTimeout. Bodies get no server-side deadline: a slow upload or a
// long streaming response is legitimate, and the upstream timeouts bound
// the proxy's side of it.
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 120 * time.Second

	// adminShutdownTimeout bounds the wait for admin requests (a scrape,
	// a probe) once the gateway has drained.
	adminShutdownTimeout = 2 * time.Second
)

// Options are what floodgate serve's command line gives.
type Options struct {
	// File is the configuration file; Flags are applied on every load of
	// it, the first and each reload, and checked with it.
	File  string
	Flags config.Flags
	// Watch reloads when the file changes (and the TLS and rule files
	// when theirs do).
	Watch bool
	// Log receives the JSON log; Stdout and Stderr are server.access_log's
	// stdout and stderr.
	Log            *slog.Logger
	Stdout, Stderr io.Writer
	// Version and Commit are the build's, for the log and the metrics.
	Version, Commit string
}

// ErrFailed is what Run returns when a listener could not be opened or
// failed while serving, or a second signal cut the drain short; the log
// has said why.
var ErrFailed = errors.New("floodgate serve failed")

// server is one run of floodgate serve.
type server struct {
	Options
	reg      *prometheus.Registry
	gw       *gateway.Gateway
	reloader *reloader
	draining atomic.Bool

	ln, tlsLn, adminLn net.Listener // nil for a listener the config has none of
	es                 *edge.Server
	adminSrv           *http.Server
	ah                 *admin.Handler
	rls                *rlsserver.Server // nil without rls.listen
	// certs is the TLS listener's certificates; nil without
	// server.listen_tls.
	certs *edgeTLS
}

// Run serves cfg, loaded from o.File with digest sum, until a signal ends
// it and the drain is over (nil), or something fails (ErrFailed).
func Run(cfg *config.Config, sum [sha256.Size]byte, o Options) error {
	s := &server{Options: o}
	if err := s.start(cfg, sum); err != nil {
		return err
	}
	if err := s.listen(cfg); err != nil {
		s.closeAll()
		return err
	}
	// Subscribe to signals before serving: a SIGTERM that arrives just
	// after the listener opens must drain, not kill.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if s.Watch {
		stopWatch, err := s.reloader.watch()
		if err != nil {
			// Not fatal: SIGHUP and the admin API still reload.
			s.Log.Warn("cannot watch the config file; reload with SIGHUP or POST /admin/reload", "file", s.File, "error", err.Error())
		} else {
			defer stopWatch()
		}
	}
	if s.ah != nil {
		defer s.ah.Close()
	}
	failed := s.wait(sigs, s.serve(cfg))
	if err := s.drain(sigs); err != nil {
		return err
	}
	return failed
}

// start builds the gateway of cfg.
func (s *server) start(cfg *config.Config, sum [sha256.Size]byte) error {
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	gw, err := gateway.New(cfg, gateway.Options{
		Logger: s.Log, Registerer: s.reg, Stdout: s.Stdout, Stderr: s.Stderr,
		Version: s.Version + " (commit " + s.Commit + ")", ConfigDigest: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		s.Log.Error("cannot start the gateway", "file", s.File, "error", err.Error())
		return ErrFailed
	}
	s.gw = gw
	s.reloader = &reloader{path: s.File, flags: s.Flags, gw: gw, log: s.Log, started: cfg, sum: sum}
	logWarnings(s.Log, cfg)
	if cfg.Store.Type == config.StoreRedis {
		// A store that does not answer is said at once, not at the first
		// request; the gateway serves anyway, deciding by on_error, and
		// says when the store answers again.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := gw.CheckStore(ctx); err != nil {
			s.Log.Warn("rate-limit store does not answer; deciding by on_error until it does", "error", err.Error())
		}
		cancel()
	}
	return nil
}

// listen binds every listener of cfg before any serves, so that an
// address in use is a clean exit 1 rather than a goroutine's error, and
// starts the rate-limit service. An empty server.listen (a config that
// only serves rls) opens no gateway listener at all.
func (s *server) listen(cfg *config.Config) error {
	fail := func(listener, msg string, err error) error {
		s.Log.Error(msg, "listener", listener, "error", err.Error())
		return ErrFailed
	}
	var err error
	if cfg.Server.Listen != "" {
		if s.ln, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
			return fail("gateway", "cannot listen", err)
		}
	}
	if cfg.Server.ListenTLS != "" {
		if s.tlsLn, err = net.Listen("tcp", cfg.Server.ListenTLS); err != nil {
			return fail("gateway_tls", "cannot listen", err)
		}
		if s.certs, err = newEdgeTLS(cfg.Server.TLS, s.Log.With("listener", "gateway_tls"), s.Watch); err != nil {
			s.Log.Error("cannot load the server certificates", "listener", "gateway_tls", "errors", strings.Split(err.Error(), "\n"))
			return ErrFailed
		}
	}
	s.es = s.edge(cfg)
	if cfg.Admin.Listen != "" {
		if s.adminLn, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			return fail("admin", "cannot listen", err)
		}
		s.ah = admin.NewHandler(adminBackend{s.gw, s}, s.reg, s.Log)
		s.adminSrv = &http.Server{
			Handler:           s.ah,
			ReadHeaderTimeout: readHeaderTimeout,
			IdleTimeout:       idleTimeout,
			ErrorLog:          slog.NewLogLogger(s.Log.With("listener", "admin").Handler(), slog.LevelWarn),
		}
	}
	if cfg.RLS.Listen != "" {
		if s.rls, err = rlsserver.Start(cfg, s.gw, s.reg, s.Log, s.Watch); err != nil {
			s.Log.Error("cannot start the rate-limit service", "listener", "rls", "errors", strings.Split(err.Error(), "\n"))
			return ErrFailed
		}
		s.reloader.rlsCerts = s.rls.ReloadCerts()
	}
	s.reloader.certs = s.certs
	return nil
}

// edge is the server of the gateway's listeners: HTTP/1.1, and HTTP/2 by
// ALPN or the h2c preface.
func (s *server) edge(cfg *config.Config) *edge.Server {
	srv := &http.Server{
		Handler:           s.gw,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.Log.With("listener", "gateway").Handler(), slog.LevelWarn),
	}
	handshakeFailures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gateway_tls_handshake_failures_total",
		Help: "TLS handshakes on server.listen_tls that failed or ran out of time.",
	})
	s.reg.MustRegister(handshakeFailures)
	return edge.New(edge.Options{
		HTTP:             srv,
		Listener:         s.gw.Listener,
		HTTP2:            http2Server(cfg, s.gw, srv.ErrorLog),
		HandshakeTimeout: readHeaderTimeout,
		Log:              s.Log.With("listener", "gateway"),
		HandshakeFailed:  handshakeFailures.Inc,
	})
}

// closeAll closes what listen opened, and the gateway, when serve does
// not start.
func (s *server) closeAll() {
	for _, ln := range []net.Listener{s.ln, s.tlsLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if s.certs != nil {
		s.certs.stop()
	}
	if s.es != nil {
		s.es.Close()
	}
	if s.adminLn != nil {
		s.adminLn.Close()
	}
	if s.ah != nil {
		s.ah.Close()
	}
	s.gw.Close()
}

// serve starts serving every listener; the channel has the error of one
// that fails.
func (s *server) serve(cfg *config.Config) <-chan error {
	serveErr := make(chan error, 5)
	listenAddr, tlsAddr, adminAddr, rlsAddr := "", "", "", ""
	go func() { serveErr <- <-s.es.Err() }()
	if s.ln != nil {
		listenAddr = s.ln.Addr().String()
		go func() { serveErr <- s.es.ServeClear(s.ln, cfg.Server.H2C) }()
	}
	if s.tlsLn != nil {
		tlsAddr = s.tlsLn.Addr().String()
		go func() { serveErr <- s.es.ServeTLS(s.tlsLn, s.certs.tlsConfig()) }()
	}
	if s.adminSrv != nil {
		adminAddr = s.adminLn.Addr().String()
		go func() { serveErr <- s.adminSrv.Serve(s.adminLn) }()
	}
	if s.rls != nil {
		rlsAddr = s.rls.Addr().String()
		go func() {
			if err := s.rls.Serve(); err != nil {
				serveErr <- err
			}
		}()
	}
	s.Log.Info("floodgate serving", "version", s.Version, "file", s.File,
		"listen", listenAddr, "admin", adminAddr, "rls", rlsAddr, "listen_tls", tlsAddr, "h2c", cfg.Server.H2C,
		"routes", len(cfg.Routes), "limits", limitCount(cfg), "store", string(cfg.Store.Type))
	return serveErr
}

// wait serves until SIGINT or SIGTERM (nil), reloading on SIGHUP, or until
// a listener fails (ErrFailed).
func (s *server) wait(sigs <-chan os.Signal, serveErr <-chan error) error {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				// In its own goroutine so that a reload waiting on a
				// slow store cannot delay a SIGTERM.
				go s.reloader.reload("SIGHUP")
				continue
			}
			srv := s.gw.Config().Server
			if srv.ShutdownDelay > 0 {
				s.Log.Info("shutting down: serving on until the load balancer stops sending",
					"signal", sig.String(), "shutdown_delay", srv.ShutdownDelay.String())
			} else {
				s.Log.Info("shutting down: draining in-flight requests",
					"signal", sig.String(), "timeout", srv.ShutdownTimeout.String())
			}
			return nil
		case err := <-serveErr:
			// A listener died under us; stop the rest cleanly and say so
			// in the exit code.
			s.Log.Error("a listener failed", "error", err.Error())
			return ErrFailed
		}
	}
}

// drain shuts down; a second SIGINT or SIGTERM cuts it short (ErrFailed).
func (s *server) drain(sigs <-chan os.Signal) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.shutdown()
	}()
	for {
		select {
		case <-done:
			s.Log.Info("stopped")
			return nil
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				continue
			}
			// The operator does not want to wait for the drain.
			s.Log.Warn("second signal: exiting without waiting for in-flight requests", "signal", sig.String())
			return ErrFailed
		}
	}
}

// shutdown serves on for server.shutdown_delay with /readyz answering
// 503, then stops accepting, drains the gateway's in-flight requests for
// up to server.shutdown_timeout of the running config, then stops the
// admin listener, which kept answering meanwhile so that /readyz could
// tell a load balancer to send no more.
func (s *server) shutdown() {
	s.draining.Store(true)
	s.reloader.stop()
	srv := s.gw.Config().Server
	timeout := srv.ShutdownTimeout
	if srv.ShutdownDelay > 0 {
		// Still accepting and serving, while /readyz says 503: the load
		// balancer, or Kubernetes' endpoints, take this long to stop
		// sending new requests here.
		time.Sleep(srv.ShutdownDelay)
		s.Log.Info("shutting down: draining in-flight requests", "timeout", timeout.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rlsDone chan struct{}
	if s.rls != nil {
		// The rate-limit service drains alongside the gateway.
		rlsDone = make(chan struct{})
		go func() {
			defer close(rlsDone)
			s.rls.Stop(timeout)
		}()
	}
	if err := s.es.Shutdown(ctx); err != nil {
		s.Log.Warn("drain timed out; closing the remaining connections", "timeout", timeout.String(), "error", err.Error())
	}
	// What is still open after the drain: HTTP/2 connections whose
	// streams did not end, and those that timed out.
	s.es.Close()
	if s.certs != nil {
		s.certs.stop()
	}
	if rlsDone != nil {
		<-rlsDone
	}
	if s.adminSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), adminShutdownTimeout)
		defer cancel()
		if err := s.adminSrv.Shutdown(ctx); err != nil {
			s.adminSrv.Close()
		}
	}
	if err := s.gw.Close(); err != nil {
		s.Log.Warn("closing the gateway", "error", err.Error())
	}
}

// adminBackend is the running server as the admin API sees it: the
// gateway, but for a reload, which goes through the same reloader as
// SIGHUP and the file watch, a draining server, which is not ready, and
// what is degraded besides the gateway.
type adminBackend struct {
	*gateway.Gateway
	s *server
}

var (
	_ admin.FleetBackend = adminBackend{}
	_ admin.Auditor      = adminBackend{}
	_ admin.FleetViewer  = adminBackend{}
	_ admin.Overrider    = adminBackend{}
	_ admin.TopKeyser    = adminBackend{}
	_ admin.RouteViewer  = adminBackend{}
)

func (b adminBackend) Reload() error { return b.s.reloader.reload("admin API") }

// Degraded says, besides what the gateway says, that the file on disk was
// refused while the previous config serves, and that the rate-limit rules
// may not be the xDS server's.
func (b adminBackend) Degraded() string {
	ds := b.s.reloader.status()
	more := []string{b.s.gw.Degraded()}
	if b.s.rls != nil {
		more = append(more, b.s.rls.Degraded())
	}
	for _, d := range more {
		if d == "" {
			continue
		}
		if ds != "" {
			ds += "; "
		}
		ds += d
	}
	return ds
}

func (b adminBackend) Ready(ctx context.Context) error {
	if b.s.draining.Load() {
		return errors.New("shutting down")
	}
	return b.s.gw.Ready(ctx)
}

// http2Server is the server of the gateway's HTTP/2 connections, with
// the limits of server.http2; server.max_header_bytes bounds the header
// list unless server.http2.max_header_list_size does.
func http2Server(cfg *config.Config, h http.Handler, errorLog *log.Logger) *http.Server {
	c := cfg.Server.HTTP2
	maxHeader := cfg.Server.MaxHeaderBytes
	if c.MaxHeaderListSize > 0 {
		maxHeader = c.MaxHeaderListSize
	}
	return &http.Server{
		Handler:        h,
		MaxHeaderBytes: maxHeader,
		IdleTimeout:    idleTimeout,
		ErrorLog:       errorLog,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          c.MaxConcurrentStreams,
			MaxReadFrameSize:              c.MaxReadFrameSize,
			MaxReceiveBufferPerStream:     c.InitialStreamWindow,
			MaxReceiveBufferPerConnection: c.InitialConnWindow,
		},
	}
}
