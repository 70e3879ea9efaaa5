package demo

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/rehearse"
)

// The copy the binary embeds is the example, byte for byte.
func TestDemoFlashSaleIsTheExample(t *testing.T) {
	example, err := os.ReadFile("../../examples/flash-sale.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(flashSaleYAML, example) {
		t.Errorf("internal/demo/flash-sale.yaml differs from examples/flash-sale.yaml: copy the example over it")
	}
}

// The demo runs the example's limits, breaker thresholds, fallback and
// responses, and changes only what one process needs.
func TestDemoConfigKeepsTheExample(t *testing.T) {
	example, err := config.Parse("flash-sale.yaml", flashSaleYAML)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		redis      string
		protectMin float64
	}{{"", 0}, {"127.0.0.1:6390", 0}, {"", 15}} {
		redis := c.redis
		data, err := demoConfigFile(flashSaleYAML, demoOverrides{
			listen: "127.0.0.1:18080", admin: "127.0.0.1:19090", upstream: "http://127.0.0.1:19000",
			jwksFile: "/tmp/demo/jwks.json", eventsFile: "/tmp/demo/events.jsonl", redis: redis,
			window: 5 * time.Second, openFor: 2 * time.Second, protectMin: c.protectMin,
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := config.Parse("demo.yaml", data)
		if err != nil {
			t.Fatalf("redis %q: %v\n%s", redis, err, data)
		}
		r, want := got.Routes[0], example.Routes[0]
		if r.ID != demoRoute || want.ID != demoRoute {
			t.Fatalf("routes %s, %s; want %s", r.ID, want.ID, demoRoute)
		}
		same := func(what string, a, b any) {
			t.Helper()
			if !reflect.DeepEqual(a, b) {
				t.Errorf("redis %q: %s = %+v, want the example's %+v", redis, what, a, b)
			}
		}
		same("global_limits", withoutLines(got.GlobalLimits), withoutLines(example.GlobalLimits))
		same("limits", withoutLines(r.Limits), withoutLines(want.Limits))
		same("match", r.Match, want.Match)
		same("fallback", r.Fallback, want.Fallback)
		same("responses", got.Responses, example.Responses)
		same("trusted_proxies", got.Server.TrustedProxies, example.Server.TrustedProxies)
		same("jwt issuer and audience", [2]string{got.Server.JWT.Issuer, got.Server.JWT.Audience},
			[2]string{example.Server.JWT.Issuer, example.Server.JWT.Audience})
		same("events headers", got.Events.Headers, example.Events.Headers)
		same("on_error", got.Store.OnError, example.Store.OnError)
		b, wb := r.Breaker, want.Breaker
		same("breaker timings", [2]time.Duration{b.Window, b.OpenFor}, [2]time.Duration{5 * time.Second, 2 * time.Second})
		b.Window, b.OpenFor = wb.Window, wb.OpenFor
		same("breaker", b, wb)
		if r.Protect == nil || want.Protect == nil {
			t.Fatalf("redis %q: protect %v, the example's %v; want the example's", redis, r.Protect, want.Protect)
		}
		p := *r.Protect
		if c.protectMin > 0 {
			same("protect.min", p.Min, c.protectMin)
			p.Min = want.Protect.Min
		}
		same("protect", p, *want.Protect)

		same("listen", [2]string{got.Server.Listen, got.Admin.Listen}, [2]string{"127.0.0.1:18080", "127.0.0.1:19090"})
		same("targets", r.Upstream.Targets[0].String(), "http://127.0.0.1:19000")
		same("jwks_file", got.Server.JWT.JWKSFile, "/tmp/demo/jwks.json")
		same("events", [2]string{string(got.Events.Sink), got.Events.File.Path}, [2]string{"file", "/tmp/demo/events.jsonl"})
		wantStore := config.StoreMemory
		if redis != "" {
			wantStore = config.StoreRedis
			same("redis addrs", got.Store.Redis.Addrs, []string{redis})
		}
		same("store", got.Store.Type, wantStore)
	}
}

// withoutLines copies limits with their line numbers cleared: the demo's
// file is the example's with a comment on top, so its lines are others.
func withoutLines(ls []*config.Limit) []config.Limit {
	out := make([]config.Limit, len(ls))
	for i, l := range ls {
		out[i] = *l
		out[i].Line = 0
	}
	return out
}

// testScript has every phase of the default script, in 13 seconds, at
// rates that leave most of a busy machine's cores to the rest of the
// tests: the surge's peak (testPeak) is above what the api limit admits,
// so that refused users retry, but the warm-up and what it settles at are
// a fifth of the default's or less. The coupon API slows down to three
// quarters of what the crowd then sends: the quarter it fails stays under
// the breaker's failure_rate, as in the default script. That is under
// protection's min in the example: protectMin is low enough for the limit
// to follow the API down, and high enough for the breaker to see
// min_calls in its window when the limit is at it, in the outage.
var testScript = Script{
	warmup: 40, opens: time.Second, plateau: 40,
	slows: 3 * time.Second, slowFor: 3 * time.Second, slowCapacity: 30,
	outage: 9 * time.Second, outageFor: 2 * time.Second,
	window: 2 * time.Second, openFor: 2 * time.Second,
	protectMin: 15,
	replayRate: limit.Rate{Count: 250, Period: time.Second},
}

// testDuration is the traffic's length in the tests: testScript's
// MinDuration.
var testDuration = testScript.MinDuration()

// testPeak is the surge's peak in the tests: the api limit admits 440 in
// a second.
const testPeak = 500

// testRecordWait is how long the tests' demo lets a recorded request wait
// for its event to be durable, in place of a request's 100 ms: a machine
// whose cores the other tests keep busy may take longer to write and
// fsync, and the check is that the answer says what was recorded, not
// how fast the disk is. It is under the crowd's 5 s per attempt.
const testRecordWait = 2 * time.Second

// replaySent reads how many requests a replay sent from its summary line:
// those that succeeded and those that failed; false when out has none.
func replaySent(out string) (int64, bool) {
	m := replaySummaryRE.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	var ok, failed int64
	fmt.Sscan(m[1], &ok)
	fmt.Sscan(m[2], &failed)
	return ok + failed, true
}

var replaySummaryRE = regexp.MustCompile(`succeeded (\d+), failed (\d+)`)

// checkDemo asserts what every run of the demo must show.
func checkDemo(t *testing.T, res *result, out string, s Script) {
	t.Helper()
	surge429 := int64(0)
	for _, r := range res.rows {
		if r.T >= int(s.opens/time.Second) && r.T < int(s.outage/time.Second) {
			surge429 += r.TooMany
		}
	}
	// The surge is above what the api limit admits in a second, so users
	// are refused, and retry. A machine too busy to keep up (two cores,
	// -race, the other tests) delivers it to the limits late and spread
	// out, and they then rightly refuse nobody: what the limits owe is
	// checked below, by what reached the API, whatever the pace.
	if surge429 == 0 {
		t.Logf("no 429 during the surge: this machine did not deliver it at a rate the api limit refuses")
	}
	// OPEN, then HALF_OPEN, then CLOSED.
	i := slices.Index(res.states, "OPEN")
	j := i + 1 + slices.Index(res.states[i+1:], "HALF_OPEN")
	if i < 0 || j <= i || !slices.Contains(res.states[j+1:], "CLOSED") {
		t.Errorf("breaker states %v, want OPEN, then HALF_OPEN, then CLOSED", res.states)
	}
	// A fallback says "recorded": false when its event was not durable
	// within its wait (testRecordWait here): one of the requests sent
	// while the breaker was open must say true.
	if !slices.ContainsFunc(res.probes, probeAnswer.recorded) {
		t.Errorf("while open: %v, want a 503 with \"recorded\": true", res.probes)
	}
	if res.recorded == 0 {
		t.Errorf("no event recorded by the open breaker")
	}
	sent, ok := replaySent(res.replayOut)
	if res.replayErr != nil || !ok || sent == 0 {
		t.Errorf("replay: %v, sent %d (summary found: %v)\n%s", res.replayErr, sent, ok, res.replayOut)
	}
	// Replay sends one request for the retries of one user in a window
	// of the user limit, and the crowd's users retry at once: it sends
	// fewer than the open breaker and protection recorded.
	if recorded := res.recorded + res.recordedOverloaded; sent >= recorded {
		t.Errorf("replay sent %d of %d recorded events: the retries of each user were not collapsed", sent, recorded)
	}
	checkProtection(t, res, s)
	api := apiLimit(res.limits)
	if api == nil {
		t.Fatalf("no api limit in %v", res.limits)
	}
	// Of what reached the coupon API each second, what the gateway also
	// received in that second: those were admitted in it, so at most
	// rate + burst of them, however late the rest arrived. By arrival
	// alone, a machine too busy to keep up (two cores, -race, the crowd
	// in the same process) delivers admissions late and together, which
	// is this machine's doing, not the limit's.
	if len(res.within) == 0 {
		t.Errorf("nothing reached the coupon API")
	}
	for s, n := range res.within {
		if n > admitsPerSecond(api) {
			t.Errorf("second %d: %d requests the gateway received reached the coupon API in that second, above the %d the api limit admits in a second",
				s, n, admitsPerSecond(api))
		}
	}
	for _, want := range []string{
		"breaker timings shortened for the demo: window " + s.window.String() + ", open_for " + s.openFor.String(),
		"warm-up: ", "the sale opens at ", "the coupon API slows down at ", "the coupon API serves 500 requests/s again at ",
		"the coupon API fails at ", "the coupon API is back at ", "\nreplay: ",
		"  t   sent   new admitted  global user  api   ip   503 other   p50   p99  API limit breaker\n",
		"\nprotection's limit: 440 at first; ", `"recorded": true`, "tokens not accepted: 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	checkRows(t, res, out, s)
	if t.Failed() || testing.Verbose() {
		t.Logf("output:\n%s", out)
	}
}

// checkRows asserts that a row was printed for each second of the script,
// and kept, each within 100 columns.
func checkRows(t *testing.T, res *result, out string, s Script) {
	t.Helper()
	rows := 0
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 13 && strings.Trim(f[0]+f[1]+f[2], "0123456789") == "" {
			rows++
			if len(l) > maxWidth {
				t.Errorf("row wider than %d columns: %q", maxWidth, l)
			}
		}
	}
	if want := int(s.MinDuration()/time.Second) - 1; rows != len(res.rows) || rows < want {
		t.Errorf("%d rows printed, %d kept, want %d or more", rows, len(res.rows), want)
	}
}

// checkProtection asserts what protection must show: while the coupon API
// was slow its limit fell, by half at least, and it turned requests away.
// How low and how fast it goes back up depend on this machine's load (the
// crowd, the gateway and the API share its cores): they are logged, and
// tested against a real mock in gateway's and protect's tests.
//
// On a machine too busy to keep up, answers can come late enough for the
// breaker to open before or while the API is slow: then the breaker, not
// protection, holds the slow API off, and protection, with no answers to
// learn from, is not judged.
func checkProtection(t *testing.T, res *result, s Script) {
	t.Helper()
	slow, back, fails := int(s.slows/time.Second), int((s.slows+s.slowFor)/time.Second), int(s.outage/time.Second)
	for _, r := range res.rows {
		if r.T < back && r.breaker != "CLOSED" {
			t.Logf("the breaker was %s at %ds, before the API was back at %ds: the machine was too busy; protection is not judged", r.breaker, r.T, back)
			return
		}
	}
	start, low, lowAt, rose := math.NaN(), math.Inf(1), -1, false
	overloaded := int64(0)
	for _, r := range res.rows {
		if r.T == slow-1 {
			start = r.protect.limit
		}
		if r.T < slow || r.T >= fails {
			continue
		}
		if r.protect.limit < low {
			low, lowAt, rose = r.protect.limit, r.T, false
		} else if r.T >= back && r.protect.limit > low {
			rose = true
		}
		overloaded += r.protect.overloaded
	}
	t.Logf("protection's limit: %v before the API slowed down, %v at its lowest (%ds), the API serving %d/s; rose after: %v", start, low, lowAt, s.slowCapacity, rose)
	// Half, or the min it cannot go below: a loaded machine's delays may
	// have held the limit low already before the API slowed down.
	if !(low <= max(start/2, s.protectMin)) {
		t.Errorf("protection's limit while the API served %d/s: %v at its lowest, from %v before: want half at most, or its min %v", s.slowCapacity, low, start, s.protectMin)
	}
	if overloaded == 0 {
		t.Errorf("protection turned nobody away between %v and %v", s.slows, s.outage)
	}
}

// demoBuffer is a bytes.Buffer that one goroutine writes while another
// reads.
type demoBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *demoBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *demoBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestDemoScriptAndHold(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo's script takes 13 s or more; make check runs it")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out demoBuffer
	var res *result
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = run(ctx, &out, Options{Hold: true, Peak: testPeak, Duration: testDuration, Script: testScript, recordWait: testRecordWait})
	}()
	// --hold: the script is over, and everything still serves. The curl
	// line, written whole, ends what holding says (its token is signed
	// first, which a loaded machine takes its time over).
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "curl -i -X POST -H 'Authorization: Bearer ") {
		select {
		case <-done:
			t.Fatalf("demo returned before holding: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no \"holding\" line after 2 minutes:\n%s", out.String())
		}
	}
	held := out.String()
	for _, want := range []string{"  gateway     http://", "  dashboard   http://", "curl -i -X POST -H 'Authorization: Bearer "} {
		if !strings.Contains(held, want) {
			t.Errorf("holding, the output lacks %q", want)
		}
	}
	adminURL, gatewayURL := "", ""
	for _, l := range strings.Split(held, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "dashboard" {
			adminURL = strings.TrimSuffix(f[1], "/")
		} else if len(f) >= 2 && f[0] == "gateway" && strings.HasPrefix(f[1], "http://") {
			gatewayURL = f[1]
		}
	}
	time.Sleep(200 * time.Millisecond) // still serving a moment later, not just at the line
	for _, c := range []struct {
		method, url string
		want        int
	}{
		{http.MethodGet, adminURL + "/", http.StatusOK},
		{http.MethodGet, adminURL + "/admin/breakers", http.StatusOK},
		// No token: the user limit falls back to the client's address.
		{http.MethodPost, gatewayURL, http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, c.url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("holding: %s %s: %v", c.method, c.url, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("holding: %s %s: %d, want %d", c.method, c.url, resp.StatusCode, c.want)
		}
	}
	cancel()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(adminURL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("the dashboard still answers after the hold ended")
	}
	checkDemo(t, res, out.String(), testScript)
}

func TestDemoRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo's script takes 13 s or more; make check runs it")
	}
	srv := testredis.Start(t)
	var out bytes.Buffer
	res, err := run(context.Background(), &out, Options{Redis: srv.Addr(), Peak: testPeak, Duration: testDuration, Script: testScript, recordWait: testRecordWait})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "store redis at "+srv.Addr()) {
		t.Errorf("the output does not name the Redis store")
	}
	// The limits were decided in Redis: the ip limit's counters, which
	// live a minute, are there.
	if n := srv.Do(t, "EVAL", `return #redis.call("KEYS", ARGV[1])`, "0", "fg:{lucky-meal:ip:*"); n == "0" {
		t.Errorf("no ip limit key in redis: %s", n)
	}
	checkDemo(t, res, out.String(), testScript)
}

// A row stays within 100 columns on a machine so busy that the latency
// runs to tens of seconds and the breaker changes state three times in a
// second.
func TestDemoRowFits(t *testing.T) {
	t.Parallel()
	example, err := config.Parse("flash-sale.yaml", flashSaleYAML)
	if err != nil {
		t.Fatal(err)
	}
	_, limits := demoRouteOf(example)
	w := &breakerWatch{changes: []stateChange{{0, "CLOSED"}, {5100 * time.Millisecond, "HALF_OPEN"}, {5400 * time.Millisecond, "OPEN"}, {5900 * time.Millisecond, "HALF_OPEN"}}}
	if got := w.breakerIn(5); got != "..>HALF_OPEN" {
		t.Errorf("three states in a second: %q, want ..>HALF_OPEN", got)
	}
	if got := w.breakerIn(4); got != "CLOSED" {
		t.Errorf("no change in a second: %q, want the state it was in", got)
	}
	var out bytes.Buffer
	table := newDemoTable(&out, limits, true)
	table.header()
	table.row(demoRow{
		Second:  rehearse.Second{T: 105, Sent: 999999, OK: 99999999, Unavailable: 99999, Other: 99999, P50: 10183 * time.Millisecond, P99: 125 * time.Second},
		limited: []int64{999999, 9999, 9999, 9999}, newUsers: 99999, reached: 9999, protect: protectSecond{limit: 99999}, breaker: w.breakerIn(5),
	})
	// The widest breaker cell, in a row as wide.
	table.row(demoRow{
		Second:  rehearse.Second{T: 105, Sent: 999999, OK: 99999999, Unavailable: 99999, Other: 99999, P50: 10183 * time.Millisecond, P99: 125 * time.Second},
		limited: []int64{999999, 9999, 9999, 9999}, newUsers: 99999, reached: 9999, protect: protectSecond{limit: 99999}, breaker: "HALF_OPEN>CLOSED",
	})
	for _, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		if len(l) > maxWidth {
			t.Errorf("a line of %d columns: %q", len(l), l)
		}
	}
	// Each latency in 5 columns, near the bounds where a format would
	// round up to a sixth.
	for _, d := range []time.Duration{9949 * time.Microsecond, 9999 * time.Microsecond, 999 * time.Millisecond,
		9994 * time.Millisecond, 9999 * time.Millisecond, 99949 * time.Millisecond, 99999 * time.Millisecond, 9999 * time.Second} {
		if s := ms(d); len(s) > 5 {
			t.Errorf("ms(%v) = %q, more than 5 columns", d, s)
		}
	}
}

func TestDemoWrap(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("word ", 50) + "/a/path/" + strings.Repeat("x", 120) + " end"
	got := wrap(long, "  ")
	lines := strings.Split(got, "\n")
	for i, l := range lines {
		if i > 0 && !strings.HasPrefix(l, "  ") {
			t.Errorf("line %d does not start with the indent: %q", i, l)
		}
		if len(l) > maxWidth && !strings.Contains(l, "/a/path/") {
			t.Errorf("line %d of %d columns: %q", i, len(l), l)
		}
	}
	if strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields(long), " ") {
		t.Errorf("wrap changed the words:\n%s", got)
	}
}
