package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/events"
)

// TestReplayCountsAdmissions, end to end: u7 is admitted live, then
// retries twice against the open breaker in the same window of user:
// 1/10s; u8 retries once. With events.audit all the gateway records u7's
// admission, and replay, in a later window (the memory store's counters
// are the replay's own, fresh), collapses both of u7's events on it and
// sends u8's alone. Without it replay does not know u7 was admitted and
// sends u7's first retry too: a second grant for that window.
func TestReplayCountsAdmissions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		audit   string
		summary string
		users   []string // whose events the upstream gets from the replay
	}{
		{"all", "succeeded 1, failed 0, skipped 0, collapsed 2, limited 0, remaining 0", []string{"u8"}},
		{"none", "succeeded 2, failed 0, skipped 0, collapsed 1, limited 0, remaining 0", []string{"u7", "u8"}},
	} {
		t.Run("audit "+tt.audit, func(t *testing.T) {
			t.Parallel()
			up := newReplayUpstream(t, http.StatusOK)
			path := filepath.Join(t.TempDir(), "events.jsonl")
			file := limitsConfig(t, up.URL, path, "", "", userLimit)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			data = []byte(strings.Replace(string(data), "  headers: [X-User-Id]\n", "  headers: [X-User-Id]\n  audit: "+tt.audit+"\n", 1))
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			gw, srv := startGateway(t, file)

			// What follows takes far less than 5 s: one window.
			awayFromEdge(10*time.Second, 5*time.Second)
			if code := post(t, srv.URL, "u7"); code != http.StatusOK {
				t.Fatalf("u7's live request: status %d", code)
			}
			if err := gw.ForceBreaker("lucky-meal", "open", 0); err != nil {
				t.Fatal(err)
			}
			for _, user := range []string{"u7", "u8", "u7"} {
				if code := post(t, srv.URL, user); code != http.StatusServiceUnavailable {
					t.Fatalf("%s through the open breaker: status %d", user, code)
				}
			}
			srv.Close()
			gw.Close() // delivers the audited admission, which was not waited for

			var rejected, admitted []*events.Event
			for _, e := range fileEventsOf(t, path) {
				switch e.Type {
				case events.TypeBreakerRejected:
					rejected = append(rejected, e)
				case events.TypeAdmitted:
					admitted = append(admitted, e)
				}
			}
			wantAdmitted := map[string]int{"all": 1, "none": 0}[tt.audit]
			if len(rejected) != 3 || len(admitted) != wantAdmitted {
				t.Fatalf("%d breaker events and %d admissions recorded, want 3 and %d", len(rejected), len(admitted), wantAdmitted)
			}
			live := len(up.received()) // u7's live request

			// The real binary, as an operator runs it: first a dry run.
			stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s", "--dry-run")
			if code != exitOK {
				t.Fatalf("replay --dry-run: exit %d; stderr:\n%s", code, stderr)
			}
			collapse := strings.Split(tt.summary, ", ")[3] // "collapsed N"
			wantDry := "dry run: of 3 events pending, would send " + map[string]string{"all": "1", "none": "2"}[tt.audit] +
				", fail 0, skip 0, collapse " + strings.TrimPrefix(collapse, "collapsed ") + ", limit 0; nothing sent or marked done"
			if !strings.Contains(stdout, wantDry+"\n") {
				t.Errorf("dry run, want %q:\n%s", wantDry, stdout)
			}
			if counted := strings.Contains(stdout, "counted 1 recorded admissions\n"); counted != (tt.audit == "all") {
				t.Errorf("dry run: says it counted an admission: %v:\n%s", counted, stdout)
			}

			stdout, stderr, code = floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s")
			if code != exitOK {
				t.Fatalf("replay: exit %d; stderr:\n%s", code, stderr)
			}
			if m := summaryLine.FindString(stdout); m != tt.summary {
				t.Errorf("summary %q, want %q; stdout:\n%s", m, tt.summary, stdout)
			}
			if tt.audit == "all" && !strings.Contains(stdout, "collapsed event "+rejected[0].ID+": limit user would have refused it when it was recorded (a recorded admission of its key took that window)") {
				t.Errorf("u7's first event is not said to be collapsed on the admission:\n%s", stdout)
			}
			var users []string
			for _, r := range up.received()[live:] {
				users = append(users, r.header.Get("X-User-Id"))
			}
			if strings.Join(users, ",") != strings.Join(tt.users, ",") {
				t.Errorf("replay sent the events of %v, want %v", users, tt.users)
			}
		})
	}
}
