package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// The crash test holds the gateway to its promise of durability: a fallback
// that said "recorded": true is an event that reaches the sink, even when
// the sink was down when it was recorded and the gateway is killed before
// the sink comes back.

const (
	crashStream         = "fg:events"
	crashSinkUp         = 20  // requests sent, one by one, while the sink is up
	crashWorkers        = 4   // concurrent senders while the sink is down
	crashBeforeReadyz   = 50  // answers with the sink down before /readyz is checked
	crashBeforeKill     = 200 // answers with the sink down before the kill
	crashMaxPerWorker   = 1000
	crashDeliverTimeout = 15 * time.Second
)

// crashConfig has one route with a breaker whose fallback records, and a
// redis events sink with a spool.
const crashConfig = `
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
  token: {{TOKEN}}
events:
  sink: redis
  redis: {addrs: ["{{REDIS}}"], stream: "` + crashStream + `"}
  spool_dir: "{{SPOOL}}"
routes:
  - id: orders
    match: {path: /orders/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
    fallback: {record: true}
`

// sentRequest is one request turned away by the open breaker, and when.
type sentRequest struct {
	id       string
	body     string
	sent     time.Time // before the request was written
	answered time.Time // once its whole answer was read
	recorded bool
}

// streamEvent is one stream entry: the entry's "id" field and the event.
type streamEvent struct {
	entryID string // the stream's own id
	field   string // the "id" field
	event   struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Route     string `json:"route"`
		RequestID string `json:"request_id"`
		Method    string `json:"method"`
		Path      string `json:"path"`
		Body      []byte `json:"body"`
		Truncated bool   `json:"truncated"`
	}
}

func TestServeCrashKeepsRecordedEvents(t *testing.T) {
	skipWithoutSignals(t)
	t.Parallel()
	srv := testredis.Start(t, testredis.WithArgs("--appendonly", "yes"))
	f := newFixture(t, nil)
	spool := filepath.Join(f.dir, "spool")
	f.write(strings.NewReplacer("{{REDIS}}", srv.Addr(), "{{SPOOL}}", spool).Replace(crashConfig))
	p := f.serve()

	if r := p.admin("POST", "/admin/breakers/orders?state=open"); r.code != 200 {
		t.Fatalf("forcing the breaker open: %d %s", r.code, r.body)
	}

	// While the sink is up, events are delivered as they come; the
	// stream (in Redis's append-only file) keeps them across Redis's
	// restart, and the offset file tells the next gateway not to resend
	// them, or at worst to resend them with the same ids.
	var all []*sentRequest
	for i := range crashSinkUp {
		all = append(all, sendRefused(t, f.listen, fmt.Sprintf("crash-up-%03d", i)))
	}
	waitDelivered(t, srv, recordedOf(all), p.done)

	// The sink goes down: events wait in the spool, and the gateway
	// serves and says so on /readyz. Workers keep sending, and the
	// gateway is killed while requests are in flight, as a crash would
	// find it: with events queued, batches being written, answers being
	// sent.
	srv.Stop()
	var (
		mu   sync.Mutex
		down []*sentRequest
		// attempted holds every request sent: one in flight at the kill
		// has no answer, yet its event may well be in the spool.
		attempted = map[string]bool{}
		wg        sync.WaitGroup
		killed    atomic.Bool
		answered  = make(chan struct{}, crashWorkers*crashMaxPerWorker)
	)
	errs := make(chan error, crashWorkers)
	for w := range crashWorkers {
		wg.Go(func() {
			for i := range crashMaxPerWorker {
				id := fmt.Sprintf("crash-w%d-%03d", w, i)
				mu.Lock()
				attempted[id] = true
				mu.Unlock()
				r, err := tryRefused(f.listen, id)
				if err != nil {
					if !killed.Load() {
						errs <- err
					}
					return
				}
				mu.Lock()
				down = append(down, r)
				mu.Unlock()
				answered <- struct{}{}
			}
			errs <- fmt.Errorf("worker %d sent %d requests and the gateway was still not killed", w, crashMaxPerWorker)
		})
	}
	awaitAnswers := func(n int) {
		t.Helper()
		timeout := time.After(waitTimeout)
		for range n {
			select {
			case <-answered:
			case err := <-errs:
				killed.Store(true) // the workers stop at their next error
				p.cmd.Process.Kill()
				t.Fatal(err)
			case <-timeout:
				t.Fatalf("timed out after %v waiting for %d answers with the sink down", waitTimeout, n)
			}
		}
	}
	awaitAnswers(crashBeforeReadyz)
	p.waitFor(`/readyz to report the events sink down`, func() bool {
		r := request(t, "GET", "http://"+f.admin+"/readyz")
		if r.code != 200 {
			t.Fatalf("GET /readyz with the events sink down: %d %s, want 200: the gateway still serves", r.code, r.body)
		}
		m := r.json(t)
		d, _ := m["detail"].(string)
		return m["status"] == "ok" && strings.Contains(d, "events sink") && strings.Contains(d, srv.Addr())
	})
	awaitAnswers(crashBeforeKill - crashBeforeReadyz)

	// A crash: SIGKILL, no graceful shutdown, no last write or delivery.
	killed.Store(true)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.wait()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	all = append(all, down...)
	recorded := recordedOf(down)
	if len(recorded)*10 < len(down)*9 {
		t.Fatalf("%d of %d fallbacks said \"recorded\": true with the sink down, want >= 90%%", len(recorded), len(down))
	}
	t.Logf("%d of %d fallbacks answered before the kill said \"recorded\": true", len(recorded), len(down))

	srv.Restart()
	p2 := f.serve()
	got := waitDelivered(t, srv, recordedOf(all), p2.done)
	checkDelivered(t, all, attempted, got)

	// The spool is drained and the next gateway knows it.
	p2.waitFor("gateway_events_spooled to reach 0", func() bool {
		r := request(t, "GET", "http://"+f.admin+"/metrics")
		return regexp.MustCompile(`(?m)^gateway_events_spooled 0$`).MatchString(r.body)
	})
	p2.waitFor(`/readyz to report the events sink back`, func() bool {
		r := request(t, "GET", "http://"+f.admin+"/readyz")
		return r.code == 200 && r.json(t)["detail"] == nil
	})
}

// sendRefused sends one request to the open breaker's route.
func sendRefused(t *testing.T, listen, id string) *sentRequest {
	t.Helper()
	r, err := tryRefused(listen, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryRefused is sendRefused for any goroutine: it returns what went wrong.
func tryRefused(listen, id string) (*sentRequest, error) {
	return tryRefusedAs(listen, id, "")
}

// tryRefusedAs is tryRefused with the header X-User-Id: user, unless
// user is empty.
func tryRefusedAs(listen, id, user string) (*sentRequest, error) {
	s := &sentRequest{id: id, body: requestBody(id)}
	req, err := http.NewRequest("POST", "http://"+listen+"/orders/"+id, strings.NewReader(s.body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Request-Id", id)
	if user != "" {
		req.Header.Set("X-User-Id", user)
	}
	req.Header.Set("Content-Type", "application/json")
	s.sent = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %v", req.URL, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	s.answered = time.Now()
	if err != nil {
		return nil, fmt.Errorf("POST %s: reading the body: %v", req.URL, err)
	}
	if resp.StatusCode != 503 || resp.Header.Get("X-Request-Id") != id {
		return nil, fmt.Errorf("POST %s: %d, X-Request-Id %q, %s; want the fallback's 503 with the request id %q",
			req.URL, resp.StatusCode, resp.Header.Get("X-Request-Id"), body, id)
	}
	var m struct {
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
		Recorded  *bool  `json:"recorded"`
	}
	if err := json.Unmarshal(body, &m); err != nil || m.Recorded == nil || m.RequestID != id {
		return nil, fmt.Errorf(`POST %s: body %s, want a JSON fallback with "request_id": %q and "recorded" (%v)`, req.URL, body, id, err)
	}
	s.recorded = *m.Recorded
	return s, nil
}

func requestBody(id string) string { return fmt.Sprintf(`{"order":%q}`, id) }

func recordedOf(rs []*sentRequest) []*sentRequest {
	var out []*sentRequest
	for _, r := range rs {
		if r.recorded {
			out = append(out, r)
		}
	}
	return out
}

// waitDelivered polls the stream until every request of want has an event
// there, and returns the stream. It fails the test at the deadline, or if
// the gateway (whose done channel is given) exits first.
func waitDelivered(t *testing.T, srv *testredis.Server, want []*sentRequest, done <-chan struct{}) []streamEvent {
	t.Helper()
	deadline := time.Now().Add(crashDeliverTimeout)
	for {
		got, err := readStream(t, srv)
		var missing []string
		if err == nil {
			seen := map[string]bool{}
			for _, e := range got {
				seen[e.event.RequestID] = true
			}
			for _, r := range want {
				if !seen[r.id] {
					missing = append(missing, r.id)
				}
			}
			if len(missing) == 0 {
				return got
			}
		}
		select {
		case <-done:
			t.Fatalf("floodgate exited while %d recorded events were still to be delivered", len(missing))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d of %d events answered \"recorded\": true are not in the stream %s (last error: %v), e.g. %q",
				crashDeliverTimeout, len(missing), len(want), crashStream, err, missing[:min(5, len(missing))])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readStream reads the whole stream with XRANGE.
func readStream(t *testing.T, srv *testredis.Server) ([]streamEvent, error) {
	t.Helper()
	v, err := srv.DoValue(t, "XRANGE", crashStream, "-", "+")
	if err != nil {
		return nil, err
	}
	entries, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("XRANGE replied %T %v, want an array", v, v)
	}
	out := make([]streamEvent, 0, len(entries))
	for _, x := range entries {
		entry, _ := x.([]any)
		if len(entry) != 2 {
			return nil, fmt.Errorf("XRANGE entry %v, want [id fields]", x)
		}
		var e streamEvent
		e.entryID, _ = entry[0].(string)
		fields, _ := entry[1].([]any)
		var data string
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			val, _ := fields[i+1].(string)
			switch k {
			case "id":
				e.field = val
			case "event":
				data = val
			}
		}
		if err := json.Unmarshal([]byte(data), &e.event); err != nil {
			t.Fatalf("stream entry %s: the event field %q is not JSON: %v", e.entryID, data, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// checkDelivered checks the stream against the requests answered (sent)
// and those left without an answer by the kill (attempted holds both):
// every event is whole, a duplicate carries its first copy's id, and the
// events of requests answered "recorded": true are all there, in the order
// they were answered — whenever one request was answered before another
// was sent, its event comes first.
func checkDelivered(t *testing.T, sent []*sentRequest, attempted map[string]bool, got []streamEvent) {
	t.Helper()
	byID := map[string]*sentRequest{}
	for id := range attempted {
		byID[id] = &sentRequest{id: id, body: requestBody(id)}
	}
	for _, r := range sent {
		byID[r.id] = r
	}
	first := map[string]int{}        // request id -> position of its first event
	eventID := map[string]string{}   // request id -> its event id
	requestOf := map[string]string{} // event id -> its request id
	dups := 0
	for i, e := range got {
		ev := e.event
		r := byID[ev.RequestID]
		if r == nil {
			t.Errorf("stream entry %s: an event for request id %q, which was never sent", e.entryID, ev.RequestID)
			continue
		}
		if e.field != ev.ID || ev.ID == "" {
			t.Errorf("stream entry %s: the id field %q and the event's id %q differ", e.entryID, e.field, ev.ID)
		}
		if ev.Type != "breaker_rejected" || ev.Route != "orders" || ev.Method != "POST" ||
			ev.Path != "/orders/"+r.id || string(ev.Body) != r.body || ev.Truncated {
			t.Errorf("stream entry %s: event %+v, want breaker_rejected on orders, POST /orders/%s with the body %s",
				e.entryID, ev, r.id, r.body)
		}
		if prev, ok := requestOf[ev.ID]; ok && prev != ev.RequestID {
			t.Errorf("event id %s is on requests %s and %s", ev.ID, prev, ev.RequestID)
		}
		requestOf[ev.ID] = ev.RequestID
		if _, ok := first[ev.RequestID]; ok {
			dups++
			if eventID[ev.RequestID] != ev.ID {
				t.Errorf("request %s: a duplicate event with id %s, the first had %s", ev.RequestID, ev.ID, eventID[ev.RequestID])
			}
			continue
		}
		first[ev.RequestID], eventID[ev.RequestID] = i, ev.ID
	}
	recorded := recordedOf(sent)
	for _, r := range recorded {
		if _, ok := first[r.id]; !ok {
			t.Errorf("request %s was answered \"recorded\": true and its event is not in the stream", r.id)
		}
	}
	outOfOrder := 0
	for _, a := range recorded {
		for _, b := range recorded {
			if a.answered.Before(b.sent) && first[a.id] > first[b.id] {
				if outOfOrder++; outOfOrder <= 5 {
					t.Errorf("request %s was answered before %s was sent, yet its event comes after (stream positions %d > %d)",
						a.id, b.id, first[a.id], first[b.id])
				}
			}
		}
	}
	if outOfOrder > 5 {
		t.Errorf("... %d pairs out of order in all", outOfOrder)
	}
	t.Logf("stream: %d entries, %d of them duplicates, for %d requests answered \"recorded\": true", len(got), dups, len(recorded))
}
