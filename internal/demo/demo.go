// Package demo rehearses a flash sale in one process, with no outside
// services (floodgate demo): a mock coupon API that serves 500 requests a
// second, a gateway in front of it with the limits and the protection of
// examples/flash-sale.yaml, and a crowd of users who retry at once when
// refused. The script warms up, opens the sale with a surge, halves what
// the API serves for a few seconds (protection's limit follows it down,
// and back up), fails the API until the breaker has opened, brings it
// back until the breaker has closed, and replays what the open breaker
// and protection recorded; a line a second shows what each part counted.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/jwtsign"
	"github.com/floodgate-gw/floodgate/internal/replay"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/rehearse"
)

// The coupon API of the flash sale: 500 requests a second in 200 ms, 3 s past
// that. The crowd: 20,000 users, each with a token the login service
// signed, behind 50,000 addresses, who retry at once when refused.
const (
	demoCapacity = 500
	demoUsers    = 20000
	demoIPs      = 50000
)

// A Script is when each part of the demo happens, as offsets from the
// start of the traffic. Its phases come in this order: warm-up, the sale
// (the surge), the coupon API's slowdown and its recovery, its outage and
// its recovery.
type Script struct {
	warmup  float64       // requests per second before the sale opens
	opens   time.Duration // when the sale opens: the surge's step to its peak
	plateau float64       // what the surge settles at, two seconds after it starts
	// From slows, for slowFor, the coupon API serves slowCapacity
	// requests a second in 200 ms, in place of demoCapacity.
	slows, slowFor time.Duration
	slowCapacity   int
	outage         time.Duration // when the coupon API starts failing
	outageFor      time.Duration // how long it fails
	// window and openFor are the breaker's, in place of the example's 10s
	// and 30s, so that the outage and the recovery fit the script.
	window, openFor time.Duration
	// protectMin, when not zero, is protection's min in place of the
	// example's: a script whose traffic is under the example's min would
	// show nothing of protection.
	protectMin float64
	replayRate limit.Rate    // the pace of the replay at the end
	replayFor  time.Duration // how long the replay may take at most
}

// DefaultDuration is the traffic's length that DefaultScript is written
// for, its recoveries included.
const DefaultDuration = 25 * time.Second

// DefaultScript takes about 45 seconds with DefaultDuration. The sale
// settles at 300 requests a second: more than the coupon API serves while
// it is slow (250), less than the api limit admits (400), so that
// protection, not the limit, is what turns users away then. Protection
// sees the API slow a second or two in (an answer is late after 1 s, and
// it judges by the half second), and takes about ten, once the API is
// back, to climb past 300: slowly back to the rate that overloaded the
// API, faster past it. The breaker opens about 2.5 s into the outage,
// when the failures fill half of its 5 s window, tries again 2 s later,
// when the coupon API is back, and closes. The replay then sends what the
// breaker and protection recorded, every attempt of a user in a window
// of the user limit (their retries) collapsed into one. Replay takes a
// few hundred events a second whatever its rate (each of its 64 slots
// waits for a 200 ms answer, collapsed events included), and protection
// turns thousands away here: replayFor bounds it.
var DefaultScript = Script{
	warmup: 200, opens: 3 * time.Second, plateau: 300,
	slows: 6 * time.Second, slowFor: 4 * time.Second, slowCapacity: demoCapacity / 2,
	outage: 19 * time.Second, outageFor: 4 * time.Second,
	window: 5 * time.Second, openFor: 2 * time.Second,
	replayRate: limit.Rate{Count: 250, Period: time.Second}, replayFor: 20 * time.Second,
}

// MinDuration is the shortest traffic that shows the whole script: the
// breaker cannot try again before the outage has ended and open_for has
// passed.
func (s Script) MinDuration() time.Duration { return s.outage + s.outageFor + s.openFor }

// demoOvertime bounds how much longer than planned the outage, and then
// the traffic, may last while the demo waits for the breaker to open in
// the outage, and then to close after it. A machine that keeps up never
// waits; one too busy to (the crowd, the gateway and the API share its
// cores) takes longer to send the calls the breaker judges by, and to
// turn a call around within slow_call_duration, so that the story is the
// same on it, only slower.
const demoOvertime = 30 * time.Second

// Options are what the command line chooses (floodgate demo's flags of
// the same names).
type Options struct {
	Redis    string        // "": the memory store
	Hold     bool          // serve after the script until ctx ends
	Peak     float64       // the surge's peak, requests per second (--rate)
	Duration time.Duration // how long the traffic runs
	// Script is the script; zero: DefaultScript.
	Script Script
	// recordWait replaces the gateway's 100 ms wait for a recorded
	// request's event to be durable (zero keeps it).
	recordWait time.Duration
}

// Check says what is wrong with o, naming the flag: a duration the script
// does not fit in, a peak that is no surge, a Redis address that is not
// one.
func (o Options) Check() error {
	s := o.script()
	if min := s.MinDuration(); o.Duration < min {
		return fmt.Errorf("--duration %v: the script needs at least %v (the API recovers at %v, and the breaker waits %v to try it)",
			o.Duration, min, s.outage+s.outageFor, s.openFor)
	}
	if o.Redis != "" {
		if _, _, err := net.SplitHostPort(o.Redis); err != nil {
			return fmt.Errorf("--redis %q: want HOST:PORT", o.Redis)
		}
	}
	if !(o.Peak > s.plateau) || o.Peak > 1e6 {
		return fmt.Errorf("--rate %v: the surge's peak must be above the %v/s it settles at, and at most 1000000", o.Peak, s.plateau)
	}
	return nil
}

func (o Options) script() Script {
	if o.Script == (Script{}) {
		return DefaultScript
	}
	return o.Script
}

// demoReceivedHeader carries, from the demo's gateway listener to the
// coupon API, when the gateway received a request (Unix nanoseconds).
const demoReceivedHeader = "X-Demo-Received"

// result is what a run of the demo saw, for its tests.
type result struct {
	rows []demoRow
	// within counts, by second, the requests that the gateway received
	// and the coupon API got in that same second.
	within map[int]int64
	limits []*config.Limit // the route's, global ones first, as the columns are
	// states are the breaker's states in the order it took them, the
	// first one it started in included.
	states []string
	// probes are the answers to requests sent while the breaker was
	// open, one every 50 ms of it (40 at most); none when it never opened.
	probes []probeAnswer
	// recorded and recordedOverloaded are the events the gateway
	// recorded: breaker_rejected (the open breaker's) and overloaded
	// (protection's).
	recorded, recordedOverloaded int64
	// replayErr and replayOut are the replay's error and output.
	replayErr error
	replayOut string
	// gatewayURL and adminURL are where the demo served.
	gatewayURL, adminURL string
}

// Run runs the demo, writing its story to out, until the script ends; with
// o.Hold, until ctx ends.
func Run(ctx context.Context, out io.Writer, o Options) error {
	_, err := run(ctx, out, o)
	return err
}

// demo is one run of the demo: what it set up, and what it counts.
type demo struct {
	o   Options
	s   Script
	out io.Writer
	res *result

	upL, gwL, adL net.Listener
	key           *jwtsign.Key
	dir           string // the run's files: the JWKS, the events, the config
	cfgFile       string
	eventsFile    string
	cfg           *config.Config
	route         *config.Route
	reg           *prometheus.Registry
	gw            *gateway.Gateway
	closers       []func()

	coupon                    atomic.Pointer[rehearse.Upstream]
	reached, within, newUsers *perSecond
	tokens                    func(user string) string
	watch                     *breakerWatch

	// phases are the lines announced before the row of a second: the
	// script adds the API's recovery when it happens.
	phaseMu sync.Mutex
	phases  map[int]string
}

func run(ctx context.Context, out io.Writer, o Options) (*result, error) {
	d := &demo{o: o, s: o.script(), out: out, reached: newPerSecond(), within: newPerSecond(), newUsers: newPerSecond()}
	defer d.close()
	if err := d.setUp(ctx); err != nil {
		return nil, err
	}
	d.serve()
	d.intro()
	load, err := d.traffic(ctx)
	if err != nil {
		return nil, err
	}
	d.summary(load)
	if load.Interrupted || ctx.Err() != nil {
		fmt.Fprintf(out, "interrupted: no replay\n")
		return d.res, nil
	}
	d.replay(ctx)
	if o.Hold {
		d.hold(ctx)
	}
	return d.res, nil
}

// close undoes what the run set up, last first.
func (d *demo) close() {
	for _, c := range slices.Backward(d.closers) {
		c()
	}
}

// setUp takes the ports, writes the users' keys and the configuration,
// and starts the gateway.
func (d *demo) setUp(ctx context.Context) error {
	for _, l := range []*net.Listener{&d.upL, &d.gwL, &d.adL} {
		var err error
		if *l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		d.closers = append(d.closers, func() { (*l).Close() })
	}
	dir, err := os.MkdirTemp("", "floodgate-demo-")
	if err != nil {
		return err
	}
	d.dir = dir
	d.closers = append(d.closers, func() { os.RemoveAll(dir) })
	if err := d.writeConfig(); err != nil {
		return err
	}
	var limits []*config.Limit
	d.route, limits = demoRouteOf(d.cfg)
	if d.route == nil || !d.route.Breaker.Enabled || !d.route.Fallback.Record {
		return fmt.Errorf("examples/flash-sale.yaml: no route %s with a breaker whose fallback records", demoRoute)
	}
	d.res = &result{limits: limits, gatewayURL: "http://" + d.gwL.Addr().String(), adminURL: "http://" + d.adL.Addr().String()}

	d.reg = prometheus.NewRegistry()
	gw, err := gateway.New(d.cfg, gateway.Options{Logger: slog.New(slog.DiscardHandler), Registerer: d.reg, RecordWait: d.o.recordWait})
	if err != nil {
		return err
	}
	d.gw = gw
	d.closers = append(d.closers, func() { gw.Close() })
	if d.o.Redis != "" {
		// The gateway would serve anyway, deciding by on_error: a demo
		// of Redis that never reached it would show nothing of it.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := gw.CheckStore(cctx)
		cancel()
		if err != nil {
			return fmt.Errorf("redis at %s does not answer: %w", d.o.Redis, err)
		}
	}
	return nil
}

// writeConfig writes the users' login service's key, and the example
// with the demo's changes, which d.cfg is parsed from.
func (d *demo) writeConfig() error {
	// The users' login service: a key that signs each user's token, and
	// the JWKS file the gateway verifies them with. One process plays
	// every part here, so the key is a shared secret (HS256), the cheapest
	// to check, which leaves the cores to the surge; an identity provider
	// would sign with RS256 or ES256 (BENCHMARKS.md has what each costs).
	key, err := jwtsign.Generate("HS256", "demo")
	if err != nil {
		return err
	}
	d.key = key
	jwks, err := key.PublicJWKS()
	if err != nil {
		return err
	}
	jwksFile := filepath.Join(d.dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		return err
	}
	d.eventsFile = filepath.Join(d.dir, "lucky-meal-events.jsonl")
	d.cfgFile = filepath.Join(d.dir, "flash-sale.yaml")
	data, err := demoConfigFile(flashSaleYAML, demoOverrides{
		listen: d.gwL.Addr().String(), admin: d.adL.Addr().String(), upstream: "http://" + d.upL.Addr().String(),
		jwksFile: jwksFile, eventsFile: d.eventsFile, redis: d.o.Redis, window: d.s.window, openFor: d.s.openFor,
		protectMin: d.s.protectMin,
	})
	if err != nil {
		return fmt.Errorf("examples/flash-sale.yaml: %w", err)
	}
	if err := os.WriteFile(d.cfgFile, data, 0o600); err != nil {
		return err
	}
	if d.cfg, err = config.Parse(d.cfgFile, data); err != nil {
		return fmt.Errorf("examples/flash-sale.yaml with the demo's changes does not load:\n%s", strings.Join(admin.ErrorLines(err), "\n"))
	}
	return nil
}

// serve starts the coupon API, the gateway's listener and the admin
// listener.
func (d *demo) serve() {
	// The coupon API, started with the traffic, counting what reaches it
	// each second, and of that what the gateway received in the same
	// second. On a machine too busy to keep up, admitted requests can
	// reach the API late and together, in a later second than the one
	// the gateway admitted them in; those the gateway received and
	// delivered within one second were admitted in it, so the api limit
	// alone bounds their count, however busy the machine.
	quiet := log.New(io.Discard, "", 0)
	upSrv := &http.Server{ErrorLog: quiet, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := d.coupon.Load()
		if c == nil {
			http.Error(w, "not started", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/stats" {
			now := time.Now()
			d.reached.add(now, 1)
			if ns, err := strconv.ParseInt(r.Header.Get(demoReceivedHeader), 10, 64); err == nil {
				d.within.addWithin(time.Unix(0, ns), now)
			}
		}
		c.ServeHTTP(w, r)
	})}
	go upSrv.Serve(d.upL)
	d.closers = append(d.closers, func() { upSrv.Close() })
	// Served as serve serves it, through the gateway's listener, so that
	// the demo answers malformed requests as the product does.
	stamp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(demoReceivedHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
		d.gw.ServeHTTP(w, r)
	})
	gwSrv := &http.Server{Handler: stamp, MaxHeaderBytes: d.cfg.Server.MaxHeaderBytes, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	go gwSrv.Serve(d.gw.Listener(gwSrv, d.gwL))
	d.closers = append(d.closers, func() { gwSrv.Close() })
	ah := admin.NewHandler(demoBackend{d.gw}, d.reg, slog.New(slog.DiscardHandler))
	adSrv := &http.Server{Handler: ah, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	go adSrv.Serve(d.adL)
	d.closers = append(d.closers, func() { ah.Close() }, func() { adSrv.Close() })
}

// intro says what runs where, and what the table's columns are.
func (d *demo) intro() {
	out, o := d.out, d.o
	storeName := "memory"
	if o.Redis != "" {
		storeName = fmt.Sprintf("redis at %s (decision budget %v)", o.Redis, d.cfg.Store.Redis.Timeout)
	}
	fmt.Fprintf(out, "floodgate demo: the limits of examples/flash-sale.yaml in front of a mock coupon API, in one process\n")
	fmt.Fprintf(out, "  coupon API  %s answers in 200 ms up to %d requests/s, in 3 s beyond\n", d.upL.Addr(), demoCapacity)
	fmt.Fprintf(out, "  gateway     %s, store %s, route %s:\n", d.res.gatewayURL, storeName, demoRoute)
	for _, l := range d.res.limits {
		fmt.Fprintf(out, "    %s\n", describeLimit(l))
	}
	var orig *config.Route
	if c, err := config.Parse("examples/flash-sale.yaml", flashSaleYAML); err == nil {
		orig, _ = demoRouteOf(c)
	}
	d.protectIntro(orig)
	b := d.route.Breaker
	fmt.Fprintf(out, "  breaker     opens when %.0f%% of at least %d calls in its window fail or take over %v; %d trial calls\n",
		b.FailureRate*100, b.MinCalls, b.SlowCallDuration, b.HalfOpenCalls)
	if orig != nil {
		fmt.Fprintf(out, "breaker timings shortened for the demo: window %v, open_for %v (the example's: %v, %v)\n",
			b.Window, b.OpenFor, orig.Breaker.Window, orig.Breaker.OpenFor)
	}
	if o.Hold {
		fmt.Fprintf(out, "dashboard: %s/ (and after the script: --hold keeps it up)\n", d.res.adminURL)
	} else {
		fmt.Fprintf(out, "dashboard: %s/, only while the demo runs (--hold keeps it up afterwards)\n", d.res.adminURL)
	}
	fmt.Fprintf(out, "crowd: %d users (signed tokens, %d addresses); a refused one retries at once, up to %d times\n\n",
		demoUsers, demoIPs, rehearse.MaxRetries)
	s := d.s
	d.phases = d.slowdownPhases()
	maps.Copy(d.phases, map[int]string{
		0: fmt.Sprintf("warm-up: %.0f requests/s", s.warmup),
		int(s.opens / time.Second): fmt.Sprintf("the sale opens at %v: %.0f requests/s for a second, settling at %.0f/s; refused users retry at once",
			s.opens, o.Peak, s.plateau),
		int(s.outage / time.Second): fmt.Sprintf("the coupon API fails at %v, for %v: the breaker opens, answers 503 and records who it turns away",
			s.outage, s.outageFor),
	})
}

// announce adds text to the lines printed before the row of the second
// at falls in.
func (d *demo) announce(at time.Duration, text string) {
	d.phaseMu.Lock()
	defer d.phaseMu.Unlock()
	if prev := d.phases[int(at/time.Second)]; prev != "" {
		text = prev + "\n" + text
	}
	d.phases[int(at/time.Second)] = text
}

// traffic runs the crowd against the gateway, the script's outage and
// the probes of the open breaker beside it, printing a row a second.
func (d *demo) traffic(ctx context.Context) (*rehearse.Result, error) {
	jwt := d.cfg.Server.JWT
	d.tokens = d.key.UserTokens(jwt.Issuer, jwt.Audience, time.Now().Add(d.o.Duration+time.Hour))
	var seen sync.Map
	table := newDemoTable(d.out, d.res.limits, d.route.Protect != nil)
	table.header()

	// Everything counts from here, the start of the traffic.
	s, o := d.s, d.o
	start := time.Now()
	up, err := d.startCoupon(start)
	if err != nil {
		return nil, err
	}
	d.watch = newBreakerWatch(d.reg, demoRoute, start, d.gw.Breakers())
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		d.watch.run(watchCtx, 50*time.Millisecond)
	}()
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		d.probe(ctx, watchCtx)
	}()
	stopLoad := make(chan struct{})
	scripted := make(chan struct{})
	scriptCtx, stopScript := context.WithCancel(ctx)
	defer stopScript()
	go func() {
		defer close(scripted)
		defer close(stopLoad)
		d.script(scriptCtx, start, up)
	}()

	load, err := rehearse.Run(ctx, rehearse.LoadConfig{
		URL:    d.res.gatewayURL + d.route.Match.Path,
		Method: http.MethodPost,
		Profile: rehearse.Profile{Shape: rehearse.Surge, From: s.warmup, Rate: o.Peak, StepAt: s.opens,
			Plateau: s.plateau, Duration: o.Duration + 2*demoOvertime, Seed: 1},
		Stop:  stopLoad,
		Users: demoUsers,
		UserToken: func(user string) string {
			if _, dup := seen.LoadOrStore(user, true); !dup {
				d.newUsers.add(time.Now(), 1)
			}
			return d.tokens(user)
		},
		IPs:     demoIPs,
		Retry:   rehearse.RetryImmediate,
		Timeout: 5 * time.Second,
		// One process plays every part here, on a machine that may have
		// two cores: beyond this many requests in flight the generator
		// drops (and counts) instead of exhausting file descriptors.
		ConcurrencyCap: 3000,
		OnSecond:       func(sec rehearse.Second) { d.second(table, sec) },
	})
	if err != nil {
		stopScript()
		stopWatch()
		<-scripted
		return nil, err
	}
	stopWatch()
	<-scripted
	<-watched
	<-probed
	d.watch.sample(time.Now())
	d.res.states = d.watch.states()
	d.res.within = d.within.all()
	d.res.recorded = int64(d.watch.last.recorded)
	d.res.recordedOverloaded = int64(d.watch.last.recordedOverloaded)
	return load, nil
}

// startCoupon starts the coupon API of the script, and what counts the
// requests that reach it, at start.
func (d *demo) startCoupon(start time.Time) (*rehearse.Upstream, error) {
	s := d.s
	slowdown := []rehearse.CapacityStep{{At: s.slows, Capacity: s.slowCapacity}, {At: s.slows + s.slowFor, Capacity: demoCapacity}}
	up, err := rehearse.NewUpstream(rehearse.UpstreamConfig{
		Latency: 200 * time.Millisecond, Jitter: 50 * time.Millisecond,
		Capacity: demoCapacity, CapacitySchedule: slowdown, OverloadLatency: 3 * time.Second,
		Body: `{"coupon":"granted"}`, Seed: 1,
	}, start)
	if err != nil {
		return nil, err
	}
	d.reached.begin(start)
	d.within.begin(start)
	d.newUsers.begin(start)
	d.coupon.Store(up)
	return up, nil
}

// second prints the row of a second the load generator has done with,
// after what was announced for it, and keeps it.
func (d *demo) second(table *demoTable, sec rehearse.Second) {
	d.phaseMu.Lock()
	p, ok := d.phases[sec.T]
	d.phaseMu.Unlock()
	if ok {
		fmt.Fprintln(d.out, p)
	}
	row := demoRow{Second: sec, newUsers: d.newUsers.get(sec.T), reached: d.reached.get(sec.T),
		limited: d.watch.limited(sec.T, d.res.limits), protect: d.watch.protectionIn(sec.T), breaker: d.watch.breakerIn(sec.T)}
	d.res.rows = append(d.res.rows, row)
	table.row(row)
}

// probe sends a request every 50 ms while the breaker is open, each time
// it opens (a failed trial opens it again), until watchCtx ends: a
// fallback says "recorded": true only once its event is durable, which a
// busy disk may not make it within the answer's budget. Each probe goes
// on its own, so that a slow answer (a busy machine's) does not hold back
// the next.
func (d *demo) probe(ctx, watchCtx context.Context) {
	select {
	case <-d.watch.opened:
	case <-watchCtx.Done():
		select {
		case <-d.watch.opened: // at the last moment
		default:
			return
		}
	}
	probes := make([]probeAnswer, 40)
	var wg sync.WaitGroup
	n := 0
	for ; n < len(probes) && watchCtx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		if d.watch.current() == "OPEN" {
			i := n
			wg.Go(func() {
				probes[i] = probe(ctx, d.res.gatewayURL+d.route.Match.Path, d.tokens(fmt.Sprintf("demo-probe-%d", i)))
			})
			n++
		}
	}
	wg.Wait()
	d.res.probes = probes[:n]
}

// script plays the outage and ends the traffic. The API fails from
// s.outage until s.outageFor has passed and the breaker has opened; the
// traffic ends once o.Duration has passed and the breaker has closed
// again. On a machine that keeps up, that is when planned; a busy one
// takes longer (demoOvertime at most, each).
func (d *demo) script(ctx context.Context, start time.Time, up *rehearse.Upstream) {
	s := d.s
	if !demoWait(ctx, start.Add(s.outage), 0, nil) {
		return
	}
	up.Outage(true)
	failed := time.Since(start)
	opened := func() bool { return d.watch.wasSince(failed, "OPEN") }
	if !demoWait(ctx, start.Add(s.outage+s.outageFor), demoOvertime, opened) {
		return
	}
	up.Outage(false)
	back := time.Since(start).Round(100 * time.Millisecond)
	d.announce(back, fmt.Sprintf("the coupon API is back at %v: after open_for, %d trial calls (HALF_OPEN) close the breaker", back, d.route.Breaker.HalfOpenCalls))
	demoWait(ctx, start.Add(d.o.Duration), demoOvertime, func() bool { return d.watch.current() == "CLOSED" })
}

// summary says what the traffic did, and what the breaker recorded.
func (d *demo) summary(load *rehearse.Result) {
	out, res, counts := d.out, d.res, d.watch.last
	if ran := load.Profile.Duration; !load.Interrupted && ran > d.o.Duration+time.Second {
		fmt.Fprintf(out, "\nthe traffic ran %v, not %v: this machine was too busy for the breaker to open or close when planned\n",
			ran.Round(time.Second), d.o.Duration)
	}
	t := load.Total
	fmt.Fprintf(out, "\nsent %d requests (%d of them retries) for %d users; dropped by the generator: %d\n",
		t.Sent, t.Retries, d.newUsers.total(), t.Dropped)
	fmt.Fprintf(out, "answers: admitted %d, 429 %d, 503 %d, other %d; p50 %s, p99 %s\n",
		t.OK, t.TooMany, t.Unavailable, t.Other, ms(t.P50), ms(t.P99))
	if t.Dropped > 0 {
		fmt.Fprintf(out, "(the generator shares this machine with the gateway and the API; --rate 2000 asks less of it)\n")
	}
	if n := counts.storeErrors; n > 0 {
		fmt.Fprintf(out, "the store missed its %v budget %.0f times (the crowd shares this machine); on_error: %s answered\n",
			d.cfg.Store.Redis.Timeout, n, d.cfg.Store.OnError)
	}
	api := apiLimit(res.limits)
	most := d.reached.max()
	fmt.Fprintf(out, "the coupon API got at most %d requests in a second (capacity %d", most, demoCapacity)
	if api != nil {
		fmt.Fprintf(out, "; the %s limit admits %d", api.Name, admitsPerSecond(api))
	}
	fmt.Fprintln(out, ")")
	if api != nil && most > admitsPerSecond(api) {
		fmt.Fprintf(out, "(more than the limit admits: admitted requests reached it late and together, this machine was\n"+
			"too busy to keep up; of those the gateway received in the same second, at most %d)\n", d.within.max())
	}
	d.protectSummary()
	fmt.Fprintf(out, "breaker: %s\n", strings.Join(d.watch.changeLog(), ", "))
	if len(res.probes) > 0 {
		n, example := 0, res.probes[0]
		for _, p := range res.probes {
			if p.recorded() {
				if n == 0 {
					example = p
				}
				n++
			}
		}
		fmt.Fprintf(out, "sent while the breaker was open: %d requests, %d answered \"recorded\": true; the first:\n  %d %s\n",
			len(res.probes), n, example.status, strings.TrimSpace(example.body))
	} else {
		fmt.Fprintf(out, "the breaker did not open\n")
	}
	fmt.Fprintf(out, "events recorded: %d by the open breaker", res.recorded)
	if d.route.Protect != nil {
		fmt.Fprintf(out, ", %d by protection", res.recordedOverloaded)
	}
	fmt.Fprintf(out, ", in %s\n", d.eventsFile)
	fmt.Fprintf(out, "tokens not accepted: %.0f\n", counts.jwtFailures)
}

// replay sends what the breaker and protection recorded to the coupon
// API, as floodgate events replay does, for s.replayFor at most.
func (d *demo) replay(ctx context.Context) {
	// As many in flight as replay allows: the API takes 200 ms for each.
	// Replay marks the events done in the order they came, and holds
	// that many at most on their way, those it collapses included: its
	// pace is a few hundred events a second, whatever the rate asked.
	parallel := replay.MaxParallel
	fmt.Fprintf(d.out, "\nreplay: what was recorded, sent to the coupon API (events replay --rate %s --parallel %d)\n",
		d.s.replayRate, parallel)
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if d.s.replayFor > 0 {
		rctx, cancel = context.WithTimeout(ctx, d.s.replayFor)
	}
	defer cancel()
	var rout, rerr bytes.Buffer
	d.res.replayErr = replay.Run(rctx, replay.Options{
		Config: d.cfg, Route: demoRoute, Rate: d.s.replayRate, Parallel: parallel,
		Stdout: &rout, Stderr: &rerr,
	})
	d.res.replayOut = rout.String()
	fmt.Fprintf(d.out, "  %s\n", lastLine(rout.String()))
	if rctx.Err() != nil && ctx.Err() == nil {
		rest := "with --hold, floodgate events replay sends the rest"
		if d.o.Hold {
			rest = fmt.Sprintf("floodgate events replay -c %s --route %s sends the rest", d.cfgFile, demoRoute)
		}
		fmt.Fprintf(d.out, "  %s\n", wrap(fmt.Sprintf("stopped after %v, the demo's bound; %s", d.s.replayFor, rest), "  "))
	}
	if err := d.res.replayErr; err != nil {
		if !errors.Is(err, replay.ErrFailed) {
			fmt.Fprintf(&rerr, "%v\n", err)
		}
		for _, l := range strings.Split(strings.TrimSpace(rerr.String()), "\n") {
			fmt.Fprintf(d.out, "  %s\n", l)
		}
	}
}

// hold says where everything serves, and serves until ctx ends.
func (d *demo) hold(ctx context.Context) {
	out, res := d.out, d.res
	jwt := d.cfg.Server.JWT
	exp := time.Now().Add(24 * time.Hour)
	fmt.Fprintf(out, "\nholding: the gateway, its dashboard and the coupon API serve until Ctrl-C\n")
	fmt.Fprintf(out, "  gateway     %s%s\n", res.gatewayURL, d.route.Match.Path)
	fmt.Fprintf(out, "  dashboard   %s/ (metrics at %s/metrics)\n", res.adminURL, res.adminURL)
	fmt.Fprintf(out, "  coupon API  http://%s/stats\n", d.upL.Addr())
	fmt.Fprintf(out, "  config      %s\n", d.cfgFile)
	fmt.Fprintf(out, "try it (a second try within 10s is refused: one per user):\n")
	fmt.Fprintf(out, "  curl -i -X POST -H 'Authorization: Bearer %s' %s%s\n",
		d.key.UserTokens(jwt.Issuer, jwt.Audience, exp)("you"), res.gatewayURL, d.route.Match.Path)
	<-ctx.Done()
}

// demoWait waits until at, then, when done is not nil, until done reports
// true, asking it every 50 ms, for at most overtime more. It reports false
// when ctx ended first.
func demoWait(ctx context.Context, at time.Time, overtime time.Duration, done func() bool) bool {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	for end := time.Now().Add(overtime); done != nil && !done() && time.Now().Before(end); {
		t.Reset(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// demoRouteOf returns the demo's route in cfg and the limits its requests
// meet, global ones first.
func demoRouteOf(cfg *config.Config) (*config.Route, []*config.Limit) {
	for _, r := range cfg.Routes {
		if r.ID == demoRoute {
			return r, append(append([]*config.Limit(nil), cfg.GlobalLimits...), r.Limits...)
		}
	}
	return nil, nil
}

// apiLimit is the limit that protects the coupon API: the route's token
// bucket keyed by the route alone; nil when the example has none.
func apiLimit(limits []*config.Limit) *config.Limit {
	for _, l := range limits {
		if l.Algorithm == limit.TokenBucket && len(l.Key) == 1 && l.Key[0].Source == config.SourceRoute {
			return l
		}
	}
	return nil
}

// admitsPerSecond is the most a token bucket admits in one second: its
// burst, and what it refills in that second.
func admitsPerSecond(l *config.Limit) int64 {
	return l.Burst + int64(float64(l.Rate.Count)/l.Rate.Period.Seconds())
}

// describeLimit says what a limit allows, in one line.
func describeLimit(l *config.Limit) string {
	rate := l.Rate.String()
	if l.Algorithm == limit.TokenBucket {
		rate += fmt.Sprintf(" burst %d", l.Burst)
	}
	keys := func(parts []config.KeyPart) string {
		s := make([]string, len(parts))
		for i, p := range parts {
			s[i] = p.String()
		}
		return strings.Join(s, ", ")
	}
	key := keys(l.Key)
	if len(l.Fallback) > 0 {
		key += " (else " + keys(l.Fallback) + ")"
	}
	return fmt.Sprintf("%-7s %-15s %-15s per %s", l.Name, rate, l.Algorithm, key)
}

// A probeAnswer is the status and body of an answer; status 0 and the
// error for none.
type probeAnswer struct {
	status int
	body   string
}

// recorded reports whether the answer is a fallback whose JSON body says
// "recorded": true.
func (a probeAnswer) recorded() bool {
	var b struct {
		Recorded bool `json:"recorded"`
	}
	return a.status == http.StatusServiceUnavailable && json.Unmarshal([]byte(a.body), &b) == nil && b.Recorded
}

// probe sends one request as a user and returns the answer (its body up
// to 4 KiB).
func probe(ctx context.Context, url, token string) probeAnswer {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return probeAnswer{body: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return probeAnswer{body: err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return probeAnswer{resp.StatusCode, string(body)}
}

// lastLine is the last line of s that is not empty.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// perSecond counts something by the second it happened in, from a start.
type perSecond struct {
	mu    sync.Mutex
	start time.Time
	n     map[int]int64
}

func newPerSecond() *perSecond { return &perSecond{n: map[int]int64{}} }

// begin sets the start; nothing is counted before it.
func (p *perSecond) begin(start time.Time) {
	p.mu.Lock()
	p.start = start
	p.mu.Unlock()
}

// add counts n at now.
func (p *perSecond) add(now time.Time, n int64) {
	p.mu.Lock()
	if !p.start.IsZero() && !now.Before(p.start) {
		p.n[int(now.Sub(p.start)/time.Second)] += n
	}
	p.mu.Unlock()
}

// addWithin counts one at from if to is in the same second.
func (p *perSecond) addWithin(from, to time.Time) {
	p.mu.Lock()
	if !p.start.IsZero() && !from.Before(p.start) && from.Sub(p.start)/time.Second == to.Sub(p.start)/time.Second {
		p.n[int(from.Sub(p.start)/time.Second)]++
	}
	p.mu.Unlock()
}

func (p *perSecond) get(s int) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[s]
}

func (p *perSecond) all() map[int]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.n)
}

func (p *perSecond) max() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := int64(0)
	for _, v := range p.n {
		m = max(m, v)
	}
	return m
}

func (p *perSecond) total() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := int64(0)
	for _, v := range p.n {
		t += v
	}
	return t
}

// demoBackend is the in-process gateway as the demo's admin listener sees
// it: there is no file to reload.
type demoBackend struct{ *gateway.Gateway }

func (demoBackend) Reload() error {
	return fmt.Errorf("the demo has no configuration file to reload")
}

// ms formats a latency in at most 5 columns.
func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	// Each bound keeps a format from rounding up to a sixth column:
	// 9.96 ms is "9ms", not "10.0ms".
	switch {
	case d < 9950*time.Microsecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 9995*time.Millisecond:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d < 99950*time.Millisecond:
		return fmt.Sprintf("%.1fs", d.Seconds()) // a busy machine's
	}
	return fmt.Sprintf("%.0fs", d.Seconds())
}
