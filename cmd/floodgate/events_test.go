package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/stores"
	"github.com/floodgate-gw/floodgate/internal/testnet"
	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// The replay tests record events with the events package into a real
// sink, then run "floodgate events replay" as a user would, against an
// httptest upstream that remembers what it received.

// received is one request the upstream got.
type received struct {
	at     time.Time
	method string
	uri    string
	header http.Header
	body   string
}

type replayUpstream struct {
	*httptest.Server
	status int
	delay  time.Duration // before each answer
	mute   string        // the X-User-Id whose requests get no answer: the connection is closed
	h2c    bool          // HTTP/2 in clear alone, no HTTP/1.1

	mu                  sync.Mutex
	reqs                []received
	inFlight, mostInFly int
}

func newReplayUpstream(t *testing.T, status int, opts ...func(*replayUpstream)) *replayUpstream {
	u := &replayUpstream{status: status}
	for _, o := range opts {
		o(u)
	}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, received{time.Now(), r.Method, r.URL.RequestURI(), r.Header.Clone(), string(body)})
		u.inFlight++
		u.mostInFly = max(u.mostInFly, u.inFlight)
		u.mu.Unlock()
		done := sync.OnceFunc(func() {
			u.mu.Lock()
			u.inFlight--
			u.mu.Unlock()
		})
		defer done()
		time.Sleep(u.delay)
		if u.mute != "" && r.Header.Get("X-User-Id") == u.mute {
			c, _, err := http.NewResponseController(w).Hijack()
			// No longer held once the client sees the connection close,
			// which it may answer at once with the same request on a new
			// one (http.Transport retries a request with an
			// Idempotency-Key).
			done()
			if err == nil {
				c.Close()
			}
			return
		}
		w.WriteHeader(u.status)
	}))
	if u.h2c {
		u.Config.Protocols = new(http.Protocols)
		u.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// mostInFlight is the most requests the upstream held at once.
func (u *replayUpstream) mostInFlight() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.mostInFly
}

func (u *replayUpstream) received() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.reqs...)
}

// replayEvent is breaker event i; every tenth (0 and 10) is truncated.
func replayEvent(i int) *events.Event {
	e := &events.Event{
		Type:      events.TypeBreakerRejected,
		Route:     "lucky-meal",
		RequestID: fmt.Sprintf("req-%02d", i),
		Method:    "POST",
		Path:      "/api/activities/lucky-meal/receive",
		Query:     fmt.Sprintf("n=%d&q=a%%20b", i),
		Headers: map[string][]string{
			"Content-Type": {"application/json"},
			"X-User-Id":    {fmt.Sprintf("user-%d", i)},
			"Connection":   {"close"}, // hop-by-hop: never replayed
		},
		Body: []byte(fmt.Sprintf(`{"user":%d}`, i)),
	}
	if i%10 == 0 {
		e.Truncated = true
	}
	return e
}

// recordEvents records n breaker events for lucky-meal, with events of
// another route and another type between them, and returns the lucky-meal
// ones in order.
func recordEvents(t *testing.T, c config.Events, o events.Options, n int) []*events.Event {
	t.Helper()
	return recordEventsWith(t, c, o, n, nil)
}

// recordEventsWith is recordEvents, with edit, when not nil, called on
// each event of the n and of the others before it is recorded, with its
// number: i for lucky-meal's event i, 100+i for the other after it.
func recordEventsWith(t *testing.T, c config.Events, o events.Options, n int, edit func(e *events.Event, i int)) []*events.Event {
	t.Helper()
	r := fixtureRecorder(t, c, o)
	defer r.Close()
	var out []*events.Event
	for i := range n {
		e := replayEvent(i)
		if edit != nil {
			edit(e, i)
		}
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%d) = false", i)
		}
		out = append(out, e)
		other := replayEvent(100 + i)
		if i%2 == 0 {
			other.Route = "other"
		} else {
			other.Type = events.TypeRateLimited
		}
		if edit != nil {
			edit(other, 100+i)
		}
		if !r.Record(context.Background(), other) {
			t.Fatalf("Record(other %d) = false", i)
		}
	}
	// Close delivers what is still spooled before it returns.
	r.Close()
	return out
}

// fixtureRecorder is a recorder that fills a test's fixture: not a
// request's, so Record waits for a busy machine's fsync instead of giving
// up after a request's 100 ms.
func fixtureRecorder(t *testing.T, c config.Events, o events.Options) *events.Recorder {
	t.Helper()
	o.RecordWait = waitTimeout
	sink, err := stores.EventSink(&config.Config{Events: c})
	if err != nil {
		t.Fatal(err)
	}
	r, err := events.NewRecorder(sink, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fileEvents records n events as recordEvents does into a new events
// file, and returns them and the events block that names the file.
func fileEvents(t *testing.T, n int) ([]*events.Event, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	c := eventsBlock(config.SinkFile)
	c.File.Path = path
	return recordEvents(t, c, events.Options{}, n), fmt.Sprintf("  sink: file\n  file: {path: %q}", path)
}

// replayConfig writes a config whose lucky-meal route goes to upstream
// and whose events block is eventsYAML.
func replayConfig(t *testing.T, upstream, eventsYAML string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	cfg := fmt.Sprintf(`
admin:
  listen: ""
routes:
  - id: lucky-meal
    match: {path: /api/activities/lucky-meal/receive, methods: [POST]}
    upstream: {targets: ["%s/base"], strip_prefix: /api}
    breaker: {enabled: true}
    fallback: {record: true}
events:
%s
`, upstream, eventsYAML)
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(file); err != nil {
		t.Fatalf("the test's config does not load: %v\n%s", err, cfg)
	}
	return file
}

var summaryLine = regexp.MustCompile(`(?m)^succeeded (\d+), failed (\d+), skipped (\d+), collapsed (\d+), limited (\d+), remaining (\d+)$`)

// checkReplayed checks that the upstream got exactly the untruncated
// events of want, in order, as they were recorded, at the pace asked.
func checkReplayed(t *testing.T, got []received, want []*events.Event, interval time.Duration) {
	t.Helper()
	var sendable []*events.Event
	for _, e := range want {
		if !e.Truncated {
			sendable = append(sendable, e)
		}
	}
	if len(got) != len(sendable) {
		t.Fatalf("the upstream got %d requests, want %d", len(got), len(sendable))
	}
	for i, e := range sendable {
		r := got[i]
		wantURI := "/base/activities/lucky-meal/receive?" + e.Query
		if r.method != e.Method || r.uri != wantURI || r.body != string(e.Body) {
			t.Errorf("request %d = %s %s %q, want %s %s %q", i, r.method, r.uri, r.body, e.Method, wantURI, e.Body)
		}
		for _, h := range []string{"Content-Type", "X-User-Id"} {
			if r.header.Get(h) != e.Headers[h][0] {
				t.Errorf("request %d: %s = %q, want %q", i, h, r.header.Get(h), e.Headers[h][0])
			}
		}
		if got := r.header.Get("Idempotency-Key"); got != e.ID {
			t.Errorf("request %d: Idempotency-Key = %q, want the event id %q", i, got, e.ID)
		}
		if got := r.header.Get("X-Request-Id"); got != e.RequestID {
			t.Errorf("request %d: X-Request-Id = %q, want %q", i, got, e.RequestID)
		}
	}
	// Never faster than the rate: the sends are at least an interval
	// apart, so the arrivals are too, but for the scheduling jitter of a
	// busy machine on each one.
	if n := len(got); n > 1 {
		if span := got[n-1].at.Sub(got[0].at); span < time.Duration(n-1)*interval*9/10 {
			t.Errorf("%d requests in %v; --rate allows one per %v", n, span, interval)
		}
	}
}

func testReplay(t *testing.T, eventsYAML string, c config.Events, o events.Options) {
	up := newReplayUpstream(t, http.StatusOK)
	want := recordEvents(t, c, o, 20)
	file := replayConfig(t, up.URL, eventsYAML)

	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	for _, e := range want {
		if e.Truncated && !strings.Contains(stdout, "skipped truncated event "+e.ID) {
			t.Errorf("replay did not say it skipped %s:\n%s", e.ID, stdout)
		}
	}
	m := summaryLine.FindStringSubmatch(stdout)
	if m == nil || m[0] != "succeeded 18, failed 0, skipped 2, collapsed 0, limited 0, remaining 0" {
		t.Errorf("summary = %q, want \"succeeded 18, failed 0, skipped 2, collapsed 0, limited 0, remaining 0\"; stdout:\n%s", m, stdout)
	}
	checkReplayed(t, up.received(), want, 5*time.Millisecond)

	// Everything is marked done: a second run sends nothing.
	stdout, stderr, code = floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("second replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 0, failed 0, skipped 0, collapsed 0, limited 0, remaining 0" {
		t.Errorf("second replay: summary %q; stdout:\n%s", m, stdout)
	}
	if n := len(up.received()); n != 18 {
		t.Errorf("after the second replay the upstream has %d requests, want still 18", n)
	}
}

// A route of protocol h2c is replayed over HTTP/2, as the gateway sends
// its requests: to a target that speaks nothing else.
func TestEventsReplayH2C(t *testing.T) {
	t.Parallel()
	up := newReplayUpstream(t, http.StatusOK, func(u *replayUpstream) { u.h2c = true })
	want, eventsYAML := fileEvents(t, 20)
	file := replayConfig(t, up.URL, eventsYAML)
	cfg, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg = []byte(strings.Replace(string(cfg), "strip_prefix: /api}", "strip_prefix: /api, protocol: h2c}", 1))
	if err := os.WriteFile(file, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 18, failed 0, skipped 2, collapsed 0, limited 0, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	checkReplayed(t, up.received(), want, 5*time.Millisecond)
}

func TestEventsReplayRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	spool := t.TempDir()
	c := eventsBlock(config.SinkRedis)
	c.Redis.Addrs = []string{srv.Addr()}
	c.SpoolDir = spool
	testReplay(t, fmt.Sprintf(`  sink: redis
  redis: {stream: "fg:events", addrs: ["%s"]}
  spool_dir: %q`, srv.Addr(), spool), c, events.Options{})
	// The group is per route, so another route's events are still there
	// for its own replay.
	if got := srv.Do(t, "XINFO", "GROUPS", "fg:events"); !strings.Contains(got, "floodgate-replay-lucky-meal") {
		t.Errorf("no consumer group floodgate-replay-lucky-meal: %s", got)
	}
}

func TestEventsReplayFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	c := eventsBlock(config.SinkFile)
	c.File.Path = path
	testReplay(t, fmt.Sprintf(`  sink: file
  file: {path: %q}`, path), c, events.Options{})
	if _, err := os.Stat(path + ".replay-lucky-meal.offset"); err != nil {
		t.Errorf("no offset file beside the events file: %v", err)
	}
}

// TestEventsReplayFailures: an upstream that answers with an error counts
// each event as failed and marks it done, so replay ends; one that does not
// answer at all stops replay with exit 1 and leaves the event.
func TestEventsReplayFailures(t *testing.T) {
	t.Parallel()
	_, yaml := fileEvents(t, 5)

	file := replayConfig(t, testnet.RefusedURL(t), yaml)
	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "100/s")
	if code != exitFailure || strings.Count(stderr, "did not answer") != 1 {
		t.Errorf("against a closed upstream: exit %d, stderr (the failure said once):\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 0, failed 0, skipped 1, collapsed 0, limited 0, remaining 4" {
		t.Errorf("against a closed upstream: summary %q; stdout:\n%s", m, stdout)
	}

	up := newReplayUpstream(t, http.StatusServiceUnavailable)
	file = replayConfig(t, up.URL, yaml)
	stdout, stderr, code = floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "100/s")
	if code != exitOK {
		t.Fatalf("against a 503 upstream: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 0, failed 4, skipped 0, collapsed 0, limited 0, remaining 0" {
		t.Errorf("against a 503 upstream: summary %q; stdout:\n%s", m, stdout)
	}
	if n := strings.Count(stdout, "failed event "); n != 4 {
		t.Errorf("%d lines about failed events, want 4:\n%s", n, stdout)
	}
}

// TestEventsReplayParallel: --parallel N keeps up to N requests in flight,
// and a run that one unanswered request stops marks done what came before
// it, so the next run sends again at most N; one at a time against a slow
// upstream, the run says that the upstream held the pace down.
func TestEventsReplayParallel(t *testing.T) {
	t.Parallel()
	want, yaml := fileEvents(t, 40)

	// Event 25 gets no answer: the run stops there.
	slow := newReplayUpstream(t, http.StatusOK, func(u *replayUpstream) {
		u.delay, u.mute = 60*time.Millisecond, "user-25"
	})
	stdout, stderr, code := floodgate(t, "events", "replay", "-c", replayConfig(t, slow.URL, yaml), "--route", "lucky-meal", "--rate", "1000/s", "--parallel", "4")
	if code != exitFailure || !strings.Contains(stderr, "did not answer") {
		t.Fatalf("with event 25 unanswered: exit %d, stderr:\n%s", code, stderr)
	}
	if n := slow.mostInFlight(); n < 2 || n > 4 {
		t.Errorf("the upstream held %d requests at once, want 2 to 4 (--parallel 4)", n)
	}
	m := summaryLine.FindStringSubmatch(stdout)
	// Events 0 to 24: 23 sent (0 and 10 and 20 truncated) and marked,
	// the rest left.
	if m == nil || m[0] != "succeeded 22, failed 0, skipped 3, collapsed 0, limited 0, remaining 15" {
		t.Fatalf("summary %q, want \"succeeded 22, failed 0, skipped 3, collapsed 0, limited 0, remaining 15\"; stdout:\n%s", m, stdout)
	}

	up := newReplayUpstream(t, http.StatusOK)
	stdout, stderr, code = floodgate(t, "events", "replay", "-c", replayConfig(t, up.URL, yaml), "--route", "lucky-meal", "--rate", "1000/s", "--parallel", "4")
	if code != exitOK {
		t.Fatalf("resumed replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 14, failed 0, skipped 1, collapsed 0, limited 0, remaining 0" {
		t.Errorf("resumed replay: summary %q; stdout:\n%s", m, stdout)
	}
	// Every sendable event reached an upstream; the ones that reached
	// both were in flight when the first run stopped.
	first := map[string]bool{}
	for _, r := range slow.received() {
		first[r.header.Get("Idempotency-Key")] = true
	}
	again := 0
	for _, r := range up.received() {
		if first[r.header.Get("Idempotency-Key")] {
			again++
		}
	}
	if again < 1 || again > 4 {
		t.Errorf("%d events sent by both runs, want 1 (event 25) to 4 (--parallel 4)", again)
	}
	for _, e := range want {
		if !e.Truncated && !first[e.ID] && !slices.ContainsFunc(up.received(), func(r received) bool { return r.header.Get("Idempotency-Key") == e.ID }) {
			t.Errorf("event %s (%s) was never sent", e.ID, e.RequestID)
		}
	}

	// One at a time against a slow upstream: said.
	_, yaml = fileEvents(t, 12)
	slow.mute = ""
	stdout, _, code = floodgate(t, "events", "replay", "-c", replayConfig(t, slow.URL, yaml), "--route", "lucky-meal", "--rate", "1000/s")
	if code != exitOK || !strings.Contains(stdout, "the upstream's answers held it down (--parallel 1)") {
		t.Errorf("one at a time against a 60 ms upstream at 1000/s: exit %d, stdout:\n%s", code, stdout)
	}
}

// An event that makes no valid request (a method with a space in it) is
// failed, said so and marked done: it does not stop the replay.
func TestEventsReplayBadEvent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	c := eventsBlock(config.SinkFile)
	c.File.Path = path
	r := fixtureRecorder(t, c, events.Options{})
	var es []*events.Event
	for i := 1; i <= 3; i++ {
		e := replayEvent(i)
		if i == 2 {
			e.Method = "BAD METHOD"
		}
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%d) = false", i)
		}
		es = append(es, e)
	}
	r.Close()
	up := newReplayUpstream(t, http.StatusOK)
	file := replayConfig(t, up.URL, fmt.Sprintf("  sink: file\n  file: {path: %q}", path))
	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "1000/s", "--parallel", "2")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 2, failed 1, skipped 0, collapsed 0, limited 0, remaining 0" || !strings.Contains(stdout, "failed event "+es[1].ID+": ") {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if n := len(up.received()); n != 2 {
		t.Errorf("the upstream got %d requests, want 2", n)
	}
}

// TestEventsReplayDryRun lists without sending or consuming.
func TestEventsReplayDryRun(t *testing.T) {
	t.Parallel()
	want, yaml := fileEvents(t, 3)
	up := newReplayUpstream(t, http.StatusOK)
	file := replayConfig(t, up.URL, yaml)
	for range 2 {
		stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--dry-run")
		if code != exitOK {
			t.Fatalf("dry run: exit %d; stderr:\n%s", code, stderr)
		}
		if !strings.Contains(stdout, "would skip truncated event "+want[0].ID) ||
			!strings.Contains(stdout, "would send event "+want[1].ID+": POST "+up.URL+"/base/activities/lucky-meal/receive?n=1") {
			t.Errorf("dry run output:\n%s", stdout)
		}
		if m := summaryLine.FindString(stdout); m != "" || !strings.Contains(stdout, "dry run: of 3 events pending, would send 2, fail 0, skip 1, collapse 0, limit 0; nothing sent or marked done\n") {
			t.Errorf("dry run: want one summary, its own; stdout:\n%s", stdout)
		}
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("a dry run sent %d requests", n)
	}
}

// TestEventsReplayInterrupted: Ctrl-C lets the request in flight finish,
// reports what remains, and the next run sends the rest, none twice.
func TestEventsReplayInterrupted(t *testing.T) {
	t.Parallel()
	want, yaml := fileEvents(t, 20)
	up := newReplayUpstream(t, http.StatusOK)
	file := replayConfig(t, up.URL, yaml)

	var out syncBuffer
	cmd := exec.Command(floodgateBin, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "20/s")
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(waitTimeout)
	for len(up.received()) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("replay sent nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGINT: %v, want 0", err)
	}
	m := summaryLine.FindStringSubmatch(out.String())
	if m == nil || m[6] == "0" {
		t.Fatalf("the interrupted run does not report what remains:\n%s", out.String())
	}
	sent := len(up.received())
	if fmt.Sprint(sent) != m[1] {
		t.Errorf("the interrupted run says it succeeded %s times; the upstream got %d", m[1], sent)
	}

	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("resumed replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m2 := summaryLine.FindStringSubmatch(stdout); m2 == nil || m2[6] != "0" {
		t.Errorf("resumed replay: %s", stdout)
	}
	checkReplayed(t, up.received(), want, 0)
}

func TestEventsUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"events"}, exitUsage, "Usage: floodgate events"},
		{[]string{"events", "nope"}, exitUsage, `unknown subcommand "nope"`},
		{[]string{"events", "replay"}, exitUsage, "--route is required"},
		{[]string{"events", "replay", "--route", "x", "--rate", "fast"}, exitUsage, "--rate"},
		{[]string{"events", "replay", "--route", "x", "--rate", "0/s"}, exitUsage, "--rate"},
		{[]string{"events", "replay", "--route", "x", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"events", "replay", "--route", "x", "--parallel", "0"}, exitUsage, "--parallel"},
		{[]string{"events", "replay", "--route", "x", "--parallel", "65"}, exitUsage, "want 1 to 64"},
		{[]string{"events", "replay", "--bogus"}, exitUsage, "bogus"},
		{[]string{"events", "replay", "-c", "/nonexistent/floodgate.yaml", "--route", "x"}, exitFailure, "cannot read"},
	}
	for _, tt := range tests {
		_, stderr, code := floodgate(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.stderr) {
			t.Errorf("floodgate %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), code, stderr, tt.code, tt.stderr)
		}
	}
	for _, args := range [][]string{{"events", "-h"}, {"events", "replay", "-h"}} {
		stdout, _, code := floodgate(t, args...)
		if code != exitOK || !strings.Contains(stdout, "Usage: floodgate events") {
			t.Errorf("floodgate %s: exit %d, stdout %q", strings.Join(args, " "), code, stdout)
		}
	}

	file := replayConfig(t, "http://127.0.0.1:1", "  sink: file")
	_, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "nope")
	if code != exitFailure || !strings.Contains(stderr, `no route "nope"`) {
		t.Errorf("unknown route: exit %d, stderr %q", code, stderr)
	}
}

// eventsBlock is the events block with its defaults.
func eventsBlock(sink config.Sink) config.Events {
	e := config.Defaults().Events
	e.Sink = sink
	return e
}

// Delivery to a sink is at least once: a batch the sink took after the
// recorder stopped waiting for it is delivered again, so a sink can hold
// an event twice. Replay handles each event once, whatever the sink holds.
func TestEventsReplayDuplicates(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := testredis.Start(t)
		c := eventsBlock(config.SinkRedis)
		c.Redis.Addrs = []string{srv.Addr()}
		c.SpoolDir = t.TempDir()
		want := recordEvents(t, c, events.Options{}, 20)
		// A second copy of a truncated event and of a sendable one, after
		// the events recorded since.
		srv.Do(t, "EVAL", `
for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'id' and (f[i+1] == ARGV[1] or f[i+1] == ARGV[2]) then
      redis.call('XADD', KEYS[1], '*', unpack(f))
    end
  end
end
return 1`, "1", "fg:events", want[0].ID, want[3].ID)
		testDuplicatesReplayed(t, want, fmt.Sprintf("  sink: redis\n  redis: {stream: \"fg:events\", addrs: [\"%s\"]}\n  spool_dir: %q", srv.Addr(), c.SpoolDir))
	})
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "events.jsonl")
		c := eventsBlock(config.SinkFile)
		c.File.Path = path
		want := recordEvents(t, c, events.Options{}, 20)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var copies []string
		for _, l := range strings.SplitAfter(string(data), "\n") {
			if strings.Contains(l, want[0].ID) || strings.Contains(l, want[3].ID) {
				copies = append(copies, l)
			}
		}
		if len(copies) != 2 {
			t.Fatalf("%d lines hold events 0 and 3, want 2", len(copies))
		}
		if err := os.WriteFile(path, []byte(string(data)+strings.Join(copies, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		testDuplicatesReplayed(t, want, fmt.Sprintf("  sink: file\n  file: {path: %q}", path))
	})
}

// A copy of an event's id with other contents than the first is not the
// event the first was: it is failed and said so, not sent, and not taken
// for a copy.
func TestEventsReplayOtherContents(t *testing.T) {
	t.Parallel()
	want, yaml := fileEvents(t, 20)
	path := strings.TrimSuffix(strings.TrimPrefix(yaml, "  sink: file\n  file: {path: \""), "\"}")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var forged string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if strings.Contains(l, want[3].ID) {
			forged = strings.Replace(l, `n=3`, `n=666`, 1)
		}
	}
	if forged == "" || !strings.Contains(forged, "n=666") {
		t.Fatalf("no line of event 3 to forge in:\n%s", data)
	}
	if err := os.WriteFile(path, []byte(string(data)+forged), 0o644); err != nil {
		t.Fatal(err)
	}
	up := newReplayUpstream(t, http.StatusOK)
	stdout, stderr, code := floodgate(t, "events", "replay", "-c", replayConfig(t, up.URL, yaml), "--route", "lucky-meal", "--rate", "1000/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 18, failed 1, skipped 2, collapsed 0, limited 0, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if !strings.Contains(stdout, "failed event "+want[3].ID+": an event of the same id with other contents came before it") {
		t.Errorf("the forged copy was not said to fail:\n%s", stdout)
	}
	for _, r := range up.received() {
		if strings.Contains(r.uri, "n=666") {
			t.Errorf("the forged copy was sent: %s", r.uri)
		}
	}
	checkReplayed(t, up.received(), want, time.Millisecond)
}

// testDuplicatesReplayed replays the events of eventsYAML, which holds
// want with events 0 (truncated) and 3 at least twice, and checks each
// was handled once, in its first place. The recorder may itself have
// delivered an event twice (at least once: a batch the sink took after
// the recorder stopped waiting is sent again), so the copies are counted,
// not known.
func testDuplicatesReplayed(t *testing.T, want []*events.Event, eventsYAML string) {
	t.Helper()
	up := newReplayUpstream(t, http.StatusOK)
	file := replayConfig(t, up.URL, eventsYAML)
	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "1000/s", "--dry-run")
	dryCopies := strings.Count(stdout, "would skip another copy of event ")
	if code != exitOK || dryCopies < 2 || !strings.Contains(stdout, "dry run: of 20 events pending, would send 18, fail 0, skip 2,") {
		t.Errorf("dry run: exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	stdout, stderr, code = floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "1000/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 18, failed 0, skipped 2, collapsed 0, limited 0, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	for _, e := range []*events.Event{want[0], want[3]} {
		if !strings.Contains(stdout, "skipped another copy of event "+e.ID+"\n") {
			t.Errorf("replay did not say it skipped the copy of %s:\n%s", e.ID, stdout)
		}
	}
	copies := strings.Count(stdout, "skipped another copy of event ")
	if copies != dryCopies || !strings.Contains(stdout, fmt.Sprintf("duplicates: skipped %d copies of events already handled\n", copies)) {
		t.Errorf("%d copies skipped, %d in the dry run; want them counted in a line:\n%s", copies, dryCopies, stdout)
	}
	checkReplayed(t, up.received(), want, time.Millisecond)
}
