package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// A demoScript is when each part of the demo happens, as offsets from
// the start of the traffic. Its phases come in this order: warm-up, the
// sale (the surge), the coupon API's outage, its recovery.
type demoScript struct {
	warmup    float64       // requests per second before the sale opens
	opens     time.Duration // when the sale opens: the surge's step to its peak
	plateau   float64       // what the surge settles at, two seconds after it starts
	outage    time.Duration // when the coupon API starts failing
	outageFor time.Duration // how long it fails
	// window and openFor are the breaker's, in place of the example's 10s
	// and 30s, so that the outage and the recovery fit the script.
	window, openFor time.Duration
	replayRate      string // the pace of the replay at the end
}

// defaultScript takes about 30 seconds with its default duration of 16 s:
// the breaker opens about 2.5 s into the outage, when the failures fill
// half of its 5 s window, tries again 2 s later, when the coupon API is
// back, and closes; the replay then sends what it recorded. The plateau
// and open_for are low enough that what the open breaker records (every
// attempt, each user's retries included) replays in seconds, at a pace
// the coupon API takes easily.
var defaultScript = demoScript{
	warmup: 200, opens: 3 * time.Second, plateau: 250,
	outage: 8 * time.Second, outageFor: 4 * time.Second,
	window: 5 * time.Second, openFor: 2 * time.Second,
	replayRate: "250/s",
}

// minDuration is the shortest traffic that shows the whole script: the
// breaker cannot try again before the outage has ended and open_for has
// passed.
func (s demoScript) minDuration() time.Duration { return s.outage + s.outageFor + s.openFor }

// demoOvertime bounds how much longer than planned the outage, and then
// the traffic, may last while the demo waits for the breaker to open in
// the outage, and then to close after it. A machine that keeps up never
// waits; one too busy to (the crowd, the gateway and the API share its
// cores) takes longer to send the calls the breaker judges by, and to
// turn a call around within slow_call_duration, so that the story is the
// same on it, only slower.
const demoOvertime = 30 * time.Second

// demoOptions are what the command line chooses.
type demoOptions struct {
	redis    string        // "": the memory store
	hold     bool          // serve after the script until ctx ends
	peak     float64       // the surge's peak, requests per second
	duration time.Duration // how long the traffic runs
	script   demoScript
	// recordWait replaces the gateway's 100 ms wait for a recorded
	// request's event to be durable (zero keeps it).
	recordWait time.Duration
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "[--redis ADDR] [--rate N] [--duration D] [--hold]",
		"Rehearse a flash sale in one process, with no outside services: a mock coupon API that\n"+
			"serves 500 requests a second (3 s each beyond), floodgate in front of it with the limits\n"+
			"of examples/flash-sale.yaml, and a crowd of users who retry at once when refused.\n\n"+
			"The script, each phase announced: a warm-up at 200 requests/s; the sale opens at 3s with\n"+
			"a surge to --rate that settles at 250/s; the coupon API fails from 8s to 12s, the circuit\n"+
			"breaker opens and records every request it turns away; the API recovers and the breaker's\n"+
			"trial calls close it; at the end, the recorded requests are replayed to the API. On a machine\n"+
			"too busy to keep up, the outage lasts until the breaker has opened, and the traffic until it\n"+
			"has closed again (up to 30s longer each).\n"+
			"A line per second shows what was sent (retries included), the users new that second,\n"+
			"what was admitted, refused by each limit (429), 503, the latency, what reached the\n"+
			"coupon API and the breaker's state. It takes about 30 seconds.\n\n"+
			"--redis runs the limits on a Redis server; --hold keeps the gateway, its dashboard and\n"+
			"the coupon API up afterwards, until Ctrl-C.")
	o := demoOptions{script: defaultScript}
	fs.StringVar(&o.redis, "redis", "", "decide the limits on the Redis server at `ADDR` instead of in memory")
	fs.Float64Var(&o.peak, "rate", 5000, "the peak of the surge, in requests `per second`")
	fs.DurationVar(&o.duration, "duration", 16*time.Second, "how long the traffic runs, the recovery included (at least "+
		o.script.minDuration().String()+")")
	fs.BoolVar(&o.hold, "hold", false, "keep serving after the script, until Ctrl-C")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if min := o.script.minDuration(); o.duration < min {
		return usageError(fs, stderr, "--duration %v: the script needs at least %v (the API recovers at %v, and the breaker waits %v to try it)",
			o.duration, min, o.script.outage+o.script.outageFor, o.script.openFor)
	}
	if o.redis != "" {
		if _, _, err := net.SplitHostPort(o.redis); err != nil {
			return usageError(fs, stderr, "--redis %q: want HOST:PORT", o.redis)
		}
	}
	if !(o.peak > o.script.plateau) || o.peak > 1e6 {
		return usageError(fs, stderr, "--rate %v: the surge's peak must be above the %v/s it settles at, and at most 1000000", o.peak, o.script.plateau)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := demo(ctx, stdout, o); err != nil {
		fmt.Fprintln(stderr, "floodgate demo:", err)
		return exitFailure
	}
	return exitOK
}

// demoReceivedHeader carries, from the demo's gateway listener to the
// coupon API, when the gateway received a request (Unix nanoseconds).
const demoReceivedHeader = "X-Demo-Received"

// demoResult is what a run of the demo saw, for its tests.
type demoResult struct {
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
	probes   []probeAnswer
	recorded int64 // breaker_rejected events the gateway recorded
	// replayCode and replayOut are the replay's exit code and output.
	replayCode int
	replayOut  string
	// gatewayURL and adminURL are where the demo served.
	gatewayURL, adminURL string
}

func demo(ctx context.Context, out io.Writer, o demoOptions) (*demoResult, error) {
	s := o.script
	listen := func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	upL, err := listen()
	if err != nil {
		return nil, err
	}
	defer upL.Close()
	gwL, err := listen()
	if err != nil {
		return nil, err
	}
	defer gwL.Close()
	adL, err := listen()
	if err != nil {
		return nil, err
	}
	defer adL.Close()

	// The users' login service: a key that signs each user's token, and
	// the JWKS file the gateway verifies them with. One process plays
	// every part here, so the key is a shared secret (HS256), the cheapest
	// to check, which leaves the cores to the surge; an identity provider
	// would sign with RS256 or ES256 (BENCHMARKS.md has what each costs).
	key, err := jwtsign.Generate("HS256", "demo")
	if err != nil {
		return nil, err
	}
	jwks, err := key.PublicJWKS()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "floodgate-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		return nil, err
	}
	eventsFile := filepath.Join(dir, "lucky-meal-events.jsonl")
	cfgFile := filepath.Join(dir, "flash-sale.yaml")
	data, err := demoConfigFile(flashSaleYAML, demoOverrides{
		listen: gwL.Addr().String(), admin: adL.Addr().String(), upstream: "http://" + upL.Addr().String(),
		jwksFile: jwksFile, eventsFile: eventsFile, redis: o.redis, window: s.window, openFor: s.openFor,
	})
	if err != nil {
		return nil, fmt.Errorf("examples/flash-sale.yaml: %w", err)
	}
	if err := os.WriteFile(cfgFile, data, 0o600); err != nil {
		return nil, err
	}
	cfg, err := config.Parse(cfgFile, data)
	if err != nil {
		return nil, fmt.Errorf("examples/flash-sale.yaml with the demo's changes does not load:\n%s", strings.Join(admin.ErrorLines(err), "\n"))
	}
	route, limits := demoRouteOf(cfg)
	if route == nil || !route.Breaker.Enabled || !route.Fallback.Record {
		return nil, fmt.Errorf("examples/flash-sale.yaml: no route %s with a breaker whose fallback records", demoRoute)
	}
	res := &demoResult{limits: limits, gatewayURL: "http://" + gwL.Addr().String(), adminURL: "http://" + adL.Addr().String()}

	reg := prometheus.NewRegistry()
	logger := slog.New(slog.DiscardHandler)
	gw, err := gateway.New(cfg, gateway.Options{Logger: logger, Registerer: reg, RecordWait: o.recordWait})
	if err != nil {
		return nil, err
	}
	defer gw.Close()
	if o.redis != "" {
		// The gateway would serve anyway, deciding by on_error: a demo
		// of Redis that never reached it would show nothing of it.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := gw.CheckStore(cctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("redis at %s does not answer: %w", o.redis, err)
		}
	}

	// The coupon API, started with the traffic, counting what reaches it
	// each second, and of that what the gateway received in the same
	// second. On a machine too busy to keep up, admitted requests can
	// reach the API late and together, in a later second than the one
	// the gateway admitted them in; those the gateway received and
	// delivered within one second were admitted in it, so the api limit
	// alone bounds their count, however busy the machine.
	var coupon atomic.Pointer[rehearse.Upstream]
	reached, within := newPerSecond(), newPerSecond()
	quiet := log.New(io.Discard, "", 0)
	upSrv := &http.Server{ErrorLog: quiet, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := coupon.Load()
		if c == nil {
			http.Error(w, "not started", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/stats" {
			now := time.Now()
			reached.add(now, 1)
			if ns, err := strconv.ParseInt(r.Header.Get(demoReceivedHeader), 10, 64); err == nil {
				within.addWithin(time.Unix(0, ns), now)
			}
		}
		c.ServeHTTP(w, r)
	})}
	go upSrv.Serve(upL)
	defer upSrv.Close()
	// Served as serve serves it, through the gateway's listener, so that
	// the demo answers malformed requests as the product does.
	stamp := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(demoReceivedHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
		gw.ServeHTTP(w, r)
	})
	gwSrv := &http.Server{Handler: stamp, MaxHeaderBytes: cfg.Server.MaxHeaderBytes, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	go gwSrv.Serve(gw.Listener(gwSrv, gwL))
	defer gwSrv.Close()
	ah := admin.NewHandler(demoBackend{gw}, reg, logger)
	defer ah.Close()
	adSrv := &http.Server{Handler: ah, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	go adSrv.Serve(adL)
	defer adSrv.Close()

	storeName := "memory"
	if o.redis != "" {
		storeName = fmt.Sprintf("redis at %s (decision budget %v)", o.redis, cfg.Store.Redis.Timeout)
	}
	fmt.Fprintf(out, "floodgate demo: the limits of examples/flash-sale.yaml in front of a mock coupon API, in one process\n")
	fmt.Fprintf(out, "  coupon API  %s answers in 200 ms up to %d requests/s, in 3 s beyond\n", upL.Addr(), demoCapacity)
	fmt.Fprintf(out, "  gateway     %s, store %s, route %s:\n", res.gatewayURL, storeName, demoRoute)
	for _, l := range limits {
		fmt.Fprintf(out, "    %s\n", describeLimit(l))
	}
	b := route.Breaker
	fmt.Fprintf(out, "  breaker     opens when %.0f%% of at least %d calls in its window fail or take over %v; %d trial calls\n",
		b.FailureRate*100, b.MinCalls, b.SlowCallDuration, b.HalfOpenCalls)
	if orig, err := config.Parse("examples/flash-sale.yaml", flashSaleYAML); err == nil {
		if r, _ := demoRouteOf(orig); r != nil {
			fmt.Fprintf(out, "breaker timings shortened for the demo: window %v, open_for %v (the example's: %v, %v)\n",
				b.Window, b.OpenFor, r.Breaker.Window, r.Breaker.OpenFor)
		}
	}
	if o.hold {
		fmt.Fprintf(out, "dashboard: %s/ (and after the script: --hold keeps it up)\n", res.adminURL)
	} else {
		fmt.Fprintf(out, "dashboard: %s/, only while the demo runs (--hold keeps it up afterwards)\n", res.adminURL)
	}
	fmt.Fprintf(out, "crowd: %d users (signed tokens, %d addresses); a refused one retries at once, up to %d times\n\n",
		demoUsers, demoIPs, rehearse.MaxRetries)

	jwt := cfg.Server.JWT
	tokens := userTokens(key, jwt.Issuer, jwt.Audience, time.Now().Add(o.duration+time.Hour))
	newUsers := newPerSecond()
	var seen sync.Map
	table := newDemoTable(out, limits)
	table.header()
	// The phases announced, by the second whose row they come before: the
	// script adds the API's recovery when it happens.
	var phaseMu sync.Mutex
	phases := map[int]string{
		0: fmt.Sprintf("warm-up: %.0f requests/s", s.warmup),
		int(s.opens / time.Second): fmt.Sprintf("the sale opens at %v: %.0f requests/s for a second, settling at %.0f/s; refused users retry at once",
			s.opens, o.peak, s.plateau),
		int(s.outage / time.Second): fmt.Sprintf("the coupon API fails at %v, for %v: the breaker opens, answers 503 and records who it turns away",
			s.outage, s.outageFor),
	}
	announce := func(at time.Duration, text string) {
		phaseMu.Lock()
		defer phaseMu.Unlock()
		if prev := phases[int(at/time.Second)]; prev != "" {
			text = prev + "\n" + text
		}
		phases[int(at/time.Second)] = text
	}

	// Everything counts from here, the start of the traffic.
	start := time.Now()
	up, err := rehearse.NewUpstream(rehearse.UpstreamConfig{
		Latency: 200 * time.Millisecond, Jitter: 50 * time.Millisecond,
		Capacity: demoCapacity, OverloadLatency: 3 * time.Second,
		Body: `{"coupon":"granted"}`, Seed: 1,
	}, start)
	if err != nil {
		return nil, err
	}
	reached.begin(start)
	within.begin(start)
	newUsers.begin(start)
	coupon.Store(up)
	watch := newBreakerWatch(reg, demoRoute, start, gw.Breakers())
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch.run(watchCtx, 50*time.Millisecond)
	}()
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		select {
		case <-watch.opened:
		case <-watchCtx.Done():
			select {
			case <-watch.opened: // at the last moment
			default:
				return
			}
		}
		// A fallback says "recorded": true only once its event is
		// durable, which a busy disk may not make it within the answer's
		// budget: probe every 50 ms while the breaker is open, each time
		// it opens (a failed trial opens it again), until the load ends.
		// Each probe goes on its own, so that a slow answer (a busy
		// machine's) does not hold back the next.
		probes := make([]probeAnswer, 40)
		var wg sync.WaitGroup
		n := 0
		for ; n < len(probes) && watchCtx.Err() == nil; time.Sleep(50 * time.Millisecond) {
			if watch.current() == "OPEN" {
				i := n
				wg.Go(func() {
					probes[i] = probe(ctx, res.gatewayURL+route.Match.Path, tokens(fmt.Sprintf("demo-probe-%d", i)))
				})
				n++
			}
		}
		wg.Wait()
		res.probes = probes[:n]
	}()

	// The script's outage and end. The API fails from s.outage until
	// s.outageFor has passed and the breaker has opened; the traffic ends
	// once o.duration has passed and the breaker has closed again. On a
	// machine that keeps up, that is when planned; a busy one takes
	// longer (demoOvertime at most, each).
	stopLoad := make(chan struct{})
	scripted := make(chan struct{})
	scriptCtx, stopScript := context.WithCancel(ctx)
	defer stopScript()
	go func() {
		ctx := scriptCtx
		defer close(scripted)
		defer close(stopLoad)
		if !demoWait(ctx, start.Add(s.outage), 0, nil) {
			return
		}
		up.Outage(true)
		failed := time.Since(start)
		opened := func() bool { return watch.wasSince(failed, "OPEN") }
		if !demoWait(ctx, start.Add(s.outage+s.outageFor), demoOvertime, opened) {
			return
		}
		up.Outage(false)
		back := time.Since(start).Round(100 * time.Millisecond)
		announce(back, fmt.Sprintf("the coupon API is back at %v: after open_for, %d trial calls (HALF_OPEN) close the breaker", back, b.HalfOpenCalls))
		demoWait(ctx, start.Add(o.duration), demoOvertime, func() bool { return watch.current() == "CLOSED" })
	}()

	load, err := rehearse.Run(ctx, rehearse.LoadConfig{
		URL:    res.gatewayURL + route.Match.Path,
		Method: http.MethodPost,
		Profile: rehearse.Profile{Shape: rehearse.Surge, From: s.warmup, Rate: o.peak, StepAt: s.opens,
			Plateau: s.plateau, Duration: o.duration + 2*demoOvertime, Seed: 1},
		Stop:  stopLoad,
		Users: demoUsers,
		UserToken: func(user string) string {
			if _, dup := seen.LoadOrStore(user, true); !dup {
				newUsers.add(time.Now(), 1)
			}
			return tokens(user)
		},
		IPs:     demoIPs,
		Retry:   rehearse.RetryImmediate,
		Timeout: 5 * time.Second,
		// One process plays every part here, on a machine that may have
		// two cores: beyond this many requests in flight the generator
		// drops (and counts) instead of exhausting file descriptors.
		ConcurrencyCap: 3000,
		OnSecond: func(sec rehearse.Second) {
			phaseMu.Lock()
			p, ok := phases[sec.T]
			phaseMu.Unlock()
			if ok {
				fmt.Fprintln(out, p)
			}
			row := demoRow{Second: sec, newUsers: newUsers.get(sec.T), reached: reached.get(sec.T),
				limited: watch.limited(sec.T, limits), breaker: watch.breakerIn(sec.T)}
			res.rows = append(res.rows, row)
			table.row(row)
		},
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
	watch.sample(time.Now())
	res.states = watch.states()
	res.within = within.all()
	counts := watch.last
	res.recorded = int64(counts.recorded)

	if ran := load.Profile.Duration; !load.Interrupted && ran > o.duration+time.Second {
		fmt.Fprintf(out, "\nthe traffic ran %v, not %v: this machine was too busy for the breaker to open or close when planned\n",
			ran.Round(time.Second), o.duration)
	}
	t := load.Total
	fmt.Fprintf(out, "\nsent %d requests (%d of them retries) for %d users; dropped by the generator: %d\n",
		t.Sent, t.Retries, newUsers.total(), t.Dropped)
	fmt.Fprintf(out, "answers: admitted %d, 429 %d, 503 %d, other %d; p50 %s, p99 %s\n",
		t.OK, t.TooMany, t.Unavailable, t.Other, ms(t.P50), ms(t.P99))
	if t.Dropped > 0 {
		fmt.Fprintf(out, "(the generator shares this machine with the gateway and the API; --rate 2000 asks less of it)\n")
	}
	if n := counts.storeErrors; n > 0 {
		fmt.Fprintf(out, "the store missed its %v budget %.0f times (the crowd shares this machine); on_error: %s answered\n",
			cfg.Store.Redis.Timeout, n, cfg.Store.OnError)
	}
	api := apiLimit(limits)
	most := reached.max()
	fmt.Fprintf(out, "the coupon API got at most %d requests in a second (capacity %d", most, demoCapacity)
	if api != nil {
		fmt.Fprintf(out, "; the %s limit admits %d", api.Name, admitsPerSecond(api))
	}
	fmt.Fprintln(out, ")")
	if api != nil && most > admitsPerSecond(api) {
		fmt.Fprintf(out, "(more than the limit admits: admitted requests reached it late and together, this machine was\n"+
			"too busy to keep up; of those the gateway received in the same second, at most %d)\n", within.max())
	}
	fmt.Fprintf(out, "breaker: %s\n", strings.Join(watch.changeLog(), ", "))
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
		fmt.Fprintf(out, "the breaker did not open: nothing was recorded\n")
	}
	fmt.Fprintf(out, "events recorded: %d, in %s\n", res.recorded, eventsFile)
	fmt.Fprintf(out, "tokens not accepted: %.0f\n", counts.jwtFailures)
	if load.Interrupted || ctx.Err() != nil {
		fmt.Fprintf(out, "interrupted: no replay\n")
		return res, nil
	}

	// As many in flight as replay allows: the API takes 200 ms for each.
	parallel := replay.MaxParallel
	fmt.Fprintf(out, "\nreplay: what was recorded, sent to the coupon API (events replay --rate %s --parallel %d)\n",
		s.replayRate, parallel)
	var rout, rerr bytes.Buffer
	res.replayCode = runReplay([]string{"-c", cfgFile, "--route", demoRoute, "--rate", s.replayRate, "--parallel", fmt.Sprint(parallel)}, &rout, &rerr)
	res.replayOut = rout.String()
	fmt.Fprintf(out, "  %s\n", lastLine(rout.String()))
	if res.replayCode != exitOK {
		for _, l := range strings.Split(strings.TrimSpace(rerr.String()), "\n") {
			fmt.Fprintf(out, "  %s\n", l)
		}
	}

	if !o.hold {
		return res, nil
	}
	exp := time.Now().Add(24 * time.Hour)
	fmt.Fprintf(out, "\nholding: the gateway, its dashboard and the coupon API serve until Ctrl-C\n")
	fmt.Fprintf(out, "  gateway     %s%s\n", res.gatewayURL, route.Match.Path)
	fmt.Fprintf(out, "  dashboard   %s/ (metrics at %s/metrics)\n", res.adminURL, res.adminURL)
	fmt.Fprintf(out, "  coupon API  http://%s/stats\n", upL.Addr())
	fmt.Fprintf(out, "  config      %s\n", cfgFile)
	fmt.Fprintf(out, "try it (a second try within 10s is refused: one per user):\n")
	fmt.Fprintf(out, "  curl -i -X POST -H 'Authorization: Bearer %s' %s%s\n",
		userTokens(key, jwt.Issuer, jwt.Audience, exp)("you"), res.gatewayURL, route.Match.Path)
	<-ctx.Done()
	return res, nil
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
type demoBackend struct{ gw *gateway.Gateway }

func (b demoBackend) Config() *config.Config { return b.gw.Config() }
func (b demoBackend) Reload() error {
	return fmt.Errorf("the demo has no configuration file to reload")
}
func (b demoBackend) LimitState(ctx context.Context, route, name string, values []string, fallback bool) (limit.State, error) {
	return b.gw.LimitState(ctx, route, name, values, fallback)
}
func (b demoBackend) ResetLimit(ctx context.Context, route, name string, values []string, fallback bool) error {
	return b.gw.ResetLimit(ctx, route, name, values, fallback)
}
func (b demoBackend) Ready(ctx context.Context) error   { return b.gw.Ready(ctx) }
func (b demoBackend) Breakers() []gateway.BreakerStatus { return b.gw.Breakers() }
func (b demoBackend) ForceBreaker(route, state string, ttl time.Duration) error {
	return b.gw.ForceBreaker(route, state, ttl)
}
func (b demoBackend) Overrides() gateway.Overrides { return b.gw.Overrides() }
func (b demoBackend) SetOverride(ctx context.Context, route, name string, req gateway.OverrideRequest) (gateway.OverrideStatus, error) {
	return b.gw.SetOverride(ctx, route, name, req)
}
func (b demoBackend) RemoveOverride(ctx context.Context, route, name string) (gateway.Override, int64, error) {
	return b.gw.RemoveOverride(ctx, route, name)
}
func (b demoBackend) Degraded() string { return b.gw.Degraded() }

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 100*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds()) // a busy machine's: 6 columns at most
	}
	return fmt.Sprintf("%.0fs", d.Seconds())
}
