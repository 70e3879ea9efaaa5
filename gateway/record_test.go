package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRecordRefused(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "events.jsonl")
	h := newHarness(t, `
admin: {listen: ""}
events:
  sink: file
  file: {path: "`+file+`"}
  max_body: 8
  headers: [X-User-Id]
  audit: rejected
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: user, key: ["header:X-User-Id"], rate: 1/min}]
    breaker: {enabled: true}
    fallback: {record: true, message: "Busy; your entry is recorded"}
`, up)
	drain(h.do("POST", "/coupon?x=1", map[string]string{"X-User-Id": "u1"}, nil))
	answerOf(t, h.do("POST", "/coupon", map[string]string{"X-User-Id": "u1"}, nil), 429, "rate_limited")
	if err := h.gw.ForceBreaker("coupon", "open", 0); err != nil {
		t.Fatal(err)
	}
	m := answerOf(t, h.do("POST", "/coupon?x=1", map[string]string{"X-User-Id": "u2", "Cookie": "secret"}, strings.NewReader("0123456789")), 503, "service_unavailable")
	if m["recorded"] != true {
		t.Fatalf("answer %v: want recorded true once the event is durable", m)
	}
	var lines []map[string]any
	deadline := time.Now().Add(3 * time.Second)
	for len(lines) < 2 && time.Now().Before(deadline) {
		data, _ := os.ReadFile(file)
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var ev map[string]any
			if json.Unmarshal([]byte(l), &ev) == nil {
				lines = append(lines, ev)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(lines) != 2 {
		t.Fatalf("%d events in the file, want the audit one and the breaker one", len(lines))
	}
	// The audit event is recorded in the background (no answer waits for
	// it), so it may reach the file after the breaker's.
	audit, ev := lines[0], lines[1]
	if audit["type"] == "breaker_rejected" {
		audit, ev = ev, audit
	}
	if audit["type"] != "rate_limited" || audit["limit"] != "user" {
		t.Errorf("audit event %v", audit)
	}
	if ev["type"] != "breaker_rejected" || ev["route"] != "coupon" || ev["path"] != "/coupon" || ev["query"] != "x=1" || ev["truncated"] != true {
		t.Errorf("breaker event %v", ev)
	}
	if hdr, _ := json.Marshal(ev["headers"]); !strings.Contains(string(hdr), "u2") || strings.Contains(string(hdr), "secret") {
		t.Errorf("headers %s: only the configured ones are kept", hdr)
	}
	if keys, _ := json.Marshal(ev["keys"]); !strings.Contains(string(keys), `"user":["u2"]`) {
		t.Errorf("keys %s", keys)
	}
}

// TestRecordWhileSinkDown: a sink that does not answer leaves the gateway
// serving; events wait in the spool, "recorded" is still true (the spool is
// durable), and Degraded says why.
func TestRecordWhileSinkDown(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	h := newHarness(t, `
admin: {listen: ""}
events:
  sink: redis
  redis: {addrs: ["no-such-host.invalid:6379"], stream: "fg:events"}
  spool_dir: "`+t.TempDir()+`"
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"]}
    breaker: {enabled: true}
    fallback: {record: true}
`, up)
	if err := h.gw.ForceBreaker("coupon", "open", 0); err != nil {
		t.Fatal(err)
	}
	m := answerOf(t, h.do("GET", "/coupon", nil, nil), 503, "service_unavailable")
	if m["recorded"] != true {
		t.Fatalf("answer %v: the spool accepted the event", m)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.gw.Degraded() == "" {
		if time.Now().After(deadline) {
			t.Fatal("Degraded says nothing while the sink is unreachable")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAuditAll: with events.audit all, a request forwarded to the upstream
// is an admitted event, and one that the limits admitted but protection
// then turned away is its overloaded event alone: no admitted event
// shares its request id, so that a replay never takes it for an admission
// of its user's.
func TestAuditAll(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	file := filepath.Join(t.TempDir(), "events.jsonl")
	h := newHarness(t, `
admin: {listen: ""}
events:
  sink: file
  file: {path: "`+file+`"}
  audit: all
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: user, key: ["header:X-User-Id"], algorithm: token_bucket, rate: 1/4s, burst: 1, queue: 4s}]
    fallback: {record: true}
    protect: {min: 0.5, max: 0.5}
`, up)
	send := func(user, id string, status int) {
		t.Helper()
		resp := h.do("GET", "/coupon", map[string]string{"X-User-Id": user, "X-Request-Id": id}, nil)
		drain(resp)
		if resp.StatusCode != status {
			t.Errorf("%s: status %d, want %d", id, resp.StatusCode, status)
		}
	}
	// Protection admits one request every 2 s, u1's bucket one every 4 s.
	// r1 passes at 0. r2, u1's, finds room at 2.1 s but waits in the
	// bucket's queue for its token, due at 4 s; meanwhile r3, u2's, takes
	// the room at 2.6 s, so at 4 s protection turns r2 away.
	start := time.Now()
	send("u1", "r1", 200)
	time.Sleep(time.Until(start.Add(2100 * time.Millisecond)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		send("u1", "r2", 503)
	}()
	time.Sleep(time.Until(start.Add(2600 * time.Millisecond)))
	send("u2", "r3", 200)
	<-done
	want := map[string]string{"r1": "admitted", "r2": "overloaded", "r3": "admitted"}
	var got map[string][]string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		data, _ := os.ReadFile(file)
		got = map[string][]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var ev struct {
				Type      string `json:"type"`
				RequestID string `json:"request_id"`
			}
			if json.Unmarshal([]byte(l), &ev) == nil {
				got[ev.RequestID] = append(got[ev.RequestID], ev.Type)
			}
		}
		if len(got) >= len(want) {
			break
		}
	}
	for id, typ := range want {
		if len(got[id]) != 1 || got[id][0] != typ {
			t.Errorf("request %s: events %v, want one %s", id, got[id], typ)
		}
	}
	if len(got) != len(want) {
		t.Errorf("events by request %v, want those of %d requests", got, len(want))
	}
}
