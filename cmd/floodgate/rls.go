package main

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
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/rls"
)

// loadRules reads the rate-limit service's rule files; no directory means
// no rules.
func loadRules(cfg *config.Config) (*rls.Rules, error) {
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

// errorLines splits an error made by errors.Join into its lines.
func errorLines(err error) []string {
	return strings.Split(err.Error(), "\n")
}

// rlsServer is the Envoy rate-limit service of one "floodgate serve": a
// gRPC server on rls.listen deciding in the gateway's store, with rules
// that reload when their directory changes.
type rlsServer struct {
	srv       *grpc.Server
	ln        net.Listener
	svc       *rls.Service
	stopWatch func()
}

// startRLS binds rls.listen and loads the rules; Serve starts answering.
func startRLS(cfg *config.Config, gw *gateway.Gateway, reg prometheus.Registerer, log *slog.Logger, watch bool) (*rlsServer, error) {
	rules, err := loadRules(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.RLS.Listen)
	if err != nil {
		return nil, err
	}
	log = log.With("listener", "rls")
	r := &rlsServer{
		srv: grpc.NewServer(),
		ln:  ln,
		svc: rls.New(rls.Options{
			Store: gw.Store, Rules: rules, Logger: log, Registerer: reg,
			Shadow: cfg.RLS.Shadow, Headers: rls.Headers(cfg.RLS.ResponseHeaders),
		}),
	}
	rlsv3.RegisterRateLimitServiceServer(r.srv, r.svc)
	if dir := cfg.RLS.ConfigDir; dir != "" && watch {
		yaml := func(base string) bool {
			return base == "..data" || strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml")
		}
		reload := func() {
			rules, err := rls.LoadDir(dir)
			if err != nil {
				log.Error("rate-limit rules refused; the running rules stay", "dir", dir, "errors", errorLines(err))
				return
			}
			r.svc.SetRules(rules)
			log.Info("rate-limit rules reloaded", "dir", dir, "domains", rules.Domains())
		}
		warn := func(err error) { log.Warn("watching the rate-limit rules", "dir", dir, "error", err.Error()) }
		if r.stopWatch, err = watchDir(filepath.Clean(dir), yaml, reload, warn); err != nil {
			log.Warn("cannot watch the rate-limit rules; they reload only with a restart", "dir", dir, "error", err.Error())
		}
	}
	return r, nil
}

// Serve answers until Stop; it returns the listener's error.
func (r *rlsServer) Serve() error {
	err := r.srv.Serve(r.ln)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Stop lets calls in flight finish for up to timeout, then closes them.
func (r *rlsServer) Stop(timeout time.Duration) {
	if r.stopWatch != nil {
		r.stopWatch()
	}
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
}
