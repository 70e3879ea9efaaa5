// Package rlsserver serves Envoy's rate-limit service (package rls) for
// floodgate serve: the gRPC server on rls.listen with its health service
// and TLS, the rule files of rls.config_dir reloaded when they change,
// and the xDS client that takes the rules from a management server
// instead (rls.xds).
package rlsserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/filewatch"
	"github.com/floodgate-gw/floodgate/rls"
)

// LoadRules reads the rate-limit service's rule files; no directory means
// no rules.
func LoadRules(cfg *config.Config) (*rls.Rules, error) {
	dir := cfg.RLS.ConfigDir
	if dir == "" {
		return &rls.Rules{}, nil
	}
	// A directory that is not there is a problem of the config file, and
	// is reported at its line like the file's others.
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		why := "is not a directory"
		var pe *fs.PathError
		if errors.As(err, &pe) {
			why = "cannot be read: " + pe.Err.Error()
		}
		return nil, config.Errors{{File: cfg.File, Line: cfg.Line("rls.config_dir"), Msg: fmt.Sprintf("rls.config_dir: %q %s", dir, why)}}
	}
	return rls.LoadDir(dir)
}

// Server is the Envoy rate-limit service of one "floodgate serve": a
// gRPC server on rls.listen deciding in the gateway's store, with rules
// that reload when their directory changes.
type Server struct {
	srv       *grpc.Server
	ln        net.Listener
	svc       *rls.Service
	health    *health.Server
	certs     *rlsCerts // nil without rls.tls
	xds       *xdsRules // nil without rls.xds
	stopWatch func()
	stopCerts func()
	// stopXDSCerts stops the watch of rls.xds.tls's files.
	stopXDSCerts func()
	stopProbe    func()

	// rulesProblem and storeProblem are what /readyz says while the
	// rule files on disk were refused (the running rules stay) and while
	// the store does not answer; "" when all is well.
	rulesProblem, storeProblem atomic.Pointer[string]
}

// degraded is what /readyz details of the service: a refused rule file,
// a store that does not answer, rules that may not be the xDS server's.
func (r *Server) Degraded() string {
	var ps []string
	for _, p := range []*atomic.Pointer[string]{&r.rulesProblem, &r.storeProblem} {
		if v := p.Load(); v != nil && *v != "" {
			ps = append(ps, *v)
		}
	}
	if r.xds != nil {
		if v := r.xds.degraded(); v != "" {
			ps = append(ps, v)
		}
	}
	return strings.Join(ps, "; ")
}

func setProblem(p *atomic.Pointer[string], v string) { p.Store(&v) }

// rlsService is the health service name of the rate-limit service, as
// Envoy's gRPC health check asks with service_name set.
const rlsService = "envoy.service.ratelimit.v3.RateLimitService"

// healthProbeInterval is how often the health service asks the store
// whether it answers.
const healthProbeInterval = time.Second

// Start binds rls.listen and loads the rules; Serve starts answering.
func Start(cfg *config.Config, gw *gateway.Gateway, reg prometheus.Registerer, log *slog.Logger, watch bool) (*Server, error) {
	rules, err := LoadRules(cfg)
	if err != nil {
		return nil, err
	}
	log = log.With("listener", "rls")
	var opts []grpc.ServerOption
	var certs *rlsCerts
	if t := cfg.RLS.TLS; t != nil {
		if certs, err = loadRLSCerts(*t, log); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(certs.tlsConfig())))
	}
	ln, err := net.Listen("tcp", cfg.RLS.Listen)
	if err != nil {
		return nil, err
	}
	r := &Server{
		srv: grpc.NewServer(opts...),
		ln:  ln,
		svc: rls.New(rls.Options{
			Store: gw.Store, Rules: rules, Logger: log, Registerer: reg,
			Shadow: cfg.RLS.Shadow, Headers: rls.Headers(cfg.RLS.ResponseHeaders),
			QuotaMode: cfg.RLS.QuotaMode, Metadata: cfg.RLS.ResponseMetadata,
		}),
		certs: certs,
	}
	if x := cfg.RLS.XDS; x != nil {
		if r.xds, err = startXDS(*x, r.svc, log); err != nil {
			ln.Close()
			return nil, err
		}
		if c := r.xds.certs; c != nil && watch {
			if r.stopXDSCerts, err = c.watch(); err != nil {
				log.Warn("cannot watch the xDS client TLS files; they reload only with a restart", "error", err.Error())
			}
		}
	}
	if certs != nil && watch {
		if r.stopCerts, err = certs.watch(); err != nil {
			log.Warn("cannot watch the TLS files; they reload only with a restart", "error", err.Error())
		}
	}
	rlsv3.RegisterRateLimitServiceServer(r.srv, r.svc)
	r.health = health.NewServer()
	healthpb.RegisterHealthServer(r.srv, r.health)
	reflection.Register(r.srv)
	r.stopProbe = r.probe(gw, log)
	if dir := cfg.RLS.ConfigDir; dir != "" && watch {
		yaml := func(base string) bool {
			return base == "..data" || strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")
		}
		reload := func() {
			rules, err := rls.LoadDir(dir)
			if err != nil {
				lines := strings.Split(err.Error(), "\n")
				log.Error("rate-limit rules refused; the running rules stay", "dir", dir, "errors", lines)
				more := ""
				if len(lines) > 1 {
					more = fmt.Sprintf(" and %d more", len(lines)-1)
				}
				setProblem(&r.rulesProblem, fmt.Sprintf("rls.config_dir: rules refused, the running rules stay (%s%s)", lines[0], more))
				return
			}
			setProblem(&r.rulesProblem, "")
			r.svc.SetRules(rules)
			log.Info("rate-limit rules reloaded", "dir", dir, "domains", rules.Domains())
		}
		warn := func(err error) { log.Warn("watching the rate-limit rules", "dir", dir, "error", err.Error()) }
		if r.stopWatch, err = filewatch.Dir(filepath.Clean(dir), yaml, reload, warn); err != nil {
			log.Warn("cannot watch the rate-limit rules; they reload only with a restart", "dir", dir, "error", err.Error())
		}
	}
	return r, nil
}

// ReloadCerts reads the TLS files of the service and of its xDS
// connection again; nil when there are none.
func (r *Server) ReloadCerts() func() {
	var fs []func()
	if r.certs != nil {
		fs = append(fs, r.certs.reload)
	}
	if r.xds != nil && r.xds.certs != nil {
		fs = append(fs, r.xds.certs.reload)
	}
	if len(fs) == 0 {
		return nil
	}
	return func() {
		for _, f := range fs {
			f()
		}
	}
}

// probe sets the health of the service, overall ("") and by its name, to
// SERVING while the store answers and NOT_SERVING while it does not: a
// ShouldRateLimit then fails UNAVAILABLE, and Envoy should send its calls
// to an instance that can decide. It starts NOT_SERVING, so that no check
// passes before the store first answered.
func (r *Server) probe(gw *gateway.Gateway, log *slog.Logger) (stop func()) {
	set := func(st healthpb.HealthCheckResponse_ServingStatus) {
		r.health.SetServingStatus("", st)
		r.health.SetServingStatus(rlsService, st)
	}
	set(healthpb.HealthCheckResponse_NOT_SERVING)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(healthProbeInterval)
		defer tick.Stop()
		serving := false
		for {
			ctx, cancel := context.WithTimeout(context.Background(), healthProbeInterval)
			err := gw.CheckStore(ctx)
			cancel()
			if now := err == nil; now != serving {
				serving = now
				if serving {
					set(healthpb.HealthCheckResponse_SERVING)
					setProblem(&r.storeProblem, "")
				} else {
					set(healthpb.HealthCheckResponse_NOT_SERVING)
					setProblem(&r.storeProblem, "rls: the store does not answer, so ShouldRateLimit answers UNAVAILABLE ("+err.Error()+")")
					log.Warn("rate-limit store does not answer; health is NOT_SERVING", "error", err.Error())
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// Addr is the address the service listens on.
func (r *Server) Addr() net.Addr { return r.ln.Addr() }

// Serve answers until Stop; it returns the listener's error.
func (r *Server) Serve() error {
	err := r.srv.Serve(r.ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop lets calls in flight finish for up to timeout, then closes them.
// The health service says NOT_SERVING from the start of the drain (to a
// client watching it; the server takes no new calls), and keeps saying so.
func (r *Server) Stop(timeout time.Duration) {
	if r.stopWatch != nil {
		r.stopWatch()
	}
	if r.stopCerts != nil {
		r.stopCerts()
	}
	if r.stopXDSCerts != nil {
		r.stopXDSCerts()
	}
	if r.xds != nil {
		r.xds.close()
	}
	r.stopProbe()
	r.health.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		r.srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.srv.Stop()
	}
	r.ln.Close() // when Serve never took it
}
