package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/jwtsign"
)

// The tests of what replay refuses to send: an events sink holds what
// anyone who can write it wrote, and replay sends only requests the
// gateway can have recorded for the route.

// writeEventLines writes events, and raw lines, into a new events file as
// the file sink does (one JSON object a line), and returns its path.
func writeEventLines(t *testing.T, lines ...any) string {
	t.Helper()
	var buf bytes.Buffer
	for i, l := range lines {
		switch l := l.(type) {
		case *events.Event:
			if l.ID == "" {
				l.ID = fmt.Sprintf("ev-%02d", i)
			}
			if l.Time.IsZero() {
				l.Time = time.Now().Add(-time.Minute)
			}
			b, err := json.Marshal(l)
			if err != nil {
				t.Fatal(err)
			}
			buf.Write(b)
		case string:
			buf.WriteString(l)
		}
		buf.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReplayRefusesForgedRequests: events whose request cannot be built
// (a header with CR LF, a bad header name, a query that would end the
// request line) fail, and events the route cannot have recorded (a path
// that is not clean, has an authority or is absolute-form, or one the
// route does not take) are skipped; each is said, marked done, and the
// run goes on to the events after them. Nothing reaches any host but the
// route's target, and the client's forwarding headers are not replayed.
func TestReplayRefusesForgedRequests(t *testing.T) {
	t.Parallel()
	up := newReplayUpstream(t, http.StatusOK)
	other := newReplayUpstream(t, http.StatusOK) // where a forged path points
	host := strings.TrimPrefix(other.URL, "http://")

	ev := func(i int, edit func(*events.Event)) *events.Event {
		e := replayEvent(i)
		e.ID, e.Truncated = fmt.Sprintf("ev-%02d", i), false
		edit(e)
		return e
	}
	good := ev(1, func(e *events.Event) {
		e.Headers["X-Forwarded-For"] = []string{"6.6.6.6"}
		e.Headers["X-Forwarded-Host"] = []string{"evil.example"}
		e.Headers["X-Forwarded-Proto"] = []string{"https"}
		e.Headers["Forwarded"] = []string{"for=6.6.6.6"}
	})
	failed := []*events.Event{
		ev(2, func(e *events.Event) { e.Headers["X-A"] = []string{"v\r\nX-Injected: 1"} }),
		ev(3, func(e *events.Event) { e.Headers["Bad Name:"] = []string{"v"} }),
		ev(4, func(e *events.Event) { e.Query = "a=1 HTTP/1.1\r\nX-Injected: 1" }),
		ev(5, func(e *events.Event) { e.Query = "a=%zz" }),
		ev(6, func(e *events.Event) { e.RequestID = "r\r\nX-Injected: 1" }),
		ev(7, func(e *events.Event) { e.Headers["x-user-id"] = []string{"someone-else"} }),
	}
	skipped := []*events.Event{
		ev(8, func(e *events.Event) { e.Path = "/api/../admin/x" }),
		ev(9, func(e *events.Event) { e.Path = "@" + host + "/ssrf" }),
		ev(10, func(e *events.Event) { e.Path = "//" + host + "/ssrf2" }),
		ev(11, func(e *events.Event) { e.Path = other.URL + "/ssrf3" }),
		ev(12, func(e *events.Event) { e.Path = "/other/x" }),
		ev(13, func(e *events.Event) { e.Method = "GET" }), // the route takes POST only
	}
	last := ev(14, func(*events.Event) {})
	lines := []any{good}
	for _, e := range failed {
		lines = append(lines, e)
	}
	for _, e := range skipped {
		lines = append(lines, e)
	}
	lines = append(lines, last)
	path := writeEventLines(t, lines...)
	file := replayConfig(t, up.URL, fmt.Sprintf("  sink: file\n  file: {path: %q}", path))

	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "1000/s")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	want := fmt.Sprintf("succeeded 2, failed %d, skipped %d, collapsed 0, limited 0, remaining 0", len(failed), len(skipped))
	if m := summaryLine.FindString(stdout); m != want {
		t.Errorf("summary %q, want %q; stdout:\n%s", m, want, stdout)
	}
	for _, e := range failed {
		if !strings.Contains(stdout, "failed event "+e.ID+": ") {
			t.Errorf("no line says event %s failed:\n%s", e.ID, stdout)
		}
	}
	for _, e := range skipped {
		if !strings.Contains(stdout, "skipped event "+e.ID+": not a request this configuration records: ") {
			t.Errorf("no line says event %s was skipped, and why:\n%s", e.ID, stdout)
		}
	}
	got := up.received()
	if ids := idsOf(got); len(ids) != 2 || ids[0] != good.ID || ids[1] != last.ID {
		t.Fatalf("the upstream got %v, want [%s %s]", ids, good.ID, last.ID)
	}
	for _, r := range got {
		if r.uri != "/base/activities/lucky-meal/receive?"+good.Query && r.uri != "/base/activities/lucky-meal/receive?"+last.Query {
			t.Errorf("the upstream got %s", r.uri)
		}
		for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Injected"} {
			if v, ok := r.header[h]; ok {
				t.Errorf("the upstream got %s: %q from the recorded request", h, v)
			}
		}
	}
	if n := len(other.received()); n != 0 {
		t.Errorf("the host a forged path names got %d requests", n)
	}

	// All marked done: the next run has nothing left, and does not stop.
	stdout, stderr, code = floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "1000/s")
	if m := summaryLine.FindString(stdout); code != exitOK || m != "succeeded 0, failed 0, skipped 0, collapsed 0, limited 0, remaining 0" {
		t.Errorf("second run: exit %d, summary %q; stderr:\n%s", code, m, stderr)
	}
}

// TestReplayStripPrefixAsLive: for a prefix route with strip_prefix, the
// upstream gets the same request target from replay as it got from the
// gateway for the same request.
func TestReplayStripPrefixAsLive(t *testing.T) {
	t.Parallel()
	up := newReplayUpstream(t, http.StatusOK)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	file := filepath.Join(t.TempDir(), "floodgate.yaml")
	cfg := fmt.Sprintf(`
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["%s/base"], strip_prefix: /api}
    breaker: {enabled: true}
    fallback: {record: true}
events:
  sink: file
  file: {path: %q}
`, up.URL, path)
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	gw, srv := startGateway(t, file)
	defer gw.Close()
	defer srv.Close()
	targets := []string{"/api", "/api/", "/api/v1/caf%C3%A9?q=a%20b", "/api/a;b/x"}
	send := func() {
		for _, target := range targets {
			resp, err := srv.Client().Post(srv.URL+target, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	send()
	live := up.received()
	if err := gw.ForceBreaker("api", "open", 0); err != nil {
		t.Fatal(err)
	}
	send()
	gw.Close() // the recorder's events are written
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "api", "--rate", "1000/s")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	replayed := up.received()[len(live):]
	if len(live) != len(targets) || len(replayed) != len(targets) {
		t.Fatalf("%d live and %d replayed requests, want %d each; stdout:\n%s", len(live), len(replayed), len(targets), stdout)
	}
	for i := range targets {
		if live[i].uri != replayed[i].uri {
			t.Errorf("%s: the gateway sent %s, replay %s", targets[i], live[i].uri, replayed[i].uri)
		}
	}
}

// TestReplayOversized: an event whose body is longer than events.max_body
// cannot have been recorded by this configuration and is skipped; an entry
// longer than any event of it is passed over without being read whole, said
// at its byte offset; the events after them are sent.
func TestReplayOversized(t *testing.T) {
	t.Parallel()
	up := newReplayUpstream(t, http.StatusOK)
	big := replayEvent(1)
	big.ID, big.Body = "big", bytes.Repeat([]byte("x"), 1025)
	huge := replayEvent(2)
	huge.ID = "huge"
	huge.Headers["X-Pad"] = []string{strings.Repeat("y", 2<<20)}
	hugeLine, _ := json.Marshal(huge)
	after := replayEvent(3)
	after.ID = "after"
	path := writeEventLines(t, big, string(hugeLine), after)
	file := replayConfig(t, up.URL, fmt.Sprintf("  sink: file\n  file: {path: %q}\n  max_body: 1024", path))

	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "1000/s")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 1, failed 0, skipped 1, collapsed 0, limited 0, remaining 0" ||
		!strings.Contains(stdout, "skipped event big: not a request this configuration records: a body of 1025 bytes, and events.max_body is 1024") {
		t.Errorf("summary %q; stdout:\n%s", m, stdout)
	}
	offset := fmt.Sprint(strings.Index(mustRead(t, path), string(hugeLine)))
	if !strings.Contains(stderr, "passing over an entry longer than any this configuration records") ||
		!strings.Contains(stderr, `"offset":`+offset) || strings.Contains(stderr, `"where"`) {
		t.Errorf("the huge entry at offset %s is not said as such; stderr:\n%s", offset, stderr)
	}
	if ids := idsOf(up.received()); len(ids) != 1 || ids[0] != "after" {
		t.Errorf("the upstream got %v, want [after]", ids)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReplayForgedKeys: a key value that the recorded request contradicts
// is skipped: a header:NAME value that is not the recorded header's, a
// fallback key recorded for a request that carried its key, and a jwt:
// claim that is not the recorded token's (or whose token does not verify).
// A token that has expired since the event was recorded still counts.
func TestReplayForgedKeys(t *testing.T) {
	t.Parallel()
	key, err := jwtsign.Generate("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := key.PublicJWKS()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, jwks, 0o644); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	token := func(sub string, exp time.Time) string {
		tok, err := key.Sign(map[string]any{"sub": sub, "exp": exp.Unix()})
		if err != nil {
			t.Fatal(err)
		}
		return "Bearer " + tok
	}
	other, err := jwtsign.Generate("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := other.Sign(map[string]any{"sub": "u5", "exp": time.Now().Add(time.Hour).Unix()})

	ev := func(id string, keys map[string][]string, headers map[string][]string, fallback ...string) *events.Event {
		return &events.Event{
			ID: id, Type: events.TypeBreakerRejected, Route: "lucky-meal", Time: at,
			Method: "POST", Path: "/api/activities/lucky-meal/receive",
			Keys: keys, Headers: headers, Fallback: fallback,
		}
	}
	ok := []*events.Event{
		ev("user-ok", map[string][]string{"user": {"u1"}, "sub": {"s1"}}, map[string][]string{"X-User-Id": {"u1"}, "Authorization": {token("s1", time.Now().Add(time.Hour))}}),
		// Expired after it was recorded: the gateway verified it then.
		ev("expired-since", map[string][]string{"user": {"u2"}, "sub": {"s2"}}, map[string][]string{"X-User-Id": {"u2"}, "Authorization": {token("s2", at.Add(time.Minute))}}),
		// Nothing recorded to check the values against.
		ev("unchecked", map[string][]string{"user": {"u3"}, "sub": {"s3"}}, nil),
		ev("fallback-ok", map[string][]string{"user": {"10.0.0.1"}, "sub": {"s4"}}, map[string][]string{"Authorization": {token("s4", time.Now().Add(time.Hour))}}, "user"),
	}
	forged := []*events.Event{
		ev("header-forged", map[string][]string{"user": {"u1"}, "sub": {"s1"}}, map[string][]string{"X-User-Id": {"admin"}}),
		ev("fallback-forged", map[string][]string{"user": {"10.0.0.1"}, "sub": {"s1"}}, map[string][]string{"X-User-Id": {"u6"}}, "user"),
		ev("claim-forged", map[string][]string{"user": {"u7"}, "sub": {"admin"}}, map[string][]string{"Authorization": {token("s7", time.Now().Add(time.Hour))}}),
		ev("token-forged", map[string][]string{"user": {"u8"}, "sub": {"u5"}}, map[string][]string{"Authorization": {"Bearer " + stranger}}),
		ev("expired-before", map[string][]string{"user": {"u9"}, "sub": {"s9"}}, map[string][]string{"Authorization": {token("s9", at.Add(-time.Hour))}}),
	}
	var lines []any
	for _, e := range append(append([]*events.Event{}, ok...), forged...) {
		lines = append(lines, e)
	}
	path := writeEventLines(t, lines...)
	up := newReplayUpstream(t, http.StatusOK)
	file := filepath.Join(dir, "floodgate.yaml")
	cfg := fmt.Sprintf(`
admin: {listen: ""}
server:
  jwt: {jwks_file: %q}
routes:
  - id: lucky-meal
    match: {path: /api/activities/lucky-meal/receive, methods: [POST]}
    upstream: {targets: ["%s"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], fallback: [ip], rate: 1/10s}
      - {name: sub, key: ["jwt:sub"], on_missing: allow, rate: 1/10s}
    breaker: {enabled: true}
    fallback: {record: true}
events:
  sink: file
  file: {path: %q}
  headers: [X-User-Id, Authorization]
`, jwksFile, up.URL, path)
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--all"}, {}} {
		stdout, stderr, code := replayIn(t, append([]string{"-c", file, "--route", "lucky-meal", "--rate", "1000/s", "--dry-run"}, args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d; stderr:\n%s", args, code, stderr)
		}
		for _, e := range ok {
			if !strings.Contains(stdout, "would send event "+e.ID+": ") {
				t.Errorf("%v: event %s would not be sent:\n%s", args, e.ID, stdout)
			}
		}
		for _, e := range forged {
			if !strings.Contains(stdout, "would skip event "+e.ID+": not a request this configuration records: limit ") {
				t.Errorf("%v: event %s would not be skipped as forged:\n%s", args, e.ID, stdout)
			}
		}
	}
	stdout, stderr, code := replayIn(t, "-c", file, "--route", "lucky-meal", "--rate", "1000/s")
	if m := summaryLine.FindString(stdout); code != exitOK || m != fmt.Sprintf("succeeded %d, failed 0, skipped %d, collapsed 0, limited 0, remaining 0", len(ok), len(forged)) {
		t.Errorf("exit %d, summary %q; stdout:\n%s\nstderr:\n%s", code, m, stdout, stderr)
	}
	if n := len(up.received()); n != len(ok) {
		t.Errorf("the upstream got %d requests, want %d", n, len(ok))
	}
}
