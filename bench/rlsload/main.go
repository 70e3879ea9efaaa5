// Command rlsload drives an Envoy rate-limit service with ShouldRateLimit
// calls as an Envoy fleet would, or serves one that decides nothing.
//
//	go run ./bench/rlsload -addr HOST:PORT [-callers 64] [-conns 4] [-duration 10s] [-timeout 0]
//	go run ./bench/rlsload -serve HOST:PORT
//
// The client makes conns gRPC connections (plaintext) and runs callers
// goroutines, caller i on connection i mod conns, each sending its next
// call as soon as the last is answered. Every call is in domain "edge" and
// carries two descriptors: remote_address, drawn from 100,000 values, and
// path. An answer other than OK is counted as a failure: the limits are
// meant to admit everything. -timeout gives each call a deadline of its
// own, as Envoy's rate-limit filter does (20 ms unless configured); 0: the
// run's end only. It prints one line:
//
//	calls N failed F seconds S calls/s R p50 Xµs p99 Yµs cpu Zµs/call
//
// where cpu is this process's own CPU time (user and system) per call.
//
// -serve answers every ShouldRateLimit with OK for each descriptor and
// decides nothing: what gRPC alone costs, the ceiling of any service.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const addresses = 100_000

func main() {
	addr := flag.String("addr", "", "the rate-limit service to call, HOST:PORT")
	serve := flag.String("serve", "", "serve a do-nothing rate-limit service on HOST:PORT instead")
	callers := flag.Int("callers", 64, "goroutines, each with one call in flight")
	conns := flag.Int("conns", 4, "gRPC connections the callers share")
	dur := flag.Duration("duration", 10*time.Second, "how long to call")
	timeout := flag.Duration("timeout", 0, "each call's own deadline, as Envoy's (0: none but the run's end)")
	flag.Parse()
	var err error
	switch {
	case *serve != "":
		err = serveNothing(*serve)
	case *addr != "" && *callers > 0 && *conns > 0:
		err = load(*addr, *callers, *conns, *dur, *timeout)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

// nothing answers OK to every descriptor and decides nothing.
type nothing struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (nothing) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

// serveNothing serves the do-nothing service until SIGTERM or SIGINT.
func serveNothing(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, nothing{})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	return srv.Serve(ln)
}

// load calls addr from callers goroutines over conns connections for dur
// and prints what it measured.
func load(addr string, callers, conns int, dur, timeout time.Duration) error {
	clients := make([]rlsv3.RateLimitServiceClient, conns)
	for i := range clients {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
		// Connect before the clock starts, and fail early on a server
		// that is not there or does not answer OK.
		if err := call(context.Background(), clients[i], 0); err != nil {
			return fmt.Errorf("first call to %s: %w", addr, err)
		}
	}
	var (
		calls, failed atomic.Int64
		firstErr      atomic.Value
		wg            sync.WaitGroup
		lats          = make([][]time.Duration, callers)
	)
	cpu0 := cpuTime()
	start := time.Now()
	end := start.Add(dur)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	for i := range callers {
		c := clients[i%conns]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 1))
			lat := make([]time.Duration, 0, 1<<16)
			for {
				t := time.Now()
				if !t.Before(end) {
					break
				}
				cctx, ccancel := ctx, context.CancelFunc(nil)
				if timeout > 0 {
					cctx, ccancel = context.WithTimeout(ctx, timeout)
				}
				err := call(cctx, c, r.IntN(addresses))
				if ccancel != nil {
					ccancel()
				}
				// A call cut off by the end of the run is no answer. The
				// clock, not ctx.Err, says so: gRPC fails a call past the
				// deadline before the context's timer has fired.
				if !time.Now().Before(end) {
					break
				}
				lat = append(lat, time.Since(t))
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
			lats[i] = lat
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	cpu := cpuTime() - cpu0
	all := slices.Concat(lats...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))]) / float64(time.Microsecond)
	}
	n := calls.Load()
	fmt.Printf("calls %d failed %d seconds %.3f calls/s %.0f p50 %.0fµs p99 %.0fµs cpu %.1fµs/call\n",
		n, failed.Load(), secs, float64(n)/secs, pct(0.50), pct(0.99), float64(cpu)/float64(time.Microsecond)/float64(max(n, 1)))
	if err, _ := firstErr.Load().(error); err != nil {
		fmt.Fprintln(os.Stderr, "rlsload: first failure:", err)
	}
	return nil
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// call sends one ShouldRateLimit for address a and fails unless it is
// answered OK.
func call(ctx context.Context, c rlsv3.RateLimitServiceClient, a int) error {
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*rlsv3ext.RateLimitDescriptor{
			{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(a)}}},
			{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "path", Value: "/api/coupons"}}},
		},
	})
	if err != nil {
		return err
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		return fmt.Errorf("answered %v", resp.GetOverallCode())
	}
	return nil
}
