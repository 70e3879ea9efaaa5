package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway/clientip"
	"github.com/floodgate-gw/floodgate/internal/accesslog"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/keycache"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/overlay"
	"github.com/floodgate-gw/floodgate/internal/spec"
	"github.com/floodgate-gw/floodgate/internal/upstream"
	"github.com/floodgate-gw/floodgate/internal/usagepool"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// Options are what a Gateway needs besides its configuration.
type Options struct {
	// Logger receives the gateway's JSON lines. Nil: slog.Default().
	Logger *slog.Logger

	// Registerer receives the metrics. Nil: a new registry, see Registry.
	Registerer prometheus.Registerer

	// Stdout and Stderr are where "server.access_log: stdout" and
	// "stderr" write. Nil: os.Stdout, os.Stderr.
	Stdout, Stderr io.Writer

	// Now is the gateway's clock: the time its limits, breakers, tokens,
	// logs and metrics go by; it must be safe for concurrent use. Nil:
	// time.Now. Timers (a queued request's delay, a force's ttl, lease
	// renewals) and the deadlines of connections keep the wall clock.
	Now func() time.Time

	// Version is the floodgate version the instance announces to the
	// fleet (GET /admin/fleet). Empty: none.
	Version string

	// ConfigDigest is the hex SHA-256 of the config file cfg came from,
	// announced to the fleet so that instances running another file
	// show; SetConfigDigest changes it on reload. Empty: none.
	ConfigDigest string

	// RecordWait is the longest a request that is recorded (an open
	// breaker's fallback with fallback.record) waits for its event to be
	// durable before it is answered "recorded": false. Zero: 100 ms.
	RecordWait time.Duration
}

// New builds a gateway for cfg.
func New(cfg *config.Config, o Options) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	sink, err := accesslog.Open(cfg, o.Stdout, o.Stderr)
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		metrics:     NewMetrics(o.Registerer),
		log:         o.Logger,
		now:         o.Now,
		ids:         answer.NewIDSource(),
		storeErrLog: logsample.New(1),
		framingLog:  logsample.New(5),
		reg:         o.Registerer,
		local:       memory.New(memory.Options{MaxKeys: cfg.Store.Memory.MaxKeys}),
		stdout:      o.Stdout,
		stderr:      o.Stderr,
		version:     o.Version,
		recordWait:  o.RecordWait,
		started:     o.Now(),
		ovNotify:    make(chan struct{}, 1),
		announceNow: make(chan struct{}, 1),
	}
	if len(g.version) > maxVersion {
		g.version = g.version[:maxVersion]
	}
	g.SetConfigDigest(o.ConfigDigest)
	g.health = upstream.NewRegistry(g.log, g.now)
	g.pools = g.newPools()
	g.stop = make(chan struct{})
	gen, err := g.build(cfg, nil)
	if err != nil {
		sink.Close()
		g.local.Close()
		return nil, err
	}
	gen.file = cfg
	g.access = accesslog.New(g.metrics.accessDropped, g.log, g.now)
	g.access.Use(sink)
	g.gen.Store(gen)
	g.health.Apply(gen.upstreams())
	o.Registerer.MustRegister(healthCollector{g})
	g.metrics.loaded(true, g.now())
	// The fleet's overrides are in force before the first request, when
	// the store answers; when it does not, within a second of its answer.
	g.syncOnce()
	g.bg.Go(g.flushSamplers)
	g.bg.Go(g.announce)
	g.bg.Go(g.syncOverrides)
	g.bg.Go(g.tickFleetBreakers)
	g.bg.Go(g.tickProtectors)
	return g, nil
}

// build makes the generation of cfg. prev is the running one, whose store is
// kept when the store configuration did not change, so that a reload
// neither drops Redis connections nor loses memory counters.
func (g *Gateway) build(cfg *config.Config, prev *generation) (_ *generation, err error) {
	ips, err := clientip.New(cfg.Server.TrustedProxies, cfg.Server.IPv6Prefix)
	if err != nil {
		return nil, err
	}
	gen := &generation{
		lease:       new(usagepool.Lease),
		cfg:         cfg,
		ips:         ips,
		local:       g.local,
		ridHeader:   http.CanonicalHeaderKey(cfg.Server.RequestIDHeader),
		maxBody:     cfg.Server.MaxBodyBytes,
		bodyTimeout: cfg.Server.BodyTimeout,
		noRoute:     g.metrics.forRoute(""),
		accessLog:   cfg.Server.AccessLog != config.AccessLogOff,
	}
	defer func() {
		if err != nil {
			// What it took from the pools goes back, and what it opened
			// closes at once: no request ever used it. The running
			// generation keeps what it holds.
			g.abandoning.Store(true)
			gen.lease.Release()
			g.abandoning.Store(false)
		}
	}()
	a := func(status int, code string) *answer.Answer {
		return answer.NewAnswer(status, code, cfg.Message(code))
	}
	gen.keyRequired = a(http.StatusForbidden, "key_required")
	gen.notFound = a(http.StatusNotFound, "route_not_found")
	gen.badRequest = a(http.StatusBadRequest, "bad_request")
	gen.tooLarge = a(http.StatusRequestEntityTooLarge, "body_too_large")
	gen.headersTooLarge = a(http.StatusRequestHeaderFieldsTooLarge, config.CodeHeadersTooLarge)
	gen.requestTimeout = a(http.StatusRequestTimeout, config.CodeRequestTimeout)
	gen.limiterUnavailable = a(http.StatusServiceUnavailable, "limiter_unavailable")
	gen.upstreamTimeout = a(http.StatusGatewayTimeout, "upstream_timeout")
	gen.upstreamUnavailable = a(http.StatusBadGateway, "upstream_unavailable")
	gen.badGRPCTimeout = answer.NewAnswer(http.StatusBadRequest, config.CodeBadRequest,
		"grpc-timeout is not a timeout (1 to 8 digits and a unit of H, M, S, m, u or n)")
	gen.grpcDeadlinePassed = answer.NewAnswer(http.StatusRequestTimeout, config.CodeRequestTimeout,
		"the call's deadline had already passed (grpc-timeout 0)").WithGRPC(answer.GRPCDeadlineExceeded)

	g.local.SetMaxKeys(cfg.Store.Memory.MaxKeys)
	if gen.store, gen.bus, err = g.storeFor(gen, cfg.Store); err != nil {
		return nil, err
	}
	share := float64(cfg.Store.LocalShare)
	gen.share = func() float64 {
		if share > 0 {
			return share
		}
		if n := g.instances.Load(); n > 1 {
			return 1 / float64(n)
		}
		return 1
	}

	for _, rc := range cfg.Routes {
		r, err := g.buildRoute(gen, cfg, rc)
		if err != nil {
			return nil, err
		}
		gen.routes = append(gen.routes, r)
	}
	if gen.trace, err = g.tracingFor(gen, cfg.Tracing); err != nil {
		return nil, err
	}
	if gen.jwt, err = g.tokensFor(gen, cfg); err != nil {
		return nil, err
	}
	// Last, because a new recorder may have to close the running one.
	if gen.recorder, err = g.recorderFor(gen, cfg); err != nil {
		return nil, err
	}
	return gen, nil
}

// buildRoute makes route rc of cfg, for gen.
func (g *Gateway) buildRoute(gen *generation, cfg *config.Config, rc *config.Route) (*route, error) {
	r := &route{id: rc.ID, metrics: g.metrics.forRoute(rc.ID), failLog: g.failSampler(gen, rc.ID)}
	r.Match = spec.NewMatch(rc.Match)
	u := rc.Upstream
	tlsc, tlsID, err := upstream.TLS(u.TLS)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", rc.ID, err)
	}
	r.upstream = upstream.New(u, upstream.Options{
		Route:           rc.ID,
		Client:          g.client(gen, u, tlsc, tlsID),
		TLS:             tlsc,
		TLSID:           tlsID,
		Targets:         g.health.Targets(rc.ID, u.Targets),
		RequestIDHeader: gen.ridHeader,
		SendTimeout:     cfg.Server.SendTimeout,
		Upgrades:        &g.upgrades,
		Now:             g.now,
	})
	for _, lc := range cfg.GlobalLimits {
		l := g.limitSpec(gen, cfg, rc.ID, lc)
		l.top = g.topSketch(gen, "global/"+lc.Name)
		r.limits = append(r.limits, l)
	}
	for _, lc := range rc.Limits {
		l := g.limitSpec(gen, cfg, rc.ID, lc)
		l.top = g.topSketch(gen, rc.ID+"/"+lc.Name)
		r.limits = append(r.limits, l)
	}
	for _, l := range r.limits {
		if l.UsesIP && gen.ipKeys == nil {
			gen.ipKeys = newIPKeys(gen.ips)
		}
	}
	r.fallback = answer.NewAnswer(rc.Fallback.Status, rc.Fallback.Code, cfg.Message(rc.Fallback.Code)).
		WithGRPC(answer.GRPCUnavailable)
	r.grpcRefused = grpcRefusal(rc.ID, u.Protocol)
	if r.breaker, err = g.breakerFor(gen, rc); err != nil {
		return nil, err
	}
	r.record = rc.Fallback.Record
	if rc.Protect != nil {
		if r.protect, err = g.protectorFor(gen, rc); err != nil {
			return nil, err
		}
		r.overloaded = overloadedAnswer(cfg, rc.Protect)
	}
	return r, nil
}

func (g *Gateway) limitSpec(gen *generation, cfg *config.Config, routeID string, lc *config.Limit) *limitSpec {
	l := &limitSpec{
		Limit:   spec.NewLimit(cfg, routeID, lc),
		reject:  answer.NewAnswer(lc.Reject.Status, lc.Reject.Code, cfg.Message(lc.Reject.Code)).WithGRPC(answer.GRPCResourceExhausted),
		report:  answer.NewReporter(lc.Name),
		metrics: g.metrics.forLimit(routeID, lc.Name),
		sampler: g.sampler(gen, routeID+"/"+lc.Name),
	}
	if !l.Const() {
		// Made per request, and the same for every request of one
		// client: a client that comes again finds its key made.
		l.keys = keycache.New()
	}
	if len(l.Fallback) > 0 {
		l.fallbackKeys = keycache.New()
	}
	return l
}

// Reload swaps in cfg. Requests already running finish on the generation they
// started with; a store that cfg no longer uses is closed once they have
// had time to finish.
func (g *Gateway) Reload(cfg *config.Config) error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	prev := g.gen.Load()
	// The access log's file is opened again whatever changed, so that a
	// rotated file is followed; one that cannot be opened refuses the
	// reload, as a config that does not build does.
	sink, err := accesslog.Open(cfg, g.stdout, g.stderr)
	if err != nil {
		g.metrics.reloaded(false, g.now())
		return err
	}
	// The overrides stay in force over the new file. With the memory
	// store, those of limits it no longer has go; the fleet's stay in
	// the store, for the instances that still have the limit, and are
	// not applied here.
	set, gone := g.ov.set, []Override(nil)
	if prev.bus == nil {
		set, gone = overlay.WithoutGone(cfg, g.ov.set)
	}
	eff, skipped := overlay.Apply(cfg, set)
	gen, err := g.build(eff, prev)
	if err != nil {
		sink.Close()
		g.metrics.reloaded(false, g.now())
		return err
	}
	gen.file = cfg
	g.gen.Store(gen)
	g.health.Apply(gen.upstreams())
	g.retire(prev)
	if g.ov.set != nil {
		before := g.ov.skipped
		g.ov.set, g.ov.skipped = set, skipped
		g.forgetGone(gone)
		g.noteSkipped(before)
	}
	g.access.Use(sink)
	g.metrics.reloaded(true, g.now())
	return nil
}

// retire lets go of what prev, the generation a reload replaced, held
// and the new one does not: what needs its requests to have ended goes
// once they have had time to (server.shutdown_timeout and a second).
func (g *Gateway) retire(prev *generation) {
	g.grace.Store(int64(prev.cfg.Server.ShutdownTimeout + time.Second))
	prev.lease.Release()
}

// Config is the running configuration as its file has it, without the
// runtime overrides (Overrides lists them).
func (g *Gateway) Config() *config.Config { return g.gen.Load().file }

// Store is the store the running config decides in, for a service that
// shares it with the gateway (the Envoy rate-limit service).
func (g *Gateway) Store() limit.Store { return g.gen.Load().store }

// Close stops the gateway's background work and closes its stores.
func (g *Gateway) Close() error {
	g.closeOnce.Do(func() { close(g.stop) })
	g.bg.Wait()
	g.health.Close()
	// Joined connections end here, and their handlers release their
	// leases while the store is still open.
	g.upgrades.Close(upgradeCloseWait)
	gen := g.gen.Load()
	g.withdraw(gen.bus)
	// What the generation holds goes now: the store, the verifier, the
	// span export, the clients' idle connections, the recorder.
	g.closing.Store(true)
	gen.lease.Release()
	g.access.Close()
	return g.local.Close()
}

// flushSamplers writes, once a second, how many rejection lines each
// route and limit, and upstream failure lines each route, did not log.
func (g *Gateway) flushSamplers() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		g.flushDropped()
	}
}

// announceEvery is how often an instance tells the store it is alive; an
// announcement lasts three times as long, so one missed beat is harmless.
const announceEvery = 5 * time.Second

// announce keeps this instance counted in a shared store and remembers how
// many instances the store last saw, which is what on_error: local divides
// each limit by once the store has failed (docs/configuration.md, When the
// store fails).
func (g *Gateway) announce() {
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	for {
		g.announceOnce()
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.announceNow:
		}
	}
}

// withdraw takes this instance out of the fleet's count as it stops, so
// that the others neither divide their limits by it nor list it.
func (g *Gateway) withdraw(b *fleetbus.Bus) {
	if b != nil {
		g.pools.protectors.Each(func(route string, _ *routeProtect) { g.leaveFleet(b, route) })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := b.Withdraw(ctx, g.ids.Prefix()); err != nil {
			g.log.Warn("leaving the fleet: the store did not answer; the others count this instance until its announcement ends", "error", err.Error())
		}
	}
}

func (g *Gateway) announceOnce() {
	if b := g.gen.Load().bus; b != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		info, _ := json.Marshal(g.self())
		if n, err := b.Announce(ctx, g.ids.Prefix(), info, 3*announceEvery); err == nil {
			g.instances.Store(int64(n))
		}
	}
}
