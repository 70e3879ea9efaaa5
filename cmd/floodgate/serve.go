package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
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

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", "[-c FILE] [--listen ADDR] [--admin ADDR] [--watch=false]",
		"Run the gateway, and the admin listener the configuration names.\n\n"+
			"The configuration reloads on SIGHUP, on POST /admin/reload, and when the file changes;\n"+
			"a file that does not load is refused and the running configuration stays.\n"+
			"SIGINT or SIGTERM stops accepting, drains in-flight requests for up to\n"+
			"server.shutdown_timeout and exits 0; a second signal exits at once with 1.")
	file := fs.String("c", "floodgate.yaml", "the configuration `FILE`")
	watch := fs.Bool("watch", true, "reload when the configuration file changes")
	var flags config.Flags
	fs.Func("listen", "serve the gateway on `ADDR` in place of server.listen", func(addr string) error {
		flags.Listen = &config.Flag{Name: "--listen", Value: addr}
		return nil
	})
	fs.Func("admin", "serve the admin listener on `ADDR` in place of admin.listen (\"\": none); "+
		"beyond loopback it needs admin.token, admin.token_env or admin.allow_open", func(addr string) error {
		flags.AdminListen = &config.Flag{Name: "--admin", Value: addr}
		return nil
	})
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q; the config file is given with -c FILE", fs.Arg(0))
	}

	// The flags are applied on every load, the first and each reload, and
	// checked with the file: a reload cannot drop the token that an open
	// --admin address needs.
	cfg, sum, err := loadConfig(*file, flags)
	if err != nil {
		// Before the gateway runs, the user is at a terminal or reading a
		// unit's output: print the problems as check does, not as JSON.
		for _, line := range admin.ErrorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return exitFailure
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := &server{file: *file, flags: flags, log: log, stdout: stdout, stderr: stderr}
	return s.run(cfg, sum, *watch)
}

// server is one run of "floodgate serve".
type server struct {
	file   string
	flags  config.Flags // what the command line gives in place of the file
	log    *slog.Logger
	stdout io.Writer // server.access_log: stdout
	stderr io.Writer // where the log goes, and server.access_log: stderr

	gw       *gateway.Gateway
	reloader *reloader
	draining atomic.Bool
	// certs is the TLS listener's certificates; nil without
	// server.listen_tls.
	certs *edgeTLS
	// rlsDegraded is what the rate-limit service has to say on /readyz
	// (rlsserver.Server.Degraded); nil without rls.listen.
	rlsDegraded func() string
}

func (s *server) run(cfg *config.Config, sum [sha256.Size]byte, watch bool) int {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	info, _ := debug.ReadBuildInfo()
	v, c := buildVersion(version, commit, info)
	gw, err := gateway.New(cfg, gateway.Options{
		Logger: s.log, Registerer: reg, Stdout: s.stdout, Stderr: s.stderr,
		Version: v + " (commit " + c + ")", ConfigDigest: hex.EncodeToString(sum[:]),
	})
	if err != nil {
		s.log.Error("cannot start the gateway", "file", s.file, "error", err.Error())
		return exitFailure
	}
	s.gw = gw
	s.reloader = &reloader{path: s.file, flags: s.flags, gw: gw, log: s.log, started: cfg, sum: sum}
	logWarnings(s.log, cfg)
	if cfg.Store.Type == config.StoreRedis {
		// A store that does not answer is said at once, not at the first
		// request; the gateway serves anyway, deciding by on_error, and
		// says when the store answers again.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := gw.CheckStore(ctx); err != nil {
			s.log.Warn("rate-limit store does not answer; deciding by on_error until it does", "error", err.Error())
		}
		cancel()
	}

	// Bind before serving, so that an address in use is a clean exit 1
	// rather than a goroutine's error.
	// An empty server.listen (a config that only serves rls) opens no
	// gateway listener at all.
	var ln, tlsLn net.Listener
	if cfg.Server.Listen != "" {
		if ln, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
			gw.Close()
			s.log.Error("cannot listen", "listener", "gateway", "error", err.Error())
			return exitFailure
		}
	}
	closeGateway := func() {
		if ln != nil {
			ln.Close()
		}
		if tlsLn != nil {
			tlsLn.Close()
		}
		if s.certs != nil {
			s.certs.stop()
		}
	}
	if cfg.Server.ListenTLS != "" {
		if tlsLn, err = net.Listen("tcp", cfg.Server.ListenTLS); err != nil {
			closeGateway()
			gw.Close()
			s.log.Error("cannot listen", "listener", "gateway_tls", "error", err.Error())
			return exitFailure
		}
		if s.certs, err = newEdgeTLS(cfg.Server.TLS, s.log.With("listener", "gateway_tls"), watch); err != nil {
			closeGateway()
			gw.Close()
			s.log.Error("cannot load the server certificates", "listener", "gateway_tls", "errors", errorLines(err))
			return exitFailure
		}
	}
	srv := &http.Server{
		Handler:           gw,
		MaxHeaderBytes:    cfg.Server.MaxHeaderBytes,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.With("listener", "gateway").Handler(), slog.LevelWarn),
	}
	handshakeFailures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "gateway_tls_handshake_failures_total",
		Help: "TLS handshakes on server.listen_tls that failed or ran out of time.",
	})
	reg.MustRegister(handshakeFailures)
	es := edge.New(edge.Options{
		HTTP:             srv,
		Listener:         gw.Listener,
		HTTP2:            http2Server(cfg, gw, srv.ErrorLog),
		HandshakeTimeout: readHeaderTimeout,
		Log:              s.log.With("listener", "gateway"),
		HandshakeFailed:  handshakeFailures.Inc,
	})
	closeListeners := closeGateway
	closeGateway = func() {
		closeListeners()
		es.Close()
	}
	var adminSrv *http.Server
	var adminLn net.Listener
	if cfg.Admin.Listen != "" {
		if adminLn, err = net.Listen("tcp", cfg.Admin.Listen); err != nil {
			closeGateway()
			gw.Close()
			s.log.Error("cannot listen", "listener", "admin", "error", err.Error())
			return exitFailure
		}
		ah := admin.NewHandler(adminBackend{gw, s}, reg, s.log)
		defer ah.Close()
		adminSrv = &http.Server{
			Handler:           ah,
			ReadHeaderTimeout: readHeaderTimeout,
			IdleTimeout:       idleTimeout,
			ErrorLog:          slog.NewLogLogger(s.log.With("listener", "admin").Handler(), slog.LevelWarn),
		}
	}

	var rlsSrv *rlsserver.Server
	if cfg.RLS.Listen != "" {
		if rlsSrv, err = rlsserver.Start(cfg, gw, reg, s.log, watch); err != nil {
			closeGateway()
			if adminLn != nil {
				adminLn.Close()
			}
			gw.Close()
			s.log.Error("cannot start the rate-limit service", "listener", "rls", "errors", errorLines(err))
			return exitFailure
		}
		s.reloader.rlsCerts = rlsSrv.ReloadCerts()
		s.rlsDegraded = rlsSrv.Degraded
	}
	s.reloader.certs = s.certs

	// Subscribe to signals before serving: a SIGTERM that arrives just
	// after the listener opens must drain, not kill.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	if watch {
		stopWatch, err := s.reloader.watch()
		if err != nil {
			// Not fatal: SIGHUP and the admin API still reload.
			s.log.Warn("cannot watch the config file; reload with SIGHUP or POST /admin/reload", "file", s.file, "error", err.Error())
		} else {
			defer stopWatch()
		}
	}

	serveErr := make(chan error, 5)
	listenAddr, tlsAddr, adminAddr, rlsAddr := "", "", "", ""
	go func() { serveErr <- <-es.Err() }()
	if ln != nil {
		listenAddr = ln.Addr().String()
		go func() { serveErr <- es.ServeClear(ln, cfg.Server.H2C) }()
	}
	if tlsLn != nil {
		tlsAddr = tlsLn.Addr().String()
		go func() { serveErr <- es.ServeTLS(tlsLn, s.certs.tlsConfig()) }()
	}
	if adminSrv != nil {
		adminAddr = adminLn.Addr().String()
		go func() { serveErr <- adminSrv.Serve(adminLn) }()
	}
	if rlsSrv != nil {
		rlsAddr = rlsSrv.Addr().String()
		go func() {
			if err := rlsSrv.Serve(); err != nil {
				serveErr <- err
			}
		}()
	}
	s.log.Info("floodgate serving", "version", v, "file", s.file,
		"listen", listenAddr, "admin", adminAddr, "rls", rlsAddr, "listen_tls", tlsAddr, "h2c", cfg.Server.H2C,
		"routes", len(cfg.Routes), "limits", limitCount(cfg), "store", string(cfg.Store.Type))

	code := exitOK
	var sig os.Signal
wait:
	for {
		select {
		case sig = <-sigs:
			if sig == syscall.SIGHUP {
				// In its own goroutine so that a reload waiting on a
				// slow store cannot delay a SIGTERM.
				go s.reloader.reload("SIGHUP")
				continue
			}
			srv := s.gw.Config().Server
			if srv.ShutdownDelay > 0 {
				s.log.Info("shutting down: serving on until the load balancer stops sending",
					"signal", sig.String(), "shutdown_delay", srv.ShutdownDelay.String())
			} else {
				s.log.Info("shutting down: draining in-flight requests",
					"signal", sig.String(), "timeout", srv.ShutdownTimeout.String())
			}
			break wait
		case err := <-serveErr:
			// A listener died under us; stop the rest cleanly and say so
			// in the exit code.
			s.log.Error("a listener failed", "error", err.Error())
			code = exitFailure
			break wait
		}
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.shutdown(es, adminSrv, rlsSrv)
	}()
	for {
		select {
		case <-done:
			s.log.Info("stopped")
			return code
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				continue
			}
			// The operator does not want to wait for the drain.
			s.log.Warn("second signal: exiting without waiting for in-flight requests", "signal", sig.String())
			return exitFailure
		}
	}
}

// shutdown serves on for server.shutdown_delay with /readyz answering
// 503, then stops accepting, drains the gateway's in-flight requests for
// up to server.shutdown_timeout of the running config, then stops the
// admin listener, which kept answering meanwhile so that /readyz could
// tell a load balancer to send no more.
func (s *server) shutdown(es *edge.Server, adminSrv *http.Server, rlsSrv *rlsserver.Server) {
	s.draining.Store(true)
	s.reloader.stop()
	srv := s.gw.Config().Server
	timeout := srv.ShutdownTimeout
	if srv.ShutdownDelay > 0 {
		// Still accepting and serving, while /readyz says 503: the load
		// balancer, or Kubernetes' endpoints, take this long to stop
		// sending new requests here.
		time.Sleep(srv.ShutdownDelay)
		s.log.Info("shutting down: draining in-flight requests", "timeout", timeout.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rlsDone chan struct{}
	if rlsSrv != nil {
		// The rate-limit service drains alongside the gateway.
		rlsDone = make(chan struct{})
		go func() {
			defer close(rlsDone)
			rlsSrv.Stop(timeout)
		}()
	}
	if err := es.Shutdown(ctx); err != nil {
		s.log.Warn("drain timed out; closing the remaining connections", "timeout", timeout.String(), "error", err.Error())
	}
	// What is still open after the drain: HTTP/2 connections whose
	// streams did not end, and those that timed out.
	es.Close()
	if s.certs != nil {
		s.certs.stop()
	}
	if rlsDone != nil {
		<-rlsDone
	}
	if adminSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), adminShutdownTimeout)
		defer cancel()
		if err := adminSrv.Shutdown(ctx); err != nil {
			adminSrv.Close()
		}
	}
	if err := s.gw.Close(); err != nil {
		s.log.Warn("closing the gateway", "error", err.Error())
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
	if b.s.rlsDegraded != nil {
		more = append(more, b.s.rlsDegraded())
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
