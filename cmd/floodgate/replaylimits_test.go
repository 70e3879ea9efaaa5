package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// The tests of replay's limits: the events of a user who retried against
// an open breaker collapse to what the limits would have admitted, and
// what is left is decided against the limits as they are now.

// limitsConfig writes a config whose lucky-meal route goes to upstream,
// records into the events file path, has the limits of limitsYAML (YAML
// list items, indented for the route) and global_limits of globalYAML,
// and whose store block is storeYAML ("" for the default).
func limitsConfig(t *testing.T, upstream, path, storeYAML, globalYAML, limitsYAML string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	if globalYAML == "" {
		globalYAML = "[]"
	}
	if storeYAML == "" {
		storeYAML = "{type: memory}"
	}
	cfg := fmt.Sprintf(`
admin:
  listen: ""
store: %s
global_limits: %s
routes:
  - id: lucky-meal
    match: {path: /api/activities/lucky-meal/receive, methods: [POST]}
    upstream: {targets: ["%s/base"], strip_prefix: /api}
    limits:
%s
    breaker: {enabled: true}
    fallback: {record: true}
events:
  sink: file
  file: {path: %q}
  headers: [X-User-Id]
`, storeYAML, globalYAML, upstream, limitsYAML, path)
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(file); err != nil {
		t.Fatalf("the test's config does not load: %v\n%s", err, cfg)
	}
	return file
}

const userLimit = `      - {name: user, key: ["header:X-User-Id"], rate: 1/10s}`

// userEvent is a breaker event of user recorded at at.
func userEvent(user string, at time.Time) *events.Event {
	return &events.Event{
		Type: events.TypeBreakerRejected, Route: "lucky-meal", Time: at,
		Method: "POST", Path: "/api/activities/lucky-meal/receive",
		Headers: map[string][]string{"X-User-Id": {user}},
		Keys:    map[string][]string{"user": {user}},
		Body:    []byte(`{"user":"` + user + `"}`),
	}
}

// recordFile records evs into a new events file and returns its path.
func recordFile(t *testing.T, evs ...*events.Event) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	c := eventsBlock(config.SinkFile)
	c.File.Path = path
	r := fixtureRecorder(t, c, events.Options{})
	for _, e := range evs {
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%v) = false", e.Keys)
		}
	}
	r.Close()
	return path
}

// fileEventsOf reads back the events in an events file, in order.
func fileEventsOf(t *testing.T, path string) []*events.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*events.Event
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e events.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		out = append(out, &e)
	}
	return out
}

// inWindow is a time well inside an epoch-aligned window of w, an hour
// ago: a second after it starts.
func inWindow(w time.Duration) time.Time {
	return time.Now().Add(-time.Hour).Truncate(w).Add(time.Second)
}

// awayFromEdge waits until at least margin is left of the current
// epoch-aligned window of w, so that what a test does next, which takes
// far less than margin, happens in one window.
func awayFromEdge(w, margin time.Duration) {
	if left := time.Until(time.Now().Truncate(w).Add(w)); left < margin {
		time.Sleep(left + 10*time.Millisecond)
	}
}

// replayIn runs replay in process, as the demo does.
func replayIn(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs bytes.Buffer
	code = runReplay(args, &out, &errs)
	return out.String(), errs.String(), code
}

// idsOf is the Idempotency-Key of each request the upstream got.
func idsOf(rs []received) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.header.Get("Idempotency-Key"))
	}
	return ids
}

// startGateway serves the config in file in process; the caller closes it.
func startGateway(t *testing.T, file string) (*gateway.Gateway, *httptest.Server) {
	t.Helper()
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return gw, httptest.NewServer(gw)
}

// postClient has a transport of its own: an httptest.Server's Close
// closes http.DefaultTransport's idle connections under a parallel test's
// request.
var postClient = &http.Client{Transport: &http.Transport{}}

func post(t *testing.T, url, user string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/api/activities/lucky-meal/receive", strings.NewReader(`{"user":"`+user+`"}`))
	req.Header.Set("X-User-Id", user)
	resp, err := postClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// redisStore is the store block of a test's Redis: a busy machine's Redis
// may take more than the default 50 ms, and deny makes a store failure
// show instead of deciding locally.
func redisStore(srv *testredis.Server) string {
	return fmt.Sprintf("{type: redis, redis: {addrs: [%q], timeout: 2s}, on_error: deny}", srv.Addr())
}

// TestReplayOncePerUser, end to end: two users each retry 3× against the
// open breaker of a route with user: 1/10s; the gateway records 6 events,
// and replay sends each user's first, once.
func TestReplayOncePerUser(t *testing.T) {
	t.Parallel()
	up := newReplayUpstream(t, http.StatusOK)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	file := limitsConfig(t, up.URL, path, "", "", userLimit)
	gw, srv := startGateway(t, file)
	if err := gw.ForceBreaker("lucky-meal", "open", 0); err != nil {
		t.Fatal(err)
	}
	// The 6 requests take milliseconds: in one 10 s window.
	awayFromEdge(10*time.Second, time.Second)
	for range 3 {
		for _, user := range []string{"u7", "u8"} {
			if code := post(t, srv.URL, user); code != http.StatusServiceUnavailable {
				t.Fatalf("status %d through the open breaker", code)
			}
		}
	}
	srv.Close()
	gw.Close() // delivers what is still queued
	recorded := fileEventsOf(t, path)
	if len(recorded) != 6 || len(up.received()) != 0 {
		t.Fatalf("%d events recorded and %d requests upstream; want 6 and 0", len(recorded), len(up.received()))
	}

	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 2, failed 0, skipped 0, collapsed 4, limited 0, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	got := up.received()
	if ids := idsOf(got); len(ids) != 2 || ids[0] != recorded[0].ID || ids[1] != recorded[1].ID {
		t.Fatalf("the upstream got %v, want each user's first event: %s and %s", ids, recorded[0].ID, recorded[1].ID)
	}
	if got[0].header.Get("X-User-Id") != "u7" || got[1].header.Get("X-User-Id") != "u8" {
		t.Errorf("users %q, %q", got[0].header.Get("X-User-Id"), got[1].header.Get("X-User-Id"))
	}
	for _, e := range recorded[2:] {
		if !strings.Contains(stdout, "collapsed event "+e.ID+": limit user ") {
			t.Errorf("event %s is not said to be collapsed:\n%s", e.ID, stdout)
		}
	}
}

// TestReplayTwoWindows: events of one user in two windows of its limit are
// both kept; replayed within 10 s of each other, the second is refused by
// the live decision, and said so.
func TestReplayTwoWindows(t *testing.T) {
	t.Parallel()
	t0 := inWindow(10 * time.Second)
	first, second := userEvent("u7", t0), userEvent("u7", t0.Add(10*time.Second))
	path := recordFile(t, first, second)
	up := newReplayUpstream(t, http.StatusOK)
	file := limitsConfig(t, up.URL, path, "", "", userLimit)

	awayFromEdge(10*time.Second, 2*time.Second)
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 1, failed 0, skipped 0, collapsed 0, limited 1, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if !strings.Contains(stdout, "limited event "+second.ID+": limit user ") {
		t.Errorf("the second event is not said to be limited:\n%s", stdout)
	}
	if ids := idsOf(up.received()); len(ids) != 1 || ids[0] != first.ID {
		t.Errorf("the upstream got %v, want only %s", ids, first.ID)
	}
}

// TestReplayAll: --all sends every event, the retries of one user in one
// window included.
func TestReplayAll(t *testing.T) {
	t.Parallel()
	t0 := inWindow(10 * time.Second)
	path := recordFile(t, userEvent("u7", t0), userEvent("u7", t0.Add(time.Millisecond)), userEvent("u7", t0.Add(2*time.Millisecond)))
	up := newReplayUpstream(t, http.StatusOK)
	file := limitsConfig(t, up.URL, path, "", "", userLimit)
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s", "--all")
	if code != exitOK {
		t.Fatalf("replay --all: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 3, failed 0, skipped 0, collapsed 0, limited 0, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if n := len(up.received()); n != 3 {
		t.Errorf("the upstream got %d requests, want 3", n)
	}
}

// TestReplayRedisLiveQuota: with the Redis store, replay decides in the
// fleet's own counters. A user whose request the gateway admitted before
// the breaker opened has no quota left: their recorded retry is limited.
// Another user's is sent, and counts against their live quota: the
// gateway refuses their next request.
func TestReplayRedisLiveQuota(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	up := newReplayUpstream(t, http.StatusOK)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	file := limitsConfig(t, up.URL, path, redisStore(srv), "", userLimit)
	gw, gsrv := startGateway(t, file)
	defer gw.Close()
	defer gsrv.Close()

	// What follows, to the last request, takes far less than 5 s: one window.
	awayFromEdge(10*time.Second, 5*time.Second)
	if code := post(t, gsrv.URL, "u7"); code != http.StatusOK {
		t.Fatalf("u7's live request: status %d", code)
	}
	if err := gw.ForceBreaker("lucky-meal", "open", 0); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"u7", "u8"} {
		if code := post(t, gsrv.URL, user); code != http.StatusServiceUnavailable {
			t.Fatalf("%s through the open breaker: status %d", user, code)
		}
	}
	recorded := fileEventsOf(t, path) // "recorded": true means in the file
	if len(recorded) != 2 {
		t.Fatalf("%d events recorded, want 2", len(recorded))
	}

	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 1, failed 0, skipped 0, collapsed 0, limited 1, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if !strings.Contains(stdout, "limited event "+recorded[0].ID+": limit user ") {
		t.Errorf("u7's event is not said to be limited:\n%s", stdout)
	}
	got := up.received()
	if len(got) != 2 || got[1].header.Get("Idempotency-Key") != recorded[1].ID {
		t.Fatalf("the upstream got %v; want u7's live request, then u8's event %s", idsOf(got), recorded[1].ID)
	}
	if err := gw.ForceBreaker("lucky-meal", "closed", 0); err != nil {
		t.Fatal(err)
	}
	if code := post(t, gsrv.URL, "u8"); code != http.StatusTooManyRequests {
		t.Errorf("u8's live request after the replay of theirs: status %d, want 429", code)
	}
}

// TestReplayGlobalPaces: a global limit over its quota is no user's doing:
// replay waits for it and sends every event, none limited. A concurrency
// limit holds its lease for the send: with --parallel 4 and limit 1, the
// upstream never has two at once.
func TestReplayGlobalPaces(t *testing.T) {
	t.Parallel()
	t0 := inWindow(10 * time.Second)
	var evs []*events.Event
	for i := range 5 {
		evs = append(evs, userEvent(fmt.Sprintf("u%d", i), t0))
	}
	path := recordFile(t, evs...)
	up := newReplayUpstream(t, http.StatusOK, func(u *replayUpstream) { u.delay = 20 * time.Millisecond })
	file := limitsConfig(t, up.URL, path, "", `[{name: all, key: [global], rate: 2/s}]`,
		userLimit+"\n      - {name: inflight, key: [route], algorithm: concurrency, limit: 1}")
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "1000/s", "--parallel", "4")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 5, failed 0, skipped 0, collapsed 0, limited 0, remaining 0" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if !strings.Contains(stdout, "paced: events waited for global, route or concurrency limits: all ") {
		t.Errorf("the waits for the global limit are not said:\n%s", stdout)
	}
	if n := len(up.received()); n != 5 {
		t.Errorf("the upstream got %d requests, want 5", n)
	}
	if n := up.mostInFlight(); n != 1 {
		t.Errorf("the upstream held %d requests at once; the concurrency limit is 1", n)
	}
}

// TestReplayUnkeyed: an event without the key of a limit that requires one
// is skipped and said so; with on_missing allow, it is not limited by it.
func TestReplayUnkeyed(t *testing.T) {
	t.Parallel()
	t0 := inWindow(10 * time.Second)
	keyless := userEvent("u7", t0)
	keyless.Keys = nil
	keyed := userEvent("u8", t0)
	path := recordFile(t, keyless, keyed)
	up := newReplayUpstream(t, http.StatusOK)

	file := limitsConfig(t, up.URL, path, "", "", userLimit)
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s", "--dry-run")
	if code != exitOK || !strings.Contains(stdout, "would skip event "+keyless.ID+": limit user: no key recorded (on_missing: deny)") {
		t.Errorf("dry run: exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 1, failed 0, skipped 1, collapsed 0, limited 0, remaining 0" ||
		!strings.Contains(stdout, "skipped event "+keyless.ID+": limit user: no key recorded") {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}

	path = recordFile(t, keyless, keyed)
	file = limitsConfig(t, up.URL, path, "", "", `      - {name: user, key: ["header:X-User-Id"], rate: 1/10s, on_missing: allow}`)
	stdout, stderr, code = replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if m := summaryLine.FindString(stdout); code != exitOK || m != "succeeded 2, failed 0, skipped 0, collapsed 0, limited 0, remaining 0" {
		t.Errorf("on_missing allow: exit %d, summary %q; stdout:\n%s\nstderr:\n%s", code, m, stdout, stderr)
	}
}

// TestReplayDryRunCollapse: a dry run says what would be collapsed and
// sent, twice alike, and consumes nothing from the fleet's counters: the
// real run then sends what the dry runs said.
func TestReplayDryRunCollapse(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	t0 := inWindow(10 * time.Second)
	evs := []*events.Event{userEvent("u7", t0), userEvent("u7", t0.Add(time.Second)), userEvent("u8", t0.Add(2*time.Second)), userEvent("u7", t0.Add(3*time.Second))}
	path := recordFile(t, evs...)
	up := newReplayUpstream(t, http.StatusOK)
	file := limitsConfig(t, up.URL, path, redisStore(srv), "", userLimit)

	awayFromEdge(10*time.Second, 5*time.Second)
	for range 2 {
		stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--dry-run")
		if code != exitOK {
			t.Fatalf("dry run: exit %d; stderr:\n%s", code, stderr)
		}
		for _, want := range []string{
			"would send event " + evs[0].ID + ": POST ",
			"would collapse event " + evs[1].ID + ": limit user ",
			"would send event " + evs[2].ID + ": POST ",
			"would collapse event " + evs[3].ID + ": limit user ",
			"dry run: of 4 events pending, would send 2, fail 0, skip 0, collapse 2, limit 0; nothing sent or marked done\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("dry run: no %q in:\n%s", want, stdout)
			}
		}
		if m := summaryLine.FindString(stdout); m != "" {
			t.Errorf("dry run: a run's summary %q beside its own; stdout:\n%s", m, stdout)
		}
	}
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if m := summaryLine.FindString(stdout); code != exitOK || m != "succeeded 2, failed 0, skipped 0, collapsed 2, limited 0, remaining 0" {
		t.Errorf("replay after the dry runs: exit %d, summary %q; stdout:\n%s\nstderr:\n%s", code, m, stdout, stderr)
	}
	// The replay's sends counted in Redis: a dry run now would limit
	// them, were they still to send. The next run has nothing to do.
	if got := srv.Do(t, "DBSIZE"); got == "0" {
		t.Errorf("the replay's decisions left nothing in Redis")
	}
}

// TestReplayCollapseBound: beyond --collapse-keys, an event that needs a
// new key is not collapsed; the live decision alone limits it, and the run
// says the memory was full.
func TestReplayCollapseBound(t *testing.T) {
	t.Parallel()
	t0 := inWindow(10 * time.Second)
	path := recordFile(t, userEvent("u7", t0), userEvent("u7", t0), userEvent("u8", t0), userEvent("u8", t0))
	up := newReplayUpstream(t, http.StatusOK)
	file := limitsConfig(t, up.URL, path, "", "", userLimit)
	awayFromEdge(10*time.Second, 2*time.Second)
	// A dry run cannot tell what the live step leaves of u8's two
	// events: it says so rather than that both would be sent.
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--dry-run", "--collapse-keys", "1")
	if code != exitOK || strings.Count(stdout, "would decide event ") != 2 || strings.Count(stdout, "would send event ") != 1 ||
		!strings.Contains(stdout, "would send 1, fail 0, skip 0, collapse 1, limit 0, decide live only 2;") {
		t.Errorf("dry run: exit %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s", "--collapse-keys", "1")
	if code != exitOK {
		t.Fatalf("replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 2, failed 0, skipped 0, collapsed 1, limited 1, remaining 0" ||
		!strings.Contains(stdout, "the memory of keys was full (--collapse-keys)") {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if _, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--collapse-keys", "0"); code != exitUsage || !strings.Contains(stderr, "--collapse-keys") {
		t.Errorf("--collapse-keys 0: exit %d, stderr %q", code, stderr)
	}
}

// TestReplayStoreDown: a store that does not answer stops the replay with
// exit 1 before anything is sent, and leaves the events for the next run.
func TestReplayStoreDown(t *testing.T) {
	t.Parallel()
	t0 := inWindow(10 * time.Second)
	path := recordFile(t, userEvent("u7", t0), userEvent("u8", t0))
	up := newReplayUpstream(t, http.StatusOK)
	file := limitsConfig(t, up.URL, path, fmt.Sprintf("{type: redis, redis: {addrs: [%q]}}", freeAddr(t)), "", userLimit)
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitFailure || !strings.Contains(stderr, "the store") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 0, failed 0, skipped 0, collapsed 0, limited 0, remaining 2" {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	if _, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--dry-run"); code != exitFailure || !strings.Contains(stderr, "the store") {
		t.Errorf("dry run: exit %d, stderr:\n%s", code, stderr)
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
}
