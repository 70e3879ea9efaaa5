package rlsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/rls"
)

// ConfigType is the type URL of the resources the service
// subscribes to, as Envoy Gateway serves them to envoyproxy/ratelimit.
const ConfigType = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// The wait before a new stream doubles from xdsRetryMin up to xdsRetryMax
// while the server cannot be reached, and is back at xdsRetryMin once a
// stream has delivered a response.
const (
	xdsRetryMin = 250 * time.Millisecond
	xdsRetryMax = 15 * time.Second
)

// xdsRules keeps the service's rules in step with a management server:
// one aggregated discovery stream (state of the world) subscribed to
// every RateLimitConfig, each response applied whole or refused whole.
type xdsRules struct {
	cfg  config.RLSXDS
	svc  *rls.Service
	log  *slog.Logger
	conn *grpc.ClientConn
	// certs are the TLS files of the connection; nil in plaintext.
	certs *xdsCerts
	// problem is what /readyz says while the rules are not the server's
	// latest: "" once a response has been applied and the stream holds.
	problem atomic.Pointer[string]
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// startXDS begins to subscribe; until the first response there are no
// rules, and the service allows every descriptor.
func startXDS(cfg config.RLSXDS, svc *rls.Service, log *slog.Logger) (*xdsRules, error) {
	log = log.With("xds", cfg.Addr)
	creds := insecure.NewCredentials()
	var certs *xdsCerts
	if t := cfg.TLS; t != nil {
		var err error
		if certs, err = loadXDSCerts(*t, log); err != nil {
			return nil, err
		}
		creds = certs.creds()
	}
	// gRPC's own reconnection waits up to 120 s by default; the stream
	// loop's bounds hold only if the connection's are the same.
	conn, err := grpc.NewClient(cfg.Addr, grpc.WithTransportCredentials(creds), grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: xdsRetryMin, Multiplier: 2, Jitter: 0.2, MaxDelay: xdsRetryMax},
		MinConnectTimeout: 20 * time.Second,
	}))
	if err != nil {
		return nil, err
	}
	x := &xdsRules{cfg: cfg, svc: svc, log: log, conn: conn, certs: certs}
	x.setProblem("rls.xds: no rules received yet from " + cfg.Addr)
	ctx, cancel := context.WithCancel(context.Background())
	x.stop = cancel
	x.wg.Go(func() { x.run(ctx) })
	return x, nil
}

func (x *xdsRules) setProblem(p string) { x.problem.Store(&p) }

// degraded is what /readyz details: why the running rules may not be the
// management server's.
func (x *xdsRules) degraded() string { return *x.problem.Load() }

// close ends the subscription; the rules in place stay.
func (x *xdsRules) close() {
	x.stop()
	x.wg.Wait()
	x.conn.Close()
}

func (x *xdsRules) run(ctx context.Context) {
	wait := xdsRetryMin
	for {
		got, err := x.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if got {
			wait = xdsRetryMin
		}
		x.setProblem(fmt.Sprintf("rls.xds: the stream to %s ended (%v); the running rules stay", x.cfg.Addr, err))
		x.log.Warn("rate-limit rules: the xDS stream ended; the running rules stay, reconnecting", "error", err.Error(), "retry_in", wait.String())
		// Jitter keeps a fleet from reconnecting in step after the
		// server restarts.
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, xdsRetryMax)
	}
}

// stream runs one discovery stream until it fails; got says whether it
// delivered a response.
func (x *xdsRules) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(x.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	node := &corev3.Node{Id: x.cfg.NodeID}
	// version is that of the last applied response: an ACK repeats the
	// new one, a NACK this one.
	version := ""
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: ConfigType}); err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		got = true
		req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: ConfigType, ResponseNonce: resp.GetNonce()}
		rules, err := decodeXDS(resp)
		if err != nil {
			lines := strings.Split(err.Error(), "\n")
			x.log.Error("rate-limit rules from xDS refused; the running rules stay", "version", resp.GetVersionInfo(), "errors", lines)
			x.setProblem(fmt.Sprintf("rls.xds: version %q refused (%s); the running rules stay", resp.GetVersionInfo(), lines[0]))
			req.VersionInfo = version
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			x.svc.SetRules(rules)
			version = resp.GetVersionInfo()
			req.VersionInfo = version
			x.setProblem("")
			x.log.Info("rate-limit rules from xDS applied", "version", version, "domains", rules.Domains())
		}
		if err := st.Send(req); err != nil {
			return got, err
		}
	}
}

// decodeXDS reads a response's RateLimitConfigs into rules, refusing the
// whole response for any resource that is not one, or does not check.
func decodeXDS(resp *discoveryv3.DiscoveryResponse) (*rls.Rules, error) {
	if t := resp.GetTypeUrl(); t != ConfigType {
		return nil, fmt.Errorf("a response of type %q; the service subscribes to %s only", t, ConfigType)
	}
	var (
		cfgs []*rlsconfv3.RateLimitConfig
		errs []error
	)
	for i, res := range resp.GetResources() {
		c := &rlsconfv3.RateLimitConfig{}
		if res.GetTypeUrl() != ConfigType {
			errs = append(errs, fmt.Errorf("resource %d: of type %q, not a RateLimitConfig", i, res.GetTypeUrl()))
			continue
		}
		if err := res.UnmarshalTo(c); err != nil {
			errs = append(errs, fmt.Errorf("resource %d: not a RateLimitConfig: %w", i, err))
			continue
		}
		cfgs = append(cfgs, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rls.FromConfigs(cfgs)
}
