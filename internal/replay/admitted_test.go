package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/limit"
)

// admittedRig is a route with a limit of one request per user per 10 s,
// its events in a file, and an upstream that notes whose requests came.
type admittedRig struct {
	cfg  *config.Config
	file string
	base time.Time // on a window edge, an hour ago

	mu   sync.Mutex
	sent []string // the X-User-Id of each request the upstream had
}

func newAdmittedRig(t *testing.T) *admittedRig {
	t.Helper()
	return newAdmittedRigRate(t, "1/10s")
}

// newAdmittedRigRate is newAdmittedRig with the user limit's rate.
func newAdmittedRigRate(t *testing.T, rate string) *admittedRig {
	t.Helper()
	h := &admittedRig{
		file: filepath.Join(t.TempDir(), "events.jsonl"),
		base: time.Now().Add(-time.Hour).Truncate(time.Minute),
	}
	up := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.sent = append(h.sent, r.Header.Get("X-User-Id"))
		h.mu.Unlock()
	}))
	t.Cleanup(up.Close)
	var err error
	h.cfg, err = config.Parse("test.yaml", []byte(`
admin: {listen: ""}
events:
  sink: file
  file: {path: "`+h.file+`"}
  headers: [X-User-Id]
  audit: all
routes:
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["`+up.URL+`"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: `+rate+`}
    breaker: {enabled: true}
    fallback: {record: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// record appends to the events file an event of type typ of user on
// route, at offset at from h.base, and returns its id.
func (h *admittedRig) record(t *testing.T, typ, route, user string, at time.Duration) string {
	t.Helper()
	e := &events.Event{
		ID: events.NewID(), Time: h.base.Add(at), Type: typ, Route: route,
		Method: "POST", Path: "/coupon",
		Keys:    map[string][]string{"user": {user}},
		Headers: map[string][]string{"X-User-Id": {user}},
	}
	h.write(t, e)
	return e.ID
}

// write appends e to the events file.
func (h *admittedRig) write(t *testing.T, e *events.Event) {
	t.Helper()
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(h.file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(data, '\n')); err != nil {
		t.Fatal(err)
	}
}

// run replays the route and returns its output.
func (h *admittedRig) run(t *testing.T, all, dry bool) string {
	t.Helper()
	var out, errs bytes.Buffer
	err := Run(context.Background(), Options{
		Config: h.cfg, Route: "coupon", Rate: limit.Rate{Count: 1000, Period: time.Second}, Parallel: 1,
		All: all, DryRun: dry, Stdout: &out, Stderr: &errs,
	})
	if err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errs.String())
	}
	return out.String()
}

func (h *admittedRig) sentTo() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sent)
}

// lastLine is the summary of out.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// TestReplayCountsAdmissions: a user admitted live and then recorded while
// the breaker was open in the same window has had that window's grant: the
// recorded events are collapsed, and nothing of theirs is sent. Other
// users', and another route's admissions, change nothing.
func TestReplayCountsAdmissions(t *testing.T) {
	t.Parallel()
	h := newAdmittedRig(t)
	h.record(t, events.TypeAdmitted, "coupon", "u1", 200*time.Millisecond)
	h.record(t, events.TypeAdmitted, "other", "u2", 300*time.Millisecond)
	first := h.record(t, events.TypeBreakerRejected, "coupon", "u1", 3*time.Second)
	h.record(t, events.TypeBreakerRejected, "coupon", "u2", 4*time.Second)
	h.record(t, events.TypeOverloaded, "coupon", "u1", 5*time.Second)

	out := h.run(t, false, false)
	if got, want := lastLine(out), "succeeded 1, failed 0, skipped 0, collapsed 2, limited 0, remaining 0"; got != want {
		t.Errorf("summary %q, want %q\n%s", got, want, out)
	}
	if !strings.Contains(out, "counted 1 recorded admissions\n") {
		t.Errorf("the run does not say it counted the admission:\n%s", out)
	}
	if !strings.Contains(out, "collapsed event "+first+": limit user would have refused it when it was recorded (a recorded admission of its key took that window)") {
		t.Errorf("the run does not say the first event collapsed on the admission:\n%s", out)
	}
	if got := h.sentTo(); !slices.Equal(got, []string{"u2"}) {
		t.Errorf("the upstream had requests of %v, want u2's alone", got)
	}
	// All done, the admissions too.
	if got, want := lastLine(h.run(t, false, false)), "succeeded 0, failed 0, skipped 0, collapsed 0, limited 0, remaining 0"; got != want {
		t.Errorf("a second run: %q, want %q", got, want)
	}
}

// TestReplayAdmissionOtherWindow: an admission in an earlier window leaves
// the user's grant of a later one.
func TestReplayAdmissionOtherWindow(t *testing.T) {
	t.Parallel()
	h := newAdmittedRig(t)
	h.record(t, events.TypeAdmitted, "coupon", "u1", 200*time.Millisecond)
	h.record(t, events.TypeBreakerRejected, "coupon", "u1", 12*time.Second)
	out := h.run(t, false, false)
	if got, want := lastLine(out), "succeeded 1, failed 0, skipped 0, collapsed 0, limited 0, remaining 0"; got != want {
		t.Errorf("summary %q, want %q\n%s", got, want, out)
	}
	if got := h.sentTo(); !slices.Equal(got, []string{"u1"}) {
		t.Errorf("the upstream had requests of %v, want u1's", got)
	}
}

// TestReplayAdmissionsDryRun: a dry run counts the admissions as the run
// does and consumes nothing, them included; the summary's shape and
// counts are of the events to replay alone.
func TestReplayAdmissionsDryRun(t *testing.T) {
	t.Parallel()
	h := newAdmittedRig(t)
	h.record(t, events.TypeAdmitted, "coupon", "u1", 200*time.Millisecond)
	first := h.record(t, events.TypeBreakerRejected, "coupon", "u1", 3*time.Second)
	h.record(t, events.TypeBreakerRejected, "coupon", "u2", 4*time.Second)

	for range 2 {
		out := h.run(t, false, true)
		if got, want := lastLine(out), "dry run: of 2 events pending, would send 1, fail 0, skip 0, collapse 1, limit 0; nothing sent or marked done"; got != want {
			t.Errorf("dry run: %q, want %q\n%s", got, want, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 2 || lines[len(lines)-2] != "counted 1 recorded admissions" {
			t.Errorf("the dry run does not say it counted the admission before its summary:\n%s", out)
		}
		if !strings.Contains(out, "would collapse event "+first+": limit user would have refused it when it was recorded (a recorded admission of its key took that window)") {
			t.Errorf("the dry run does not say the event collapsed on the admission:\n%s", out)
		}
	}
	if got := h.sentTo(); len(got) != 0 {
		t.Fatalf("a dry run sent %v", got)
	}

	// Nothing was consumed: the run counts the admission again.
	out := h.run(t, false, false)
	if got, want := lastLine(out), "succeeded 1, failed 0, skipped 0, collapsed 1, limited 0, remaining 0"; got != want || !strings.Contains(out, "counted 1 recorded admissions\n") {
		t.Errorf("the run after the dry runs: %q, want %q and the admission counted\n%s", got, want, out)
	}
	if got := h.sentTo(); !slices.Equal(got, []string{"u2"}) {
		t.Errorf("the upstream had requests of %v, want u2's alone", got)
	}
}

// TestReplayAllIgnoresAdmissions: --all sends every event, whatever was
// admitted, and counts no admission.
func TestReplayAllIgnoresAdmissions(t *testing.T) {
	t.Parallel()
	h := newAdmittedRig(t)
	h.record(t, events.TypeAdmitted, "coupon", "u1", 200*time.Millisecond)
	h.record(t, events.TypeBreakerRejected, "coupon", "u1", 3*time.Second)
	h.record(t, events.TypeBreakerRejected, "coupon", "u2", 4*time.Second)
	out := h.run(t, true, false)
	if got, want := lastLine(out), "succeeded 2, failed 0, skipped 0, collapsed 0, limited 0, remaining 0"; got != want {
		t.Errorf("--all: %q, want %q\n%s", got, want, out)
	}
	if strings.Contains(out, "admission") {
		t.Errorf("--all counted admissions:\n%s", out)
	}
	if got := h.sentTo(); !slices.Equal(got, []string{"u1", "u2"}) {
		t.Errorf("--all: the upstream had %v, want u1's and u2's", got)
	}
}

// TestReplayRemainingWithoutAdmissions: a run stopped early counts as
// remaining the events to replay alone, not the admissions among them.
func TestReplayRemainingWithoutAdmissions(t *testing.T) {
	t.Parallel()
	h := newAdmittedRig(t)
	h.cfg.Routes[0].Upstream.Targets[0].Host = deadHost(t) // no answer: the run stops at the first send
	h.record(t, events.TypeAdmitted, "coupon", "u1", 200*time.Millisecond)
	h.record(t, events.TypeBreakerRejected, "coupon", "u2", time.Second)
	h.record(t, events.TypeAdmitted, "coupon", "u3", 2*time.Second)
	h.record(t, events.TypeBreakerRejected, "coupon", "u3", 3*time.Second)
	var out, errs bytes.Buffer
	err := Run(context.Background(), Options{
		Config: h.cfg, Route: "coupon", Rate: limit.Rate{Count: 1000, Period: time.Second}, Parallel: 1,
		Stdout: &out, Stderr: &errs,
	})
	if err != ErrFailed {
		t.Fatalf("Run = %v, want ErrFailed\n%s\n%s", err, out.String(), errs.String())
	}
	if got, want := lastLine(out.String()), "succeeded 0, failed 0, skipped 0, collapsed 0, limited 0, remaining 2"; got != want {
		t.Errorf("summary %q, want %q\n%s", got, want, out.String())
	}
}

// deadHost is a "host:port" nothing listens on.
func deadHost(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.NotFoundHandler())
	host := srv.Listener.Addr().String()
	srv.Close()
	return host
}

// TestReplayAdmissionsChecked: an admission counts once however many
// copies of it the sink holds, and only if the gateway can have recorded
// it for the route; one it cannot is passed over, and said so.
func TestReplayAdmissionsChecked(t *testing.T) {
	t.Parallel()
	h := newAdmittedRigRate(t, "2/10s")
	// u1: one admission, delivered twice; one grant is left of the window.
	a := &events.Event{
		ID: events.NewID(), Time: h.base.Add(100 * time.Millisecond), Type: events.TypeAdmitted, Route: "coupon",
		Method: "POST", Path: "/coupon",
		Keys: map[string][]string{"user": {"u1"}}, Headers: map[string][]string{"X-User-Id": {"u1"}},
	}
	h.write(t, a)
	h.write(t, a)
	// u2: two admissions of a path the route does not take, and a key
	// value its recorded header contradicts: neither counts.
	forged := *a
	forged.ID, forged.Path, forged.Keys, forged.Headers = events.NewID(), "/elsewhere",
		map[string][]string{"user": {"u2"}}, map[string][]string{"X-User-Id": {"u2"}}
	h.write(t, &forged)
	contradicted := forged
	contradicted.ID, contradicted.Path, contradicted.Headers = events.NewID(), "/coupon", map[string][]string{"X-User-Id": {"u9"}}
	h.write(t, &contradicted)
	h.record(t, events.TypeBreakerRejected, "coupon", "u1", time.Second)
	h.record(t, events.TypeBreakerRejected, "coupon", "u1", 2*time.Second)
	h.record(t, events.TypeBreakerRejected, "coupon", "u2", 3*time.Second)
	h.record(t, events.TypeBreakerRejected, "coupon", "u2", 4*time.Second)

	out := h.run(t, false, false)
	if got, want := lastLine(out), "succeeded 3, failed 0, skipped 0, collapsed 1, limited 0, remaining 0"; got != want {
		t.Errorf("summary %q, want %q\n%s", got, want, out)
	}
	if !strings.Contains(out, "counted 1 recorded admissions\n") {
		t.Errorf("the run does not count the admission once:\n%s", out)
	}
	for _, id := range []string{forged.ID, contradicted.ID} {
		if !strings.Contains(out, "passed over admission "+id+": ") {
			t.Errorf("admission %s is not said to be passed over:\n%s", id, out)
		}
	}
	if got := h.sentTo(); !slices.Equal(got, []string{"u1", "u2", "u2"}) {
		t.Errorf("the upstream had requests of %v, want u1's once and u2's twice", got)
	}
}
