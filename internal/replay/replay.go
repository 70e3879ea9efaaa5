// Package replay re-sends to a route's upstream the requests its gateway
// recorded in the events sink (floodgate events replay): each event is
// checked against what the gateway can have recorded, collapsed against
// the route's client-keyed limits at the time it was recorded (counting
// the route's admissions the sink holds, events.audit all), decided
// live against the route's limits in the configured store, sent at a
// steady pace with its id as the Idempotency-Key, and marked done in the
// sink in the order the events came, so that a replay that stops resumes
// where it was.
package replay

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
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/stores"
	"github.com/floodgate-gw/floodgate/internal/upstream"
	"github.com/floodgate-gw/floodgate/limit"
)

// Options says what to replay, and how.
type Options struct {
	// Config is the gateway's configuration: the route, its upstream,
	// its limits, the store and the events sink.
	Config *config.Config
	// Route is the id of the route whose events are replayed.
	Route string
	// Rate is the pace; Parallel the most requests in flight at once (1
	// to MaxParallel).
	Rate     limit.Rate
	Parallel int
	// All sends every event: nothing collapsed, nothing decided, no
	// recorded admission read.
	All bool
	// DryRun lists what would be done: nothing sent, no quota consumed,
	// nothing marked done, recorded admissions included.
	DryRun bool
	// CollapseKeys bounds the keys the collapse step remembers at once
	// (1 to MaxCollapseKeys); 0: DefaultCollapseKeys.
	CollapseKeys int
	// Stdout receives a line per event handled and the summary; Stderr
	// what stops the run or fails an event, and the sink's and the
	// store's warnings.
	Stdout, Stderr io.Writer
}

// ErrFailed is returned by Run when the run went to its end but an event
// failed or the run stopped early; Stderr has said why.
var ErrFailed = errors.New("the replay failed")

// replayBodyLimit bounds how much of an upstream's answer replay reads
// (and discards) so the connection can be reused.
const replayBodyLimit = 1 << 20

// MaxCollapseKeys bounds Options.CollapseKeys, and the memory it takes.
const MaxCollapseKeys = 100_000_000

// maxEntryBytes is the longest entry of the events sink that replay reads:
// more than an event of this configuration takes. The body is at most
// events.max_body bytes, base64 in the JSON (4/3); the headers kept, and
// the key values taken from them, at most the server's header block each,
// escaped; the rest is small.
func maxEntryBytes(cfg *config.Config) int64 {
	return 2*cfg.Events.MaxBody + 4*int64(cfg.Server.MaxHeaderBytes) + 64<<10
}

// MaxParallel bounds Options.Parallel: a replay is a steady trickle to a
// downstream that has just recovered, and each event in flight holds a
// sink's acknowledgement open (events.Source).
const MaxParallel = 64

// Run replays the events of o.Route. Ctrl-C is ctx: the requests in flight
// finish and are marked done, then Run returns. An error other than
// ErrFailed is one of the setup (the route, the store, the sink), and
// nothing was replayed.
func Run(ctx context.Context, o Options) error {
	cfg := o.Config
	var route *config.Route
	for _, r := range cfg.Routes {
		if r.ID == o.Route {
			route = r
		}
	}
	if route == nil {
		return fmt.Errorf("%s has no route %q", cfg.File, o.Route)
	}
	if o.Parallel < 1 || o.Parallel > MaxParallel {
		return fmt.Errorf("parallel %d: want 1 to %d", o.Parallel, MaxParallel)
	}
	if o.CollapseKeys == 0 {
		o.CollapseKeys = DefaultCollapseKeys
	}
	if o.CollapseKeys < 1 || o.CollapseKeys > MaxCollapseKeys {
		return fmt.Errorf("collapse keys %d: want 1 to %d", o.CollapseKeys, MaxCollapseKeys)
	}
	if o.Rate.Count <= 0 || o.Rate.Period <= 0 {
		return fmt.Errorf("rate %v: the count must be positive", o.Rate)
	}
	log := slog.New(slog.NewJSONHandler(o.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rec, err := NewRecorded(cfg, route.ID, log)
	if err != nil {
		return err
	}
	defer rec.Close()
	var store limit.Store
	if !o.All {
		if store, err = stores.Open(cfg.Store, nil); err != nil {
			return fmt.Errorf("the store: %w", err)
		}
		defer store.Close()
	}
	sink, err := stores.EventSink(cfg)
	if err != nil {
		return err
	}
	// The route's admissions come too, to be counted by the collapse
	// step (collapser.admit), unless nothing is collapsed (--all). They
	// are read whatever events.audit says now: the sink holds them only if
	// the gateway recorded with audit all, and then they count.
	src, err := events.OpenSource(ctx, sink, route.ID, events.Options{
		Logger: log, MaxEntryBytes: maxEntryBytes(cfg), Admitted: !o.All,
	})
	if err != nil {
		return err
	}
	defer src.Close()

	rp := &replayer{
		route:    route,
		reqIDHdr: cfg.Server.RequestIDHeader,
		client:   replayClient(route.Upstream, o.Parallel),
		interval: o.Rate.Period / time.Duration(o.Rate.Count),
		parallel: o.Parallel,
		stdout:   o.Stdout,
		limits:   rec,
		waited:   map[string]time.Duration{},
	}
	if !o.All {
		rp.collapse = newCollapser(o.CollapseKeys)
		defer rp.collapse.Close()
		rp.live = &decider{store: store, ids: answer.NewIDSource()}
	}
	if o.DryRun {
		return rp.dryRun(ctx, src, o.Stderr)
	}
	return rp.run(ctx, src, o.Stderr)
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

	limits   *Recorded
	collapse *collapser               // nil: --all
	live     *decider                 // nil: --all
	waited   map[string]time.Duration // by limit: how long events waited for shared limits
	seen     recentIDs                // the events handled lately, to tell a duplicate

	succeeded, failed, skipped, collapsed, limited int
	duplicates                                     int // not in the summary: the same events again
	admissions                                     int // not in the summary: the recorded admissions counted
}

// errOtherCopy is why an event is not sent whose id this run took
// already, with other contents: one of the two is not what the gateway
// recorded, and the one sent first cannot be taken back.
const errOtherCopy = "an event of the same id with other contents came before it: one of them is not what the gateway recorded (who else writes to the sink?)"

// handling is what replay does with an event besides sending it.
type handling uint8

const (
	send handling = iota
	truncated
	bad       // the request cannot be built from the event: failed, not sent
	skip      // a limit needs a key the event does not hold, or the gateway cannot have recorded it: skipped
	collapse  // the limits would have refused it when it was recorded
	limited   // a client-keyed limit refuses it now
	duplicate // an event this run already took: the sink holds it twice
	admission // a recorded admission: counted by the collapse step, never sent
)

// job is one event on its way: sent by a goroutine of its own, and marked
// done by run in the order the events came, once its answer is in.
type job struct {
	e       *events.Event
	how     handling
	why     string        // of bad, skip, collapse, limited; of an admission not counted
	after   bool          // of collapse: a recorded admission of its key took the window
	counted bool          // of admission: the collapse step counted it
	status  int           // of a send
	err     error         // no answer
	done    chan struct{} // closed when status or err is set
}

func replayClient(u config.Upstream, parallel int) *http.Client {
	t := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: u.ConnectTimeout}).DialContext,
		ResponseHeaderTimeout: u.Timeout,
		IdleConnTimeout:       u.IdleTimeout,
		TLSHandshakeTimeout:   u.ConnectTimeout,
		MaxIdleConnsPerHost:   max(parallel, 4),
	}
	// The protocol the gateway speaks to the route's targets.
	switch u.Protocol {
	case config.ProtocolH2C:
		t.Protocols = new(http.Protocols)
		t.Protocols.SetUnencryptedHTTP2(true)
	case config.ProtocolH2:
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP2(true)
	}
	return &http.Client{
		Transport: t,
		// A redirect is the upstream's answer, not a reason to send the
		// request somewhere else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func (rp *replayer) summary(remaining int) {
	if rp.admissions > 0 {
		fmt.Fprintf(rp.stdout, "counted %d recorded admissions\n", rp.admissions)
	}
	fmt.Fprintf(rp.stdout, "succeeded %d, failed %d, skipped %d, collapsed %d, limited %d, remaining %d\n",
		rp.succeeded, rp.failed, rp.skipped, rp.collapsed, rp.limited, remaining)
}

// classify says what is done with e before any live decision: it is
// skipped, failed or collapsed, or it is to be decided (send). ls are its
// limits. An error stops the run: it says nothing about e, which is left
// for the next one.
func (rp *replayer) classify(e *events.Event, ls []RecordedLimit) (handling, string, error) {
	if e.Truncated {
		return truncated, "", nil
	}
	if _, err := rp.request(context.Background(), e, 0); err != nil {
		return bad, err.Error(), nil
	}
	// Even with --all: an event is sent only if it is a request the
	// gateway can have recorded for the route (the sink is only as
	// trustworthy as whoever can write it).
	if err := rp.limits.Check(e); errors.Is(err, ErrNotRecorded) {
		return skip, err.Error(), nil
	} else if err != nil {
		return 0, "", err
	}
	if rp.live == nil {
		return send, "", nil // --all: every event is sent, none decided
	}
	if err := unkeyed(ls); err != nil {
		return skip, err.Error(), nil
	}
	if name := rp.collapse.collapses(e, ls); name != "" {
		return collapse, name, nil
	}
	return send, "", nil
}

// admit counts e, an admission the gateway recorded for the route, in the
// collapse step at its recorded time, as an event kept. It reports whether
// e was counted, and why not when it is not a request the gateway can
// have recorded, or lacks a key; an error stops the run as classify's
// does. A copy of an admission already counted (c) is not counted again.
func (rp *replayer) admit(e *events.Event, c copyOf) (bool, string, error) {
	switch {
	case rp.collapse == nil:
		return false, "", nil
	case c == sameCopy:
		return false, "", nil
	case c == otherCopy:
		return false, errOtherCopy, nil
	}
	if err := rp.limits.Check(e); errors.Is(err, ErrNotRecorded) {
		return false, err.Error(), nil
	} else if err != nil {
		return false, "", err
	}
	ls := rp.limits.Limits(e)
	if err := unkeyed(ls); err != nil {
		return false, err.Error(), nil
	}
	return rp.collapse.admit(e, ls), "", nil
}

// collapsedWhy is the reason said for an event collapsed by limit name;
// after: a recorded admission of its key took the window.
func collapsedWhy(name string, after bool) string {
	if after {
		return fmt.Sprintf("limit %s would have refused it when it was recorded (a recorded admission of its key took that window)", name)
	}
	return fmt.Sprintf("limit %s would have refused it when it was recorded (an earlier event of its key took that window)", name)
}

// dryRun lists what run would do. The collapse step runs as it would (in
// the replay's own memory, consuming no quota); the live step only reads
// each client-keyed limit's state, without counting what the events
// before would take.
func (rp *replayer) dryRun(ctx context.Context, src events.Source, stderr io.Writer) error {
	n, liveOnly := 0, 0
	var would [limited + 1]int
	var perr error
	err := src.Pending(ctx, func(e *events.Event) bool {
		c := rp.seen.add(e)
		if e.Type == events.TypeAdmitted {
			counted, why, err := rp.admit(e, c)
			if err != nil {
				perr = fmt.Errorf("admission %s: %w", e.ID, err)
				return false
			}
			if counted {
				rp.admissions++
			} else if why != "" {
				fmt.Fprintf(rp.stdout, "would pass over admission %s: %s\n", e.ID, why)
			}
			return true
		}
		if c == sameCopy {
			fmt.Fprintf(rp.stdout, "would skip another copy of event %s\n", e.ID)
			return true
		}
		n++
		ls := rp.limits.Limits(e)
		how, why, err := rp.classify(e, ls)
		if c == otherCopy {
			how, why, err = bad, errOtherCopy, nil
		}
		if err != nil {
			perr = fmt.Errorf("event %s: %w", e.ID, err)
			return false
		}
		if how == send && rp.collapse != nil && rp.collapse.overflow {
			// Not collapsed for want of memory, so the user's other
			// events may be sent too: what the limits leave of them is
			// decided at the send, which a dry run does not make.
			liveOnly++
			fmt.Fprintf(rp.stdout, "would decide event %s live only: the collapse memory is full (--collapse-keys); whether it is sent or limited depends on the events before it\n", e.ID)
			return true
		}
		if how == send && rp.live != nil {
			name, err := rp.live.peek(ctx, ls)
			if err != nil {
				perr = fmt.Errorf("event %s: the store: %w", e.ID, err)
				return false
			}
			if name != "" {
				how, why = limited, name
			}
		}
		would[how]++
		switch how {
		case truncated:
			fmt.Fprintf(rp.stdout, "would skip truncated event %s\n", e.ID)
		case bad:
			fmt.Fprintf(rp.stdout, "would fail event %s: %s\n", e.ID, why)
		case skip:
			fmt.Fprintf(rp.stdout, "would skip event %s: %s\n", e.ID, why)
		case collapse:
			fmt.Fprintf(rp.stdout, "would collapse event %s: %s\n", e.ID, collapsedWhy(why, rp.collapse.byAdmission))
		case limited:
			fmt.Fprintf(rp.stdout, "would limit event %s: limit %s has no quota left for its key now\n", e.ID, why)
		default:
			req, _ := rp.request(context.Background(), e, rp.target())
			fmt.Fprintf(rp.stdout, "would send event %s: %s %s\n", e.ID, req.Method, req.URL)
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate events replay: %v\n", err)
		return ErrFailed
	}
	rp.sayFull()
	if rp.admissions > 0 {
		fmt.Fprintf(rp.stdout, "counted %d recorded admissions\n", rp.admissions)
	}
	live := ""
	if liveOnly > 0 {
		live = fmt.Sprintf(", decide live only %d", liveOnly)
	}
	// The only summary: a dry run handles nothing, so the run's own
	// (succeeded 0, ... remaining N) would only contradict it.
	fmt.Fprintf(rp.stdout, "dry run: of %d events pending, would send %d, fail %d, skip %d, collapse %d, limit %d%s; nothing sent or marked done\n",
		n, would[send], would[bad], would[truncated]+would[skip], would[collapse], would[limited], live)
	return nil
}

// sayFull says that the collapse memory overflowed.
func (rp *replayer) sayFull() {
	if rp.collapse != nil && rp.collapse.full {
		fmt.Fprintln(rp.stdout, "collapse: the memory of keys was full (--collapse-keys); events that needed a new key were decided live only")
	}
}

func (rp *replayer) run(ctx context.Context, src events.Source, stderr io.Writer) error {
	r := &runState{rp: rp, src: src, stderr: stderr, next: time.Now(),
		// The sink is still used after Ctrl-C, to mark the requests in
		// flight done and count what is left.
		bg: context.WithoutCancel(ctx)}
	finished, ok := false, true // ok: no answer was missing
	for ctx.Err() == nil {
		if ok = r.settle(rp.parallel - 1); !ok {
			break
		}
		var stop bool
		if finished, stop = r.step(ctx); finished || stop {
			break
		}
	}
	// The failure that stopped the loop has been said; the line stays.
	ok = ok && r.settle(0)
	for _, j := range r.line {
		<-j.done // after a failure: sent, but not marked done; the next run sends it again
	}
	r.end(finished, ok)
	return r.failed
}

// runState is one run's events on their way.
type runState struct {
	rp     *replayer
	src    events.Source
	stderr io.Writer
	bg     context.Context
	failed error

	// line holds the jobs not yet marked done, in the order of Next: at
	// most rp.parallel, so a run that stops sends again at most that many.
	line []*job
	// next is when the pace lets the next request go; first when the
	// first went, and sent how many did.
	next, first time.Time
	sent        int
}

// fail says why the run stops, or why an event failed, and makes the run
// exit 1.
func (r *runState) fail(format string, args ...any) {
	fmt.Fprintf(r.stderr, "floodgate events replay: "+format+"\n", args...)
	r.failed = ErrFailed
}

// settle marks done the jobs at the head of the line whose answer is in,
// waiting for the head while the line is longer than keep. It reports
// false when the run must stop: an event without an answer stays, and so
// do the ones after it.
func (r *runState) settle(keep int) bool {
	for len(r.line) > 0 {
		j := r.line[0]
		if len(r.line) > keep {
			<-j.done
		} else {
			select {
			case <-j.done:
			default:
				return true
			}
		}
		if j.err != nil {
			r.fail("event %s: %v (the upstream did not answer; the event is left for the next run)", j.e.ID, j.err)
			return false
		}
		if err := r.src.Done(r.bg, j.e); err != nil {
			r.fail("%v", err)
			return false
		}
		r.line = r.line[1:]
		r.rp.report(j)
	}
	return true
}

// report counts and says what became of a job marked done.
func (rp *replayer) report(j *job) {
	switch j.how {
	case truncated:
		rp.skipped++
		fmt.Fprintf(rp.stdout, "skipped truncated event %s\n", j.e.ID)
	case bad:
		rp.failed++
		fmt.Fprintf(rp.stdout, "failed event %s: %s\n", j.e.ID, j.why)
	case skip:
		rp.skipped++
		fmt.Fprintf(rp.stdout, "skipped event %s: %s\n", j.e.ID, j.why)
	case collapse:
		rp.collapsed++
		fmt.Fprintf(rp.stdout, "collapsed event %s: %s\n", j.e.ID, collapsedWhy(j.why, j.after))
	case limited:
		rp.limited++
		fmt.Fprintf(rp.stdout, "limited event %s: limit %s has no quota left for its key now\n", j.e.ID, j.why)
	case duplicate:
		rp.duplicates++
		fmt.Fprintf(rp.stdout, "skipped another copy of event %s\n", j.e.ID)
	case admission:
		if j.counted {
			rp.admissions++
		} else if j.why != "" {
			fmt.Fprintf(rp.stdout, "passed over admission %s: %s\n", j.e.ID, j.why)
		}
	case send:
		if j.status/100 == 2 {
			rp.succeeded++
		} else {
			rp.failed++
			fmt.Fprintf(rp.stdout, "failed event %s: status %d\n", j.e.ID, j.status)
		}
	}
}

// step takes the next event: it puts it in the line, and sends it when
// it is to be sent, at the pace and once the route's limits let it. It
// reports finished when the source has no more, and stop when the run
// must stop (ctx ended, or a failure it has said).
func (r *runState) step(ctx context.Context) (finished, stop bool) {
	rp := r.rp
	e, err := r.src.Next(ctx)
	if errors.Is(err, io.EOF) {
		return true, false
	}
	if err != nil {
		if ctx.Err() == nil {
			r.fail("%v", err)
		}
		return false, true
	}
	j := &job{e: e, done: make(chan struct{})}
	r.line = append(r.line, j)
	c := rp.seen.add(e)
	if e.Type == events.TypeAdmitted {
		// Counted, and marked done in its turn; nothing is sent.
		j.how = admission
		if j.counted, j.why, err = rp.admit(e, c); err != nil {
			r.fail("admission %s: %v (it is left for the next run)", e.ID, err)
			r.line = r.line[:len(r.line)-1]
			return false, true
		}
		close(j.done)
		return false, false
	}
	switch c {
	case sameCopy:
		j.how = duplicate
		close(j.done) // marked done in its turn, after the first copy
		return false, false
	case otherCopy:
		j.how, j.why = bad, errOtherCopy
		close(j.done)
		return false, false
	}
	ls := rp.limits.Limits(e)
	if j.how, j.why, err = rp.classify(e, ls); err != nil {
		r.fail("event %s: %v (the event is left for the next run)", e.ID, err)
		r.line = r.line[:len(r.line)-1]
		return false, true
	}
	if j.how == collapse {
		j.after = rp.collapse.byAdmission
	}
	if j.how != send {
		close(j.done) // skipped, failed or collapsed, in its turn
		return false, false
	}
	req, _ := rp.request(r.bg, e, rp.target()) // classify built it once
	// A steady pace: one request per interval, without a burst to catch
	// up after a slow answer.
	slot := r.next
	if !rp.wait(ctx, time.Until(r.next)) {
		r.line = r.line[:len(r.line)-1] // not sent: it stays
		return false, true
	}
	v, ok := r.decide(ctx, e, ls)
	if !ok {
		r.line = r.line[:len(r.line)-1]
		return false, true
	}
	if v.limited != "" {
		j.how, j.why = limited, v.limited
		r.next = slot // nothing was sent in this slot
		close(j.done)
		return false, false
	}
	r.next = time.Now().Add(rp.interval)
	if r.sent == 0 {
		r.first = time.Now()
	}
	r.sent++
	go func() {
		defer close(j.done)
		if len(v.leases) > 0 {
			// Held while the request is out, as the gateway holds a
			// proxied request's.
			defer rp.limits.Hold(rp.live.store, v.lease, v.leases)()
		}
		if v.delay > 0 {
			time.Sleep(v.delay) // a token bucket's queue: the token is due then
		}
		j.status, j.err = rp.send(req)
	}()
	return false, false
}

// decide decides e's limits ls live, after the pace's wait and just
// before the send, so that a replay stopped in between has consumed
// nothing for it; it waits out the limits every request of the route
// shares. It reports false when the run must stop.
func (r *runState) decide(ctx context.Context, e *events.Event, ls []RecordedLimit) (verdict, bool) {
	rp := r.rp
	var v verdict
	for rp.live != nil {
		var err error
		if v, err = rp.live.decide(r.bg, ls); err != nil {
			r.fail("event %s: the store: %v (the event is left for the next run)", e.ID, err)
			return v, false
		}
		if v.wait == 0 {
			break
		}
		// Not the user's fault: a limit every request of the route
		// shares is spent for now. Replay paces itself under it.
		rp.waited[v.waitFor] += v.wait
		if !rp.wait(ctx, v.wait) {
			return v, false
		}
	}
	return v, true
}

// end says what held the pace down, the duplicates and the summary,
// counting what is left when the run did not finish.
func (r *runState) end(finished, ok bool) {
	rp := r.rp
	if ok && r.sent >= 10 && len(rp.waited) == 0 {
		// A pace the upstream held down is said, not left to be guessed.
		took := time.Since(r.first)
		if asked, got := float64(time.Second)/float64(rp.interval), float64(r.sent)/took.Seconds(); got < asked*0.8 {
			fmt.Fprintf(rp.stdout, "pace: %d requests in %v, %.0f/s of the %.0f/s asked: the upstream's answers held it down (--parallel %d)\n",
				r.sent, took.Round(time.Millisecond), got, asked, rp.parallel)
		}
	}
	if len(rp.waited) > 0 {
		// The limits held the pace down, not the upstream: said so.
		fmt.Fprintf(rp.stdout, "paced: events waited for global, route or concurrency limits: %s\n", describe(rp.waited))
	}
	rp.sayFull()
	if rp.duplicates > 0 {
		// Delivery to the sink is at least once: a batch it took after
		// the recorder gave up waiting was spooled and delivered again.
		fmt.Fprintf(rp.stdout, "duplicates: skipped %d copies of events already handled\n", rp.duplicates)
	}
	remaining := 0
	if !finished || !ok {
		cctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
		var left recentIDs
		err := r.src.Pending(cctx, func(e *events.Event) bool {
			if e.Type == events.TypeAdmitted {
				return true // counted, not replayed
			}
			if left.add(e) != sameCopy {
				remaining++
			}
			return true
		})
		cancel()
		if err != nil {
			r.fail("counting the events left: %v", err)
		}
	}
	rp.summary(remaining)
}

// wait waits d, and reports false when ctx ends first.
func (rp *replayer) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
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

// forwardHeaders are what a proxy says of the client it passed a request
// on for. The gateway replaces X-Forwarded-* with its own and drops a
// client's Forwarded; replay is no one's proxy, and the event does not
// record the client's address, so it sends none of them: whatever a
// client wrote there was never the gateway's word.
var forwardHeaders = map[string]bool{"Forwarded": true}

func isForwardHeader(canonical string) bool {
	return forwardHeaders[canonical] || strings.HasPrefix(canonical, "X-Forwarded-")
}

// checkQuery is why a recorded raw query cannot go on a request line, or
// nil: it is sent as written, so a space, a control byte or a '#' would
// end the request target, or the line.
func checkQuery(q string) error {
	for i := 0; i < len(q); i++ {
		if c := q[i]; c <= ' ' || c == 0x7f || c == '#' {
			return fmt.Errorf("query %q: byte %#02x is not allowed in a request target", q, c)
		}
	}
	if _, err := url.ParseQuery(q); err != nil {
		return fmt.Errorf("query %q: %v", q, err)
	}
	return nil
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
	out.Path, out.RawPath = upstream.Path(target, rp.route.Upstream.StripPrefix, e.Path)
	method := e.Method
	if method == "" {
		method = http.MethodGet
	}
	if err := checkQuery(e.Query); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, out.String(), bytes.NewReader(e.Body))
	if err != nil {
		return nil, err
	}
	req.URL = out
	// Checked here, not left to the transport: it refuses a bad field
	// only as it writes the request, which reads as an upstream that did
	// not answer and would stop every run at this event.
	spelled := map[string]string{}
	for k, vs := range e.Headers {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("header name %q is not a valid field name", k)
		}
		ck := http.CanonicalHeaderKey(k)
		if other, ok := spelled[ck]; ok {
			return nil, fmt.Errorf("headers %q and %q are one field", other, k)
		}
		spelled[ck] = k
		if hopHeaders[ck] || isForwardHeader(ck) {
			continue
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("header %s: value %q is not a valid field value", ck, v)
			}
			req.Header.Add(ck, v)
		}
	}
	for k, v := range map[string]string{"Idempotency-Key": e.ID, rp.reqIDHdr: e.RequestID} {
		if k == "" || v == "" {
			continue
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("%s: value %q is not a valid field value", k, v)
		}
		req.Header.Set(k, v)
	}
	if len(e.Body) == 0 {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	return req, nil
}
