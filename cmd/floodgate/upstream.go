package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/rehearse"
)

// upstreamShutdownTimeout bounds the drain of a stopping mock: long enough
// for the default 3 s overload latency to play out.
const upstreamShutdownTimeout = 10 * time.Second

func runUpstream(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("upstream", "[--listen ADDR] [flags]",
		"Run a mock downstream service: the fragile third-party API a gateway protects.\n\n"+
			"Every request is answered --status with --body after --latency ± --jitter, except:\n"+
			"  - inside a scripted outage (--fail-after, --recover-after): 503 at once;\n"+
			"  - past --capacity requests in the current 1-second window: after --overload-latency\n"+
			"    instead, and past 1.5 × capacity in the window, 503 after --overload-latency;\n"+
			"  - a share --error-rate of the rest: 500.\n"+
			"At 1,000 requests per second against --capacity 500, each second serves 500 fast,\n"+
			"250 slowly, and fails 250 slowly. Windows count from the start.\n\n"+
			"GET /stats answers JSON: requests in total and by status, the rate of the last full\n"+
			"second, p50 and p99 of the latency the mock added, and whether an outage is on.\n"+
			"SIGINT or SIGTERM stops accepting, lets the requests in flight finish, and exits 0.")
	listen := fs.String("listen", "127.0.0.1:9000", "the `ADDR`ess to listen on (the examples' targets)")
	latency := fs.Duration("latency", 0, "the base latency `D` of an answer")
	jitter := fs.Duration("jitter", 0, "vary every latency uniformly by up to ± `D`")
	errorRate := fs.Float64("error-rate", 0, "the share `F` (0 to 1) of answers that are 500")
	capacity := fs.Int("capacity", 0, "the requests per second `N` served normally (0: no limit)")
	schedule := fs.String("capacity-schedule", "", "change the capacity during the run: `STEPS` such as 0s:500,20s:250,40s:500 (from 20 s on, 250 a second...)")
	overload := fs.Duration("overload-latency", 3*time.Second, "the latency `D` of answers past --capacity")
	failAfter := fs.Duration("fail-after", 0, "start an outage `D` after the start: every request gets 503 at once")
	recoverAfter := fs.Duration("recover-after", 0, "end the outage `D` after it began (default: never)")
	status := fs.Int("status", http.StatusOK, "the status `N` of a normal answer")
	body := fs.String("body", "ok\n", "the body `TEXT` of a normal answer")
	verbose := fs.Bool("v", false, "log one line per second to stderr")
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	set := cli.SetFlags(fs)
	if set["fail-after"] && *failAfter <= 0 {
		return cli.UsageError(fs, stderr, "--fail-after %v: must be positive", *failAfter)
	}
	if set["recover-after"] && *recoverAfter <= 0 {
		return cli.UsageError(fs, stderr, "--recover-after %v: must be positive (leave it out for an outage that never ends)", *recoverAfter)
	}
	cfg := rehearse.UpstreamConfig{
		Latency: *latency, Jitter: *jitter, ErrorRate: *errorRate,
		Capacity: *capacity, OverloadLatency: *overload,
		FailAfter: *failAfter, RecoverAfter: *recoverAfter,
		Status: *status, Body: *body,
	}
	if *schedule != "" {
		steps, err := rehearse.ParseCapacitySchedule(*schedule)
		if err != nil {
			return cli.UsageError(fs, stderr, "--capacity-schedule %s", err)
		}
		cfg.CapacitySchedule = steps
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageError(fs, stderr, "%s", flagErrors(err))
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate upstream: %v\n", err)
		return exitFailure
	}
	start := time.Now()
	u, err := rehearse.NewUpstream(cfg, start)
	if err != nil {
		ln.Close()
		fmt.Fprintf(stderr, "floodgate upstream: %v\n", err)
		return exitFailure
	}
	// The header and idle timeouts of floodgate serve's listeners.
	srv := &http.Server{
		Handler:           u,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "floodgate upstream: listening on http://%s\n", ln.Addr())

	stopLog := make(chan struct{})
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		if *verbose {
			logEverySecond(u, cfg.Capacity, start, stderr, stopLog)
		}
	}()

	code := exitOK
	select {
	case sig := <-sigs:
		fmt.Fprintf(stderr, "floodgate upstream: %v: stopping\n", sig)
	case err := <-serveErr:
		fmt.Fprintf(stderr, "floodgate upstream: %v\n", err)
		code = exitFailure
	}
	close(stopLog)
	<-logDone
	ctx, cancel := context.WithTimeout(context.Background(), upstreamShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
	s := u.Stats(time.Now())
	fmt.Fprintf(stderr, "floodgate upstream: stopped after %d requests (%s)\n", s.Requests, statusCounts(s.Status))
	return code
}

// logEverySecond writes a line a second to w until stop closes: the
// answers since the last line by status, and the rate, the state and the
// added latency of the last full window.
func logEverySecond(u *rehearse.Upstream, capacity int, start time.Time, w io.Writer, stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := map[int]int64{}
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s := u.Stats(now)
			delta := map[int]int64{}
			for code, n := range s.Status {
				if d := n - last[code]; d > 0 {
					delta[code] = d
				}
			}
			last = s.Status
			state := "normal"
			switch {
			case s.Outage:
				state = "outage"
			case capacity > 0 && s.Rate > capacity:
				state = "overloaded"
			}
			fmt.Fprintf(w, "floodgate upstream: t=%ds rate=%d/s %s added p50=%.1fms p99=%.1fms answered %s\n",
				int(now.Sub(start).Seconds()), s.Rate, state, s.LastSecond.P50, s.LastSecond.P99, statusCounts(delta))
		}
	}
}

// statusCounts formats counts by status as "200:480 503:20".
func statusCounts(m map[int]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, code := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", code, m[code])
	}
	return b.String()
}

// flagErrors joins the problems of a validation on one line, each as the
// flag that has it: "error-rate 1.5: …" reads as "--error-rate 1.5: …".
func flagErrors(err error) string {
	var lines []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			lines = append(lines, flagErrors(e))
		}
		return strings.Join(lines, "; ")
	}
	return "--" + err.Error()
}
