// Command decidelat measures the latency and throughput of the Redis
// store's decisions on a flash sale's usual limits: four fixed windows per
// request (global, api, user, ip), users and IPs drawn from 100,000 values
// each, limits sized so that every request is admitted.
//
//	go run ./bench/decidelat [-redis ADDR] [-n 20000] [-c 1] [-seed]
//	go run ./bench/decidelat -redis ADDR -print-evalsha
//
// It runs n decisions from c goroutines and prints the latency percentiles
// of one decision, the throughput, and the CPU time per decision of this
// process and of Redis. Without -redis it starts its own redis-server on a
// free port and stops it at the end.
//
// -seed runs the classic Redis limiter instead, on a client with the
// store's options: four EVALSHA calls per request, one per limit, each an
// INCR, an EXPIRE of a new key and a comparison, each waiting for the one
// before.
//
// -print-evalsha loads the store's script into Redis and prints the exact
// command a decision sends, one argument per line, with the user and IP
// values replaced by redis-benchmark's __rand_int__, so that bench/redis.sh
// replays the store's own call and cannot drift from it.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// seedScript is the classic Redis limiter, one INCR + EXPIRE script per
// limit, as in limit/redisstore's BenchmarkSeedDesignFourEvals.
const seedScript = `local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end if c > tonumber(ARGV[1]) then return 0 end return 1`

const values = 100_000

// seedKey is where the classic limiter counts l: the key the store keeps
// it under, PREFIX{NAME:KEY}:STATEID, so that both designs touch keys of
// one length in the same cluster slots. Every limit here is a fixed
// window of one second, aligned to the epoch (state id fw.1000e).
func seedKey(l limit.Limit) string {
	return redisstore.DefaultPrefix + "{" + l.Rule.Name + ":" + string(l.Key) + "}:fw.1000e"
}

func main() {
	addr := flag.String("redis", "", "Redis address host:port; empty starts a redis-server on a free port")
	n := flag.Int("n", 20000, "decisions to measure")
	c := flag.Int("c", 1, "goroutines deciding at once")
	seed := flag.Bool("seed", false, "run the classic INCR+EXPIRE limiter instead: four sequential EVALSHAs per request")
	printCmd := flag.Bool("print-evalsha", false, "print the store's EVALSHA command for the scenario, one argument per line, and exit")
	flag.Parse()
	if *n < 1 || *c < 1 {
		fail(errors.New("-n and -c must be positive"))
	}
	if *addr == "" {
		srv, err := startRedis()
		if err != nil {
			fail(err)
		}
		err = run(srv.addr, *n, *c, *seed, *printCmd)
		srv.stop()
		if err != nil {
			fail(err)
		}
		return
	}
	if err := run(*addr, *n, *c, *seed, *printCmd); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "decidelat:", err)
	os.Exit(1)
}

// scenario is the four limits: global, api, user and ip fixed windows.
type scenario struct {
	global, api, user, ip *limit.Rule
	globalKey, apiKey     limit.Key
	users, ips            []limit.Key
}

func newScenario() (*scenario, error) {
	fixed := func(name string) *limit.Rule {
		return &limit.Rule{Name: name, Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: limit.MaxCount, Period: time.Second}}
	}
	sc := &scenario{
		global:    fixed("global:all"),
		api:       fixed("lucky-meal:api"),
		user:      fixed("lucky-meal:user"),
		ip:        fixed("lucky-meal:ip"),
		globalKey: limit.NewKey(limit.Part{Kind: "global"}),
		apiKey:    limit.NewKey(limit.Part{Kind: "route", Value: "lucky-meal"}),
		users:     make([]limit.Key, values),
		ips:       make([]limit.Key, values),
	}
	for _, r := range []*limit.Rule{sc.global, sc.api, sc.user, sc.ip} {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	for i := range values {
		sc.users[i] = userKey(strconv.Itoa(1_000_000 + i))
		sc.ips[i] = ipKey(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255))
	}
	return sc, nil
}

func userKey(v string) limit.Key { return limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: v}) }
func ipKey(v string) limit.Key   { return limit.NewKey(limit.Part{Kind: "ip", Value: v}) }

func (sc *scenario) limits(user, ip limit.Key) []limit.Limit {
	return []limit.Limit{
		{Rule: sc.global, Key: sc.globalKey},
		{Rule: sc.api, Key: sc.apiKey},
		{Rule: sc.user, Key: user},
		{Rule: sc.ip, Key: ip},
	}
}

// run measures n decisions from c goroutines against the Redis at addr,
// the store's or, with seed, the classic limiter's; with printCmd it
// prints the store's command instead.
func run(addr string, n, c int, seed, printCmd bool) error {
	ctx := context.Background()
	b, err := open(addr, n, c)
	if err != nil {
		return err
	}
	defer b.close()
	if printCmd {
		return b.printCommand(ctx)
	}
	decide, what := b.storeDecide(ctx), "store (one EVALSHA of decide.lua)"
	if seed {
		decide, what = b.seedDecide(ctx), "seed design (four sequential EVALSHAs)"
	}
	if err := b.warmUp(decide); err != nil {
		return err
	}
	m, err := b.measure(ctx, decide)
	if err != nil {
		return err
	}
	b.report(what, m)
	return nil
}

// bench is one run: the scenario, and the store and a client with the
// store's options, connected to one Redis.
type bench struct {
	addr   string
	n, c   int // decisions to measure, goroutines deciding at once
	sc     *scenario
	store  *redisstore.Store
	client rueidis.Client
}

// open makes the scenario and connects the store and the client to addr.
func open(addr string, n, c int) (*bench, error) {
	sc, err := newScenario()
	if err != nil {
		return nil, err
	}
	store, err := redisstore.New(redisstore.Options{Addrs: []string{addr}, Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	// A client with the store's options (limit/redisstore's New), for
	// -seed and for INFO.
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{addr},
		DisableRetry:      true,
		DisableCache:      true,
		ForceSingleClient: true,
		MaxFlushDelay:     20 * time.Microsecond,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	return &bench{addr: addr, n: n, c: c, sc: sc, store: store, client: client}, nil
}

// close closes the client, then the store.
func (b *bench) close() {
	b.client.Close()
	b.store.Close()
}

// printCommand prints the store's EVALSHA command for the scenario, one
// argument per line.
func (b *bench) printCommand(ctx context.Context) error {
	cmd, err := b.store.DecideCommand(ctx, &limit.Request{
		Limits: b.sc.limits(userKey("__rand_int__"), ipKey("10.__rand_int__")),
		Now:    time.Now(),
	})
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	for _, a := range cmd {
		if strings.ContainsAny(a, "\r\n") {
			return fmt.Errorf("argument %q holds a line break", a)
		}
		fmt.Fprintln(w, a)
	}
	return w.Flush()
}

// storeDecide returns a decision of the store: the four limits, for a
// user and an IP drawn by rng, in one call.
func (b *bench) storeDecide(ctx context.Context) func(rng *rand.Rand) error {
	return func(rng *rand.Rand) error {
		res, err := b.store.Decide(ctx, &limit.Request{
			Limits: b.sc.limits(b.sc.users[rng.IntN(values)], b.sc.ips[rng.IntN(values)]),
			Now:    time.Now(),
		})
		if err == nil && !res.Allowed {
			err = fmt.Errorf("rejected: %+v", res.Decisions)
		}
		return err
	}
}

// seedDecide returns a decision of the classic limiter: one EVALSHA per
// limit, each waiting for the one before.
func (b *bench) seedDecide(ctx context.Context) func(rng *rand.Rand) error {
	script := rueidis.NewLuaScript(seedScript)
	args := []string{strconv.Itoa(limit.MaxCount), "1"}
	return func(rng *rand.Rand) error {
		for _, l := range b.sc.limits(b.sc.users[rng.IntN(values)], b.sc.ips[rng.IntN(values)]) {
			ok, err := script.Exec(ctx, b.client, []string{seedKey(l)}, args).AsInt64()
			if err != nil {
				return err
			}
			if ok != 1 {
				return fmt.Errorf("%s rejected", l.Rule.Name)
			}
		}
		return nil
	}
}

// warmUp loads the script and opens the connections.
func (b *bench) warmUp(decide func(*rand.Rand) error) error {
	warm := rand.New(rand.NewPCG(0, 0))
	for range min(1000, b.n/10+1) {
		if err := decide(warm); err != nil {
			return err
		}
	}
	return nil
}

// measurement is what a timed run measured.
type measurement struct {
	lat         []time.Duration // of every decision, sorted
	wall        time.Duration
	self, redis time.Duration // the CPU time of this process and of Redis
}

// measure runs b.n decisions from b.c goroutines, timing each, and the
// CPU time this process and Redis spent on them.
func (b *bench) measure(ctx context.Context, decide func(*rand.Rand) error) (measurement, error) {
	cpu0, err := redisCPU(ctx, b.client)
	if err != nil {
		return measurement{}, err
	}
	self0 := selfCPU()
	lat := make([][]time.Duration, b.c)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, b.c)
	start := time.Now()
	for g := range b.c {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g)+1, 1))
			mine := make([]time.Duration, 0, b.n/b.c+1)
			for next.Add(1) <= int64(b.n) {
				t := time.Now()
				if err := decide(rng); err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t))
			}
			lat[g] = mine
		})
	}
	wg.Wait()
	wall := time.Since(start)
	self := selfCPU() - self0
	cpu1, err := redisCPU(ctx, b.client)
	if err != nil {
		return measurement{}, err
	}
	close(errs)
	if err := <-errs; err != nil {
		return measurement{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return measurement{lat: all, wall: wall, self: self, redis: cpu1 - cpu0}, nil
}

// report prints the latency percentiles of one decision of m, the
// throughput and the CPU time per decision; what names the design.
func (b *bench) report(what string, m measurement) {
	all := m.lat
	q := func(p float64) time.Duration {
		i := int(float64(len(all))*p+0.999999) - 1
		return all[max(0, min(i, len(all)-1))]
	}
	per := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d.Nanoseconds())/1e3/float64(len(all)), 'f', 2, 64)
	}
	fmt.Printf("%s, %d decisions of 4 limits, %d goroutines, Redis %s\n", what, len(all), b.c, b.addr)
	fmt.Printf("p50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n",
		us(q(0.50)), us(q(0.90)), us(q(0.99)), us(q(0.999)), us(all[len(all)-1]))
	fmt.Printf("throughput %.0f decisions/s  cpu/decision: client %s µs, redis %s µs\n",
		float64(len(all))/m.wall.Seconds(), per(m.self), per(m.redis))
}

func us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 1, 64) + "µs" }

// selfCPU is the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time the server has used, user and system.
func redisCPU(ctx context.Context, c rueidis.Client) (time.Duration, error) {
	info, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
			secs, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu: %s: %v", line, err)
			}
			total += time.Duration(secs * float64(time.Second))
		}
	}
	return total, nil
}

// server is a redis-server this program started.
type server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

// startRedis runs redis-server on a free 127.0.0.1 port, without
// persistence, and waits until it answers.
func startRedis() (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "decidelat")
	if err != nil {
		return nil, err
	}
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir}
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no")
	log, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, err
	}
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ping(s.addr) {
			return s, nil
		}
	}
	s.stop()
	return nil, fmt.Errorf("redis-server on %s did not answer PING within 10 s (log in %s)", s.addr, dir)
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(s.dir)
}
