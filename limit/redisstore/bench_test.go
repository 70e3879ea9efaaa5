package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// The classic Redis limiter: one INCR + EXPIRE script per dimension, called
// one after the other, so a request costs four round trips and one
// rejected by a later dimension has used quota in the earlier ones.
const seedScript = `local c = redis.call('INCR', KEYS[1]) if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end if c > tonumber(ARGV[1]) then return 0 end return 1`

// fourLimits is a flash sale's usual set: global, api, user and ip fixed
// windows, sized so that every request is admitted, with users and IPs
// drawn from 100,000 values each.
type fourLimits struct {
	global, api, user, ip *limit.Rule
	globalKey, apiKey     limit.Key
	users, ips            []limit.Key
}

func newFourLimits(b *testing.B) *fourLimits {
	fixed := func(name string) *limit.Rule {
		return valid(b, &limit.Rule{Name: name, Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: limit.MaxCount, Period: time.Second}})
	}
	f := &fourLimits{
		global:    fixed("global:all"),
		api:       fixed("lucky-meal:api"),
		user:      fixed("lucky-meal:user"),
		ip:        fixed("lucky-meal:ip"),
		globalKey: limit.NewKey(limit.Part{Kind: "global"}),
		apiKey:    limit.NewKey(limit.Part{Kind: "route", Value: "lucky-meal"}),
		users:     make([]limit.Key, 100_000),
		ips:       make([]limit.Key, 100_000),
	}
	for i := range f.users {
		f.users[i] = limit.NewKey(limit.Part{Kind: "header:x-user-id", Value: strconv.Itoa(1_000_000 + i)})
		f.ips[i] = limit.NewKey(limit.Part{Kind: "ip", Value: fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255)})
	}
	return f
}

// parallel runs op from 1 goroutine, then from 64 (SetParallelism rounds
// up to a multiple of GOMAXPROCS), each with its own random source. Besides
// the time per request it reports the CPU time Redis spent per request,
// the resource that bounds a shared limiter (of all of srvs, the nodes of a
// cluster).
func parallel(b *testing.B, srvs []*testredis.Server, op func(rng *rand.Rand) error) {
	var seed atomic.Uint64
	b.Run("g1", func(b *testing.B) {
		b.ReportAllocs()
		cpu := redisCPU(b, srvs)
		rng := rand.New(rand.NewPCG(seed.Add(1), 1))
		for b.Loop() {
			if err := op(rng); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric((redisCPU(b, srvs)-cpu).Seconds()*1e6/float64(b.N), "redis-cpu-µs/op")
	})
	b.Run("g64", func(b *testing.B) {
		b.ReportAllocs()
		p := (64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
		b.SetParallelism(p)
		cpu := redisCPU(b, srvs)
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(seed.Add(1), 1))
			for pb.Next() {
				if err := op(rng); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric((redisCPU(b, srvs)-cpu).Seconds()*1e6/float64(b.N), "redis-cpu-µs/op")
		b.ReportMetric(float64(p*runtime.GOMAXPROCS(0)), "goroutines")
	})
}

// redisCPU is the CPU time the servers have used, user and system.
func redisCPU(b *testing.B, srvs []*testredis.Server) time.Duration {
	var total time.Duration
	for _, srv := range srvs {
		for _, line := range strings.Split(srv.Do(b, "INFO", "cpu"), "\n") {
			name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if ok && (name == "used_cpu_user" || name == "used_cpu_sys") {
				secs, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("INFO cpu: %s: %v", line, err)
				}
				total += time.Duration(secs * float64(time.Second))
			}
		}
	}
	return total
}

// BenchmarkDecideFourFixed decides the four limits in one script call.
func BenchmarkDecideFourFixed(b *testing.B) {
	srv := testredis.Start(b)
	benchFour(b, open(b, srv), []*testredis.Server{srv})
}

// BenchmarkClusterDecideFourFixed decides the four limits on a 3-master
// Redis Cluster: four slots, the user limit's first.
func BenchmarkClusterDecideFourFixed(b *testing.B) {
	cl := testredis.StartCluster(b, 3)
	benchFour(b, openCluster(b, cl), cl.Nodes())
}

func benchFour(b *testing.B, s *Store, srvs []*testredis.Server) {
	f := newFourLimits(b)
	ctx := context.Background()
	parallel(b, srvs, func(rng *rand.Rand) error {
		res, err := s.Decide(ctx, &limit.Request{
			Limits: []limit.Limit{
				{Rule: f.global, Key: f.globalKey},
				{Rule: f.api, Key: f.apiKey},
				{Rule: f.user, Key: f.users[rng.IntN(len(f.users))]},
				{Rule: f.ip, Key: f.ips[rng.IntN(len(f.ips))]},
			},
			Now: time.Now(),
		})
		if err == nil && !res.Allowed {
			err = fmt.Errorf("rejected: %+v", res.Decisions)
		}
		return err
	})
}

// BenchmarkSeedDesignFourEvals is the classic design (seedScript) on the
// same client and key shapes: four EVALSHA calls, one per dimension, each
// waiting for the one before.
func BenchmarkSeedDesignFourEvals(b *testing.B) {
	srv := testredis.Start(b)
	s := open(b, srv)
	c, err := s.get("bench")
	if err != nil {
		b.Fatal(err)
	}
	f := newFourLimits(b)
	script := rueidis.NewLuaScript(seedScript)
	args := []string{strconv.Itoa(limit.MaxCount), "1"}
	ctx := context.Background()
	parallel(b, []*testredis.Server{srv}, func(rng *rand.Rand) error {
		for _, l := range [...]limit.Limit{
			{Rule: f.global, Key: f.globalKey},
			{Rule: f.api, Key: f.apiKey},
			{Rule: f.user, Key: f.users[rng.IntN(len(f.users))]},
			{Rule: f.ip, Key: f.ips[rng.IntN(len(f.ips))]},
		} {
			ok, err := script.Exec(ctx, c, []string{core.StoredKey(DefaultPrefix, l.Rule, l.Key)}, args).AsInt64()
			if err != nil {
				return err
			}
			if ok != 1 {
				return fmt.Errorf("%s rejected", l.Rule.Name)
			}
		}
		return nil
	})
}

// BenchmarkRedisInstructions counts the instructions Redis executes per
// decision of fourLimits (users and IPs drawn from 100,000 each), decided
// alone (a call of mode d, as every decision is while few are in flight)
// and by the store's batch calls of 1, 6 and 64 requests, with redis-server
// run under valgrind's callgrind. Unlike CPU time, the count does not
// depend on what else the machine is doing, so two builds compare on a busy
// machine. It counts the server's own work, not the kernel's (system calls,
// the network). bench/redis-instructions.sh runs it; it is skipped without
// valgrind.
func BenchmarkRedisInstructions(b *testing.B) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("needs %s (apt-get install valgrind)", tool)
		}
	}
	out := filepath.Join(b.TempDir(), "callgrind.out")
	srv := testredis.Start(b, testredis.WithWrapper("valgrind", "--tool=callgrind", "--callgrind-out-file="+out))
	s := open(b, srv)
	c := client(b, s)
	f := newFourLimits(b)
	rng := rand.New(rand.NewPCG(1, 2))
	requests := func(n int) []*limit.Request {
		reqs := make([]*limit.Request, n)
		for i := range reqs {
			reqs[i] = &limit.Request{Now: time.Now(), Limits: []limit.Limit{
				{Rule: f.global, Key: f.globalKey},
				{Rule: f.api, Key: f.apiKey},
				{Rule: f.user, Key: f.users[rng.IntN(len(f.users))]},
				{Rule: f.ip, Key: f.ips[rng.IntN(len(f.ips))]},
			}}
		}
		return reqs
	}
	callgrind := func(b *testing.B, op string) {
		if out, err := exec.Command("callgrind_control", op, strconv.Itoa(srv.Pid())).CombinedOutput(); err != nil {
			b.Fatalf("callgrind_control %s: %v: %s", op, err, out)
		}
	}
	b.Run("alone", func(b *testing.B) {
		decide := func() {
			if res, err := s.Decide(context.Background(), requests(1)[0]); err != nil || !res.Allowed {
				b.Fatalf("%+v, %v", res, err)
			}
		}
		decide()
		callgrind(b, "-z")
		for b.Loop() {
			decide()
		}
		callgrind(b, "-d")
		b.ReportMetric(float64(dumped(b, out))/float64(b.N), "redis-instr/decision")
	})
	for _, n := range []int{1, 6, 64} {
		b.Run(fmt.Sprintf("batch%d", n), func(b *testing.B) {
			batch(b, s, c, requests(n)) // the script loaded, the shared keys made
			callgrind(b, "-z")
			for b.Loop() {
				batch(b, s, c, requests(n))
			}
			callgrind(b, "-d")
			b.ReportMetric(float64(dumped(b, out))/float64(b.N*n), "redis-instr/decision")
		})
	}
}

// dumped reads the instruction count of callgrind's newest dump of out
// (out.1, out.2, ...): its "summary:" line.
func dumped(b *testing.B, out string) int64 {
	parts, err := filepath.Glob(out + ".*")
	if err != nil || len(parts) == 0 {
		b.Fatalf("no callgrind dump next to %s (%v)", out, err)
	}
	newest := slices.MaxFunc(parts, func(x, y string) int {
		nx, _ := strconv.Atoi(strings.TrimPrefix(x, out+"."))
		ny, _ := strconv.Atoi(strings.TrimPrefix(y, out+"."))
		return nx - ny
	})
	data, err := os.ReadFile(newest)
	if err != nil {
		b.Fatal(err)
	}
	if dir := os.Getenv("FLOODGATE_CALLGRIND_KEEP"); dir != "" {
		// For callgrind_annotate: where the instructions went.
		keep := filepath.Join(dir, strings.ReplaceAll(b.Name(), "/", "_")+".callgrind")
		if err := os.WriteFile(keep, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatalf("%s: %q: %v", newest, line, err)
			}
			return n
		}
	}
	b.Fatalf("%s has no summary line", newest)
	return 0
}

// BenchmarkNodeGuard is what guarding a call on a cluster costs, per slot
// group: nothing but a load while no node fails, and the key's slot and
// its node's guard while one does.
func BenchmarkNodeGuard(b *testing.B) {
	s := &Store{mode: Cluster, remap: make(chan struct{}, 1)}
	m := &slotMap{guards: []*nodeGuard{&s.whole, {addr: "a"}, {addr: "b"}, {addr: "c"}}}
	for sl := range m.guard {
		m.guard[sl] = uint16(1 + sl*3/clusterSlots)
	}
	s.slots.Store(m)
	f := newFourLimits(b)
	keys := make([]string, len(f.users))
	onC := make([]bool, len(f.users)) // on the node that fails in one_failing
	for i, k := range f.users {
		keys[i] = core.StoredKey(DefaultPrefix, f.user, k)
		onC[i] = m.guard[slot(keys[i])] == 3
	}
	var down error
	run := func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			k := keys[i%len(keys)]
			var err error
			if onC[i%len(keys)] {
				err = down
			}
			i++
			if g, ok, probe := s.enterKey(k); ok {
				s.leaveKey(g, k, probe, err)
			}
		}
	}
	b.Run("healthy", run)
	s.epoch = time.Now()
	down = unavailable("decide", errors.New("refused"))
	for range tripFailures {
		s.leave(m.guards[3], false, down)
	}
	b.Run("one_failing", run)
}
