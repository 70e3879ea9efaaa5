package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/jwtsign"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/rehearse"
)

// The demo's scenario, from the seeds: a coupon API that serves 500
// requests a second in 200 ms and degrades to 3 s past that, and a flash
// sale that jumps from 200 to 5,000 requests a second at the start of the
// third second, with users who retry at once.
const (
	demoIssuer   = "https://login.demo.invalid/"
	demoCapacity = 500
	demoAPIRate  = 400 // what the gateway lets through: 80 % of the capacity, room for admissions that arrive together
	demoBurst    = 20
)

const demoConfig = `
server:
  listen: "%s"
  trusted_proxies: [127.0.0.1]   # the load generator plays the load balancer
  jwt: {jwks_file: "%s", issuer: "%s", audience: lucky-meal}
admin:
  listen: "%s"
store: %s
global_limits:
  - name: global
    key: [global]
    rate: 2000/s
    reject: {status: 429, code: system_busy, message: "Too busy, try again later"}
routes:
  - id: lucky-meal
    match: {path: /api/activities/lucky-meal/receive, methods: [POST]}
    upstream: {targets: ["http://%s"], timeout: 2s}
    limits:
      - name: user
        key: [jwt:sub, path]
        fallback: [ip]
        rate: 1/10s
        reject: {status: 429, code: repeat_apply, message: "You have already taken part"}
      - name: api
        key: [route]
        algorithm: token_bucket
        rate: %d/s
        burst: %d
        reject: {status: 429, code: system_busy, message: "Too busy, try again later"}
      - name: ip
        key: [ip]
        algorithm: sliding_window
        rate: 100/min
    breaker:
      enabled: true
      window: 5s
      min_calls: 50
      failure_rate: 0.5
      slow_call_duration: 1s
      slow_call_rate: 0.5
      open_for: 3s
      half_open_calls: 10
    fallback:
      status: 503
      code: coupon_busy
      message: "The coupon system is busy; your entry is recorded"
`

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "[--redis ADDR] [--duration D]",
		"Rehearse a flash sale in one process, with no outside services: a mock coupon API\n"+
			"that serves 500 requests a second (and degrades to 3 s past that), floodgate in front\n"+
			"of it with the seeds' four limits and a circuit breaker, and a surge from 200 to\n"+
			"5,000 requests a second whose users retry at once. Prints a line per second: what\n"+
			"was sent, admitted, refused with 429 and 503, the latency, and the breaker's state;\n"+
			"then what reached the coupon API. --redis runs the limits on a Redis server.")
	redisAddr := fs.String("redis", "", "decide the limits on the Redis server at `ADDR` instead of in memory")
	duration := fs.Duration("duration", 20*time.Second, "how long the surge runs")
	rate := fs.Float64("rate", 5000, "the peak of the surge, in requests per second")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if *duration < 5*time.Second {
		return usageError(fs, stderr, "--duration %v: the surge needs at least 5s", *duration)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo(ctx, stdout, *redisAddr, *duration, *rate); err != nil {
		fmt.Fprintln(stderr, "floodgate demo:", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context, out io.Writer, redisAddr string, duration time.Duration, peak float64) error {
	listen := func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	upL, err := listen()
	if err != nil {
		return err
	}
	gwL, err := listen()
	if err != nil {
		return err
	}
	adL, err := listen()
	if err != nil {
		return err
	}

	// The coupon API, counting what reaches it each second.
	start := time.Now()
	coupon, err := rehearse.NewUpstream(rehearse.UpstreamConfig{
		Latency: 200 * time.Millisecond, Jitter: 50 * time.Millisecond,
		Capacity: demoCapacity, OverloadLatency: 3 * time.Second, Body: `{"coupon":"granted"}`,
	}, start)
	if err != nil {
		return err
	}
	var reached sync.Map // second -> *atomic.Int64
	quiet := log.New(io.Discard, "", 0)
	upSrv := &http.Server{ErrorLog: quiet, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := int(time.Since(start) / time.Second)
		n, _ := reached.LoadOrStore(s, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		coupon.ServeHTTP(w, r)
	})}
	go upSrv.Serve(upL)
	defer upSrv.Close()

	// The users' login service: a key that signs each user's token, and
	// the JWKS file the gateway verifies them with. One process plays
	// every part here, so the key is a shared secret (HS256), the cheapest
	// to check, which leaves the cores to the surge; an identity provider
	// would sign with RS256 or ES256 (BENCHMARKS.md has what each costs).
	key, err := jwtsign.Generate("HS256", "demo")
	if err != nil {
		return err
	}
	jwks, err := key.PublicJWKS()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "floodgate-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o600); err != nil {
		return err
	}

	store := "{type: memory}"
	if redisAddr != "" {
		store = fmt.Sprintf(`{type: redis, redis: {addrs: [%q], timeout: 100ms}}`, redisAddr)
	}
	yaml := fmt.Sprintf(demoConfig, gwL.Addr(), jwksFile, demoIssuer, adL.Addr(), store, upL.Addr(), demoAPIRate, demoBurst)
	cfg, err := config.Parse("demo.yaml", []byte(yaml))
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.DiscardHandler)
	gw, err := gateway.New(cfg, gateway.Options{Logger: logger, Registerer: reg})
	if err != nil {
		return err
	}
	defer gw.Close()
	if redisAddr != "" {
		// The gateway would serve anyway, deciding in memory: a demo of
		// Redis that never reached it would show nothing of it.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := gw.CheckStore(cctx)
		cancel()
		if err != nil {
			return fmt.Errorf("redis at %s does not answer: %w", redisAddr, err)
		}
	}
	// Served as serve serves it, through the gateway's listener, so that
	// the demo answers malformed requests as the product does.
	gwSrv := &http.Server{Handler: gw, MaxHeaderBytes: cfg.Server.MaxHeaderBytes, ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	go gwSrv.Serve(gw.Listener(gwSrv, gwL))
	defer gwSrv.Close()
	adSrv := &http.Server{Handler: admin.NewHandler(demoBackend{gw}, reg, logger), ErrorLog: quiet}
	go adSrv.Serve(adL)
	defer adSrv.Close()

	storeName := "memory"
	if redisAddr != "" {
		storeName = "redis " + redisAddr
	}
	fmt.Fprintf(out, "floodgate demo: coupon API at %s answers in 200 ms up to %d requests/s, in 3 s beyond\n", upL.Addr(), demoCapacity)
	fmt.Fprintf(out, "gateway at http://%s (store %s): global 2000/s, api %d/s (token bucket, burst %d), user 1/10s by its token's sub, ip 100/min, breaker\n",
		gwL.Addr(), storeName, demoAPIRate, demoBurst)
	fmt.Fprintf(out, "watch it while it runs: http://%s/ (dashboard), http://%s/metrics\n", adL.Addr(), adL.Addr())
	fmt.Fprintf(out, "surge: 200/s, then %.0f/s at 3s, settling at %.0f/s; 20,000 users, each with a signed token, who retry at once\n", peak, peak/5)
	fmt.Fprintf(out, "each second: requests sent, answers 2xx, 429 and 503 received, their p50 and p99, requests that reached the API, its breaker\n\n")
	fmt.Fprintf(out, "%4s %7s %9s %7s %7s %8s %8s %9s  %s\n", "t", "sent", "2xx", "429", "503", "p50", "p99", "upstream", "breaker")

	res, err := rehearse.Run(ctx, rehearse.LoadConfig{
		URL:       "http://" + gwL.Addr().String() + "/api/activities/lucky-meal/receive",
		Method:    http.MethodPost,
		Profile:   rehearse.Profile{Shape: rehearse.Surge, From: 200, Rate: peak, StepAt: 3 * time.Second, Duration: duration, Seed: 1},
		Users:     20000,
		UserToken: userTokens(key, demoIssuer, "lucky-meal", time.Now().Add(duration+time.Hour)),
		IPs:       50000,
		Retry:     rehearse.RetryImmediate,
		Timeout:   5 * time.Second,
		// One process plays every part here, on a machine that may have
		// two cores: beyond this many requests in flight the generator
		// drops (and counts) instead of exhausting file descriptors.
		ConcurrencyCap: 3000,
		OnSecond: func(s rehearse.Second) {
			n := int64(0)
			if v, ok := reached.Load(s.T); ok {
				n = v.(*atomic.Int64).Load()
			}
			state := "-"
			if bs := gw.Breakers(); len(bs) > 0 {
				state = bs[0].State
			}
			fmt.Fprintf(out, "%4d %7d %9d %7d %7d %8s %8s %9d  %s\n", s.T, s.Sent, s.OK, s.TooMany, s.Unavailable,
				ms(s.P50), ms(s.P99), n, state)
		},
	})
	if err != nil {
		return err
	}
	peakReached := int64(0)
	reached.Range(func(_, v any) bool {
		peakReached = max(peakReached, v.(*atomic.Int64).Load())
		return true
	})
	t := res.Total
	fmt.Fprintf(out, "\nsent %d (retries %d): 2xx %d, 429 %d, 503 %d, other answers (504, 502) %d, dropped by the generator %d; p99 %s\n",
		t.Sent, t.Retries, t.OK, t.TooMany, t.Unavailable, t.Other, t.Dropped, ms(t.P99))
	if t.Dropped > 0 {
		fmt.Fprintf(out, "(the generator shares this machine with the gateway and the API; --rate 2000 asks less of it)\n")
	}
	fmt.Fprintf(out, "the user limit counted each user by the sub of its verified token; tokens not accepted: %.0f\n", counterSum(reg, "gateway_jwt_failures_total"))
	if peakReached <= demoCapacity {
		fmt.Fprintf(out, "the coupon API saw at most %d requests in a second (capacity %d): floodgate held the flood back\n", peakReached, demoCapacity)
		return nil
	}
	// The token bucket lets at most rate + burst through in any second;
	// more in one second of the API's means admissions that waited for a
	// core between the gateway and the API and arrived together.
	fmt.Fprintf(out, "the coupon API saw at most %d requests in a second, over its capacity of %d; the gateway admits at most %d in any second\n"+
		"(%d/s and a burst of %d), so admitted requests reached it late and together: this machine was too busy to keep up (p99 above)\n",
		peakReached, demoCapacity, demoAPIRate+demoBurst, demoAPIRate, demoBurst)
	return nil
}

// counterSum is the sum of a counter's series in reg; 0 when it has none.
func counterSum(reg prometheus.Gatherer, name string) float64 {
	mfs, _ := reg.Gather()
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
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
