package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/limit"
)

// runEvents dispatches "floodgate events SUBCOMMAND"; replay is the only
// one.
func runEvents(args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprint(w, "Usage: floodgate events <subcommand> [flags]\n\n"+
			"Work with the events the gateway recorded (see events in docs/configuration.md).\n\n"+
			"Subcommands:\n\n"+
			"\treplay  re-send a route's recorded breaker_rejected requests to its upstream\n\n"+
			"Run 'floodgate events replay -h' for its flags.\n")
	}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "replay":
		return runReplay(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "floodgate events: unknown subcommand %q\nRun 'floodgate events -h' for usage.\n", args[0])
	return exitUsage
}

// replayBodyLimit bounds how much of an upstream's answer replay reads
// (and discards) so the connection can be reused.
const replayBodyLimit = 1 << 20

// maxParallel bounds --parallel: a replay is a steady trickle to a
// downstream that has just recovered, and each event in flight holds a
// sink's acknowledgement open (events.Source).
const maxParallel = 64

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("events replay", "-c FILE --route ID [--rate 50/s] [--parallel 1] [--dry-run]",
		"Re-send the requests an open breaker turned away on a route, as recorded in the configured\n"+
			"events sink, to the route's upstream targets at a steady pace, each with the header\n"+
			"Idempotency-Key: <event id>. One request is in flight at a time unless --parallel allows\n"+
			"more; when the upstream answers too slowly for --rate, the run says so.\n\n"+
			"Each event is marked done in the sink once handled, in the order the events were recorded,\n"+
			"so a replay that stops (Ctrl-C, a crash) resumes where it was and sends again at most the\n"+
			"requests that were in flight (--parallel of them):\n"+
			"  - a 2xx answer counts as succeeded; any other answer, or an event that makes no valid\n"+
			"    request, as failed; all are marked done, so a replay always ends (the idempotency\n"+
			"    key makes a later manual retry safe);\n"+
			"  - an event whose body was truncated is skipped (it cannot be sent as it was), said so,\n"+
			"    and marked done;\n"+
			"  - an upstream that does not answer at all stops the replay with exit 1, leaving that\n"+
			"    event (and any sent after it) for the next run.\n"+
			"The last line is: succeeded N, failed N, skipped N, remaining N (remaining: not handled).\n"+
			"Ctrl-C lets the requests in flight finish, then stops.")
	file := fs.String("c", "floodgate.yaml", "the configuration `FILE`")
	routeID := fs.String("route", "", "the `ID` of the route whose events to replay (required)")
	rateFlag := fs.String("rate", "50/s", "the pace, as a `RATE` like 50/s or 600/min")
	parallel := fs.Int("parallel", 1, "the most requests `N` in flight at once")
	dryRun := fs.Bool("dry-run", false, "list what would be sent, send nothing and mark nothing done")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if *routeID == "" {
		return usageError(fs, stderr, "--route is required")
	}
	rate, err := limit.ParseRate(*rateFlag)
	if err != nil || rate.Count <= 0 {
		if err == nil {
			err = fmt.Errorf("rate %q: the count must be positive", *rateFlag)
		}
		return usageError(fs, stderr, "--rate: %v", err)
	}
	if *parallel < 1 || *parallel > maxParallel {
		return usageError(fs, stderr, "--parallel: %d: want 1 to %d", *parallel, maxParallel)
	}

	cfg, _, err := loadConfig(*file, config.Flags{})
	if err != nil {
		for _, line := range admin.ErrorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return exitFailure
	}
	var route *config.Route
	for _, r := range cfg.Routes {
		if r.ID == *routeID {
			route = r
		}
	}
	if route == nil {
		fmt.Fprintf(stderr, "floodgate events replay: %s has no route %q\n", *file, *routeID)
		return exitFailure
	}

	// Ctrl-C stops after the request in flight: its answer is then known
	// and marked, so nothing is left half done.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := events.StoreOptions(cfg.Store)
	opts.Logger = log
	src, err := events.OpenSource(ctx, cfg.Events, route.ID, opts)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate events replay: %v\n", err)
		return exitFailure
	}
	defer src.Close()

	rp := &replayer{
		route:    route,
		reqIDHdr: cfg.Server.RequestIDHeader,
		client:   replayClient(route.Upstream, *parallel),
		interval: rate.Period / time.Duration(rate.Count),
		parallel: *parallel,
		stdout:   stdout,
	}
	if *dryRun {
		return rp.dryRun(ctx, src, stderr)
	}
	return rp.run(ctx, src, stderr)
}

// replayer sends one route's events to its upstream.
type replayer struct {
	route    *config.Route
	reqIDHdr string
	client   *http.Client
	interval time.Duration
	parallel int
	stdout   io.Writer
	next     int // round robin over the targets

	succeeded, failed, skipped int
}

// job is one event on its way: sent by a goroutine of its own, and marked
// done by run in the order the events came, once its answer is in.
type job struct {
	e      *events.Event
	status int
	bad    error         // the request cannot be built from the event: failed, not sent
	err    error         // no answer
	done   chan struct{} // closed when status or err is set
}

func replayClient(u config.Upstream, parallel int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: u.ConnectTimeout}).DialContext,
			ResponseHeaderTimeout: u.Timeout,
			IdleConnTimeout:       u.IdleTimeout,
			TLSHandshakeTimeout:   u.ConnectTimeout,
			MaxIdleConnsPerHost:   max(parallel, 4),
		},
		// A redirect is the upstream's answer, not a reason to send the
		// request somewhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (rp *replayer) summary(remaining int) {
	fmt.Fprintf(rp.stdout, "succeeded %d, failed %d, skipped %d, remaining %d\n", rp.succeeded, rp.failed, rp.skipped, remaining)
}

func (rp *replayer) dryRun(ctx context.Context, src events.Source, stderr io.Writer) int {
	n := 0
	err := src.Pending(ctx, func(e *events.Event) bool {
		n++
		if e.Truncated {
			fmt.Fprintf(rp.stdout, "would skip truncated event %s\n", e.ID)
			return true
		}
		req, err := rp.request(context.Background(), e, rp.target())
		if err != nil {
			fmt.Fprintf(rp.stdout, "would fail event %s: %v\n", e.ID, err)
			return true
		}
		fmt.Fprintf(rp.stdout, "would send event %s: %s %s\n", e.ID, req.Method, req.URL)
		return true
	})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate events replay: %v\n", err)
		return exitFailure
	}
	rp.summary(n)
	return exitOK
}

func (rp *replayer) run(ctx context.Context, src events.Source, stderr io.Writer) int {
	code := exitOK
	finished := false
	next := time.Now()
	fail := func(format string, args ...any) {
		fmt.Fprintf(stderr, "floodgate events replay: "+format+"\n", args...)
		code = exitFailure
	}
	// The sink is still used after Ctrl-C, to mark the requests in flight
	// done and count what is left.
	bg := context.WithoutCancel(ctx)

	// line holds the jobs not yet marked done, in the order of Next: at
	// most rp.parallel, so a run that stops sends again at most that many.
	var line []*job
	// settle marks done the jobs at the head of the line whose answer is
	// in, waiting for the head while the line is longer than keep. It
	// reports false when the run must stop: an event without an answer
	// stays, and so do the ones after it.
	settle := func(keep int) bool {
		for len(line) > 0 {
			j := line[0]
			if len(line) > keep {
				<-j.done
			} else {
				select {
				case <-j.done:
				default:
					return true
				}
			}
			if j.err != nil {
				fail("event %s: %v (the upstream did not answer; the event is left for the next run)", j.e.ID, j.err)
				return false
			}
			if err := src.Done(bg, j.e); err != nil {
				fail("%v", err)
				return false
			}
			line = line[1:]
			switch {
			case j.e.Truncated:
				rp.skipped++
				fmt.Fprintf(rp.stdout, "skipped truncated event %s\n", j.e.ID)
			case j.bad != nil:
				rp.failed++
				fmt.Fprintf(rp.stdout, "failed event %s: %v\n", j.e.ID, j.bad)
			case j.status/100 == 2:
				rp.succeeded++
			default:
				rp.failed++
				fmt.Fprintf(rp.stdout, "failed event %s: status %d\n", j.e.ID, j.status)
			}
		}
		return true
	}
	var first time.Time
	sent := 0
	ok := true // no answer was missing
loop:
	for ctx.Err() == nil {
		if ok = settle(rp.parallel - 1); !ok {
			break
		}
		e, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			finished = true
			break
		}
		if err != nil {
			if ctx.Err() == nil {
				fail("%v", err)
			}
			break
		}
		j := &job{e: e, done: make(chan struct{})}
		line = append(line, j)
		var req *http.Request
		if !e.Truncated {
			req, j.bad = rp.request(bg, e, rp.target())
		}
		if e.Truncated || j.bad != nil {
			close(j.done) // skipped or failed, in its turn
			continue
		}
		// A steady pace: one request per interval, without a burst to
		// catch up after a slow answer.
		if d := time.Until(next); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				line = line[:len(line)-1] // not sent: it stays
				break loop
			}
		}
		next = time.Now().Add(rp.interval)
		if sent == 0 {
			first = time.Now()
		}
		sent++
		go func() {
			defer close(j.done)
			j.status, j.err = rp.send(req)
		}()
	}
	// The failure that stopped the loop has been said; the line stays.
	ok = ok && settle(0)
	for _, j := range line {
		<-j.done // after a failure: sent, but not marked done; the next run sends it again
	}
	if ok && sent >= 10 {
		// A pace the upstream held down is said, not left to be guessed.
		took := time.Since(first)
		if asked, got := float64(time.Second)/float64(rp.interval), float64(sent)/took.Seconds(); got < asked*0.8 {
			fmt.Fprintf(rp.stdout, "pace: %d requests in %v, %.0f/s of the %.0f/s asked: the upstream's answers held it down (--parallel %d)\n",
				sent, took.Round(time.Millisecond), got, asked, rp.parallel)
		}
	}
	remaining := 0
	if !finished || !ok {
		cctx, cancel := context.WithTimeout(bg, 30*time.Second)
		err := src.Pending(cctx, func(*events.Event) bool { remaining++; return true })
		cancel()
		if err != nil {
			fail("counting the events left: %v", err)
		}
	}
	rp.summary(remaining)
	return code
}

// send sends req and returns the upstream's status.
func (rp *replayer) send(req *http.Request) (int, error) {
	u := rp.route.Upstream
	ctx, cancel := context.WithTimeout(req.Context(), u.ConnectTimeout+u.Timeout+u.IdleTimeout)
	defer cancel()
	resp, err := rp.client.Do(req.WithContext(ctx))
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, replayBodyLimit))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// hopHeaders are not the request's own and never replayed (RFC 9110
// §7.6.1), nor is Content-Length, which the body sets.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true,
	"Upgrade": true, "Content-Length": true, "Host": true,
}

// target is the index of the next target in turn.
func (rp *replayer) target() int {
	rp.next++
	return rp.next - 1
}

// request builds the upstream request for e as the gateway would have sent
// it: target n (of the round robin), strip_prefix applied, the recorded
// query, headers and body, and the event's id as the idempotency key.
func (rp *replayer) request(ctx context.Context, e *events.Event, n int) (*http.Request, error) {
	targets := rp.route.Upstream.Targets
	if len(targets) == 0 {
		return nil, errors.New("the route has no upstream target")
	}
	target := targets[n%len(targets)]
	out := &url.URL{Scheme: target.Scheme, Host: target.Host, RawQuery: e.Query}
	out.Path, out.RawPath = gateway.UpstreamPath(target, rp.route.Upstream.StripPrefix, e.Path)
	method := e.Method
	if method == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, out.String(), bytes.NewReader(e.Body))
	if err != nil {
		return nil, err
	}
	req.URL = out
	for k, vs := range e.Headers {
		if hopHeaders[http.CanonicalHeaderKey(k)] {
			continue
		}
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Idempotency-Key", e.ID)
	if rp.reqIDHdr != "" && e.RequestID != "" {
		req.Header.Set(rp.reqIDHdr, e.RequestID)
	}
	if len(e.Body) == 0 {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	return req, nil
}
