package gateway

import (
	"crypto/tls"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/fleetbus"
	"github.com/floodgate-gw/floodgate/internal/logsample"
	"github.com/floodgate-gw/floodgate/internal/stores"
	"github.com/floodgate-gw/floodgate/internal/topk"
	"github.com/floodgate-gw/floodgate/internal/tracing"
	"github.com/floodgate-gw/floodgate/internal/upstream"
	"github.com/floodgate-gw/floodgate/internal/usagepool"
	"github.com/floodgate-gw/floodgate/limit"
)

// pools keep what outlives one generation: each generation holds what it
// uses through its lease, and a value goes once no generation holds it
// (package usagepool). A reload builds the new generation, whose lease
// takes what it shares with the running one, then releases the running
// one's lease.
type pools struct {
	samplers   *usagepool.Pool[*logsample.Sampler] // rejection lines, by route and limit
	failLogs   *usagepool.Pool[*logsample.Sampler] // upstream failure lines, by route
	tops       *usagepool.Pool[*topk.Sketch]       // rejected keys, by route and limit (topkeys.go)
	clients    *usagepool.Pool[upstream.Client]    // by upstream.ClientID
	breakers   *usagepool.Pool[*routeBreaker]      // by route, kept while the route is out of the config
	recorder   *usagepool.Pool[*keptRecorder]      // one, the events recorder
	stores     *usagepool.Pool[*keptStore]         // by stores.Key
	traces     *usagepool.Pool[*tracing.Provider]  // by the tracing block
	tokens     *usagepool.Pool[*tokens]            // by the server.jwt block
	protectors *usagepool.Pool[*routeProtect]      // by route
}

// keptStore is a store and, for Redis, the fleet bus that rides on it.
type keptStore struct {
	store limit.Store
	bus   *fleetbus.Bus // nil: the memory store
}

// keptRecorder is the events recorder (nil: events are not recorded), and
// the settings it was made from.
type keptRecorder struct {
	r      *events.Recorder
	cfg    config.Events
	store  config.Store
	closed bool // by the making of another, which then failed
}

func (g *Gateway) newPools() pools {
	return pools{
		samplers: usagepool.New[*logsample.Sampler](nil),
		failLogs: usagepool.New[*logsample.Sampler](nil),
		tops:     usagepool.New[*topk.Sketch](nil),
		clients: usagepool.New(func(_ string, c upstream.Client, _ bool) {
			// Requests of the generations that used it may still be
			// running: its idle connections go once they have had time
			// to end.
			g.later(c.CloseIdle)
		}),
		// A breaker outlives its route: a reload that takes a route out and
		// puts it back finds its breaker as it was (open over an outage),
		// unless the breaker was disabled meanwhile.
		breakers: usagepool.NewKept(func(route string, _ *routeBreaker, replaced bool) {
			if !replaced {
				g.metrics.breakerState.DeleteLabelValues(route)
				g.metrics.breakerFallback.DeleteLabelValues(route)
			}
		}),
		recorder: usagepool.New(func(_ string, k *keptRecorder, _ bool) {
			// Requests still running on the old generation find it closed
			// and answer "recorded": false, which is the truth.
			k.r.Close()
		}),
		stores: usagepool.New(func(_ string, k *keptStore, _ bool) {
			if k.store != limit.Store(g.local) {
				g.later(func() { k.store.Close() })
			}
		}),
		traces: usagepool.New(func(_ string, t *tracing.Provider, _ bool) {
			// Its requests still running end their spans into it until
			// they have had time to end; then it exports what it holds,
			// within a bound.
			g.later(func() { t.Shutdown(tracing.ShutdownWait) })
		}),
		protectors: usagepool.New(func(route string, _ *routeProtect, replaced bool) {
			g.dropProtector(route, replaced)
		}),
		tokens: usagepool.New(func(_ string, t *tokens, _ bool) {
			// Requests still on the old generation may verify with it
			// after this: a closed verifier still verifies, with the keys
			// it has.
			t.v.Close()
		}),
	}
}

// storeFor returns the store a configuration names, and its fleet bus:
// the running one when its settings did not change, so that a reload
// neither drops Redis connections nor loses memory counters. A store no
// generation uses any longer is closed once the requests of the one a
// reload replaced have had time to end.
func (g *Gateway) storeFor(gen *generation, c config.Store) (limit.Store, *fleetbus.Bus, error) {
	k, err := g.pools.stores.Hold(gen.lease, stores.Key(c), nil, func(*keptStore, bool) (*keptStore, error) {
		s, err := stores.Open(c, g.local)
		if err != nil {
			return nil, err
		}
		k := &keptStore{store: s, bus: busOf(s)}
		g.subscribe(k.bus)
		return k, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return k.store, k.bus, nil
}

// tracingFor is the span export of a tracing block, nil when the block
// has no otlp endpoint; the running one when it did not change (its queue
// and connection go on).
func (g *Gateway) tracingFor(gen *generation, c config.Tracing) (*tracing.Provider, error) {
	if c.OTLP == "" {
		return nil, nil
	}
	return g.pools.traces.Hold(gen.lease, fmt.Sprintf("%q %v", c.OTLP, c.Sample), nil, func(*tracing.Provider, bool) (*tracing.Provider, error) {
		return tracing.New(c, tracing.Options{Version: g.version, Dropped: g.metrics.spansDropped, Log: g.log, Now: g.now})
	})
}

// later runs f once the requests of the generation a reload replaced have
// had time to end (its server.shutdown_timeout and a second), or at once
// when the gateway closes or a build that failed gives back what it made.
func (g *Gateway) later(f func()) {
	if g.closing.Load() || g.abandoning.Load() {
		f()
		return
	}
	grace := time.Duration(g.grace.Load())
	g.bg.Go(func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-g.stop:
		}
		f()
	})
}

// sampler returns the log sampler of a route's limit, the same one across
// reloads.
func (g *Gateway) sampler(gen *generation, id string) *logsample.Sampler {
	return g.keptSampler(g.pools.samplers, gen, id)
}

// failSampler returns the sampler of a route's upstream failure lines, the
// same one across reloads.
func (g *Gateway) failSampler(gen *generation, route string) *logsample.Sampler {
	return g.keptSampler(g.pools.failLogs, gen, route)
}

func (g *Gateway) keptSampler(p *usagepool.Pool[*logsample.Sampler], gen *generation, id string) *logsample.Sampler {
	s, _ := p.Hold(gen.lease, id, nil, func(*logsample.Sampler, bool) (*logsample.Sampler, error) {
		return logsample.New(logsPerSecond), nil
	})
	return s
}

// logsPerSecond is how many WARN lines of rejections one route and limit,
// or of upstream failures one route, write in a second.
const logsPerSecond = 20

// topSketch returns the sketch of id ("route/limit", or "global/limit"),
// the same one across reloads.
func (g *Gateway) topSketch(gen *generation, id string) *topk.Sketch {
	s, _ := g.pools.tops.Hold(gen.lease, id, nil, func(*topk.Sketch, bool) (*topk.Sketch, error) {
		return newTopSketch(), nil
	})
	return s
}

// client returns the upstream client for an upstream's settings, shared by
// routes and reloads with the same settings so that their idle connections
// survive a reload. tlsc and tlsID are the upstream's TLS (upstream.TLS).
// A client no generation uses any longer (a reload changed its settings,
// or renewed the certificate it presents) closes its idle connections.
func (g *Gateway) client(gen *generation, u config.Upstream, tlsc *tls.Config, tlsID string) upstream.Client {
	c, _ := g.pools.clients.Hold(gen.lease, upstream.ClientID(u, tlsID), nil, func(upstream.Client, bool) (upstream.Client, error) {
		return upstream.NewClient(u, tlsc), nil
	})
	return c
}

// breakerFor returns the breaker of a route, the same one across reloads
// that leave the route's breaker settings and upstream timeout as they
// were, so that a reload neither closes an open breaker nor forgets the
// window of a closed one. A reload that changes them makes a new breaker
// that resumes the old one's state (breaker.Resume).
func (g *Gateway) breakerFor(gen *generation, rc *config.Route) (*routeBreaker, error) {
	if !rc.Breaker.Enabled {
		g.pools.breakers.Forget(rc.ID)
		return nil, nil
	}
	same := func(old *routeBreaker) bool {
		return sameBreaker(old.settings, rc.Breaker) && old.timeout == rc.Upstream.Timeout
	}
	return g.pools.breakers.Hold(gen.lease, rc.ID, same, func(old *routeBreaker, had bool) (*routeBreaker, error) {
		if !had {
			old = nil
		}
		return g.newBreaker(rc, old)
	})
}

// recorderFor returns the events recorder for cfg, the running one when
// the events and store settings it was built from are unchanged: its spool
// holds a lock, and its queue may hold events still to be written.
func (g *Gateway) recorderFor(gen *generation, cfg *config.Config) (*events.Recorder, error) {
	same := func(k *keptRecorder) bool {
		return !k.closed && reflect.DeepEqual(k.cfg, cfg.Events) && stores.Same(k.store, cfg.Store)
	}
	k, err := g.pools.recorder.Hold(gen.lease, "events", same, func(old *keptRecorder, had bool) (*keptRecorder, error) {
		if had {
			// The new one may need what the old one holds (the spool's
			// lock): it goes first.
			old.r.Close()
			old.closed = true
		}
		k := &keptRecorder{cfg: cfg.Events, store: cfg.Store}
		if cfg.Events.Sink == config.SinkNone || cfg.Events.Sink == "" {
			return k, nil
		}
		sink, err := stores.EventSink(cfg)
		if err != nil {
			return nil, err
		}
		r, err := events.NewRecorder(sink, events.Options{Logger: g.log, Registerer: g.reg, RecordWait: g.recordWait})
		if err != nil {
			return nil, err
		}
		k.r = r
		return k, nil
	})
	if err != nil {
		return nil, err
	}
	return k.r, nil
}

// flushDropped writes the count of the lines each sampler did not log
// since the last time.
func (g *Gateway) flushDropped() {
	g.pools.samplers.Each(func(id string, s *logsample.Sampler) {
		if n := s.TakeDropped(); n > 0 {
			route, lim, _ := strings.Cut(id, "/")
			g.log.Warn("rate limited requests not logged", "route", route, "limit", lim, "count", n)
		}
	})
	g.pools.failLogs.Each(func(route string, s *logsample.Sampler) {
		if n := s.TakeDropped(); n > 0 {
			g.log.Warn("upstream failures not logged", "route", route, "count", n)
		}
	})
	if n := g.access.TakeDropped(); n > 0 {
		g.log.Warn("access log lines dropped: the writer fell behind", "count", n)
	}
}
