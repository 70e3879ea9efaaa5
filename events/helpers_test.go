package events

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/internal/testnet"
	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// Every wait in these tests is a poll with a deadline: a slow machine
// makes them slower, never flaky.
const waitTimeout = 15 * time.Second

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, waitTimeout, what, cond)
}

// waitLong is waitFor for a wait on many deliveries of a few events each
// (a topic whose bound keeps batches small), which a machine busy with
// other tests stretches past waitTimeout. What such a test asserts is how
// much was sent, never how fast.
func waitLong(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 4*waitTimeout, what, cond)
}

func waitWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logBuffer collects a recorder's logs, for tests that check what it said.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t testing.TB) (*slog.Logger, *logBuffer) {
	buf := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("recorder log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// baseSink is a sink of kind k with the settings the config's defaults
// give it.
func baseSink(k SinkKind) Sink {
	return Sink{
		Kind:          k,
		Redis:         RedisSink{Stream: "fg:events", MaxLen: 1_000_000},
		NATS:          NATSSink{URL: "nats://127.0.0.1:4222", Subject: "floodgate.events"},
		Kafka:         KafkaSink{Topic: "floodgate-events", ClientID: "floodgate", Acks: "all", Compression: "none"},
		File:          FileSink{Path: "floodgate-events.jsonl"},
		SpoolMaxBytes: 1 << 30,
	}
}

// withRedis is c writing to the Redis at addr.
func withRedis(c Sink, addr string) Sink {
	c.Redis.Addrs = []string{addr}
	return c
}

type testRecorder struct {
	*Recorder
	reg *prometheus.Registry
	log *logBuffer
}

func newTestRecorder(t testing.TB, c Sink, o Options) *testRecorder {
	t.Helper()
	reg := prometheus.NewRegistry()
	log, buf := testLogger(t)
	o.Logger, o.Registerer = log, reg
	if o.RecordWait == 0 {
		// The product's 100 ms is for a healthy disk; a loaded test
		// machine's fsync may take longer, and a test that means the
		// wait sets its own.
		o.RecordWait = 5 * time.Second
	}
	r, err := NewRecorder(c, o)
	if err != nil {
		t.Fatalf("NewRecorder: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return &testRecorder{Recorder: r, reg: reg, log: buf}
}

func (r *testRecorder) total(typ, result string) float64 {
	return testutil.ToFloat64(r.metrics.total.WithLabelValues(typ, result))
}

func (r *testRecorder) spooledGauge() float64 { return testutil.ToFloat64(r.metrics.spooled) }

// testEvent is event i of a run, the same every time it is made, so a
// parent test can check what a child process recorded.
// recordAll records testEvent(from) to testEvent(to-1), failing t if one
// is refused, and returns them as the sink should hold them.
func recordAll(t testing.TB, r *testRecorder, from, to int) []stored {
	t.Helper()
	var want []stored
	for i := from; i < to; i++ {
		e := testEvent(i)
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%d) = false", i)
		}
		want = append(want, stored{id: e.ID, data: encoded(t, e)})
	}
	return want
}

func testEvent(i int) *Event {
	e := &Event{
		Time:      time.Date(2025, 6, 1, 10, 0, 0, i*1000, time.UTC),
		Type:      TypeBreakerRejected,
		Route:     "lucky-meal",
		RequestID: fmt.Sprintf("req-%d", i),
		Method:    "POST",
		Path:      "/api/activities/lucky-meal/receive",
		Query:     "n=" + strconv.Itoa(i) + "&x=%20y",
		Keys:      map[string][]string{"user": {"u" + strconv.Itoa(i%7), "/api/activities/lucky-meal/receive"}},
		Headers:   map[string][]string{"Content-Type": {"application/json"}, "X-User-Id": {"u" + strconv.Itoa(i%7)}},
		Body:      []byte(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", i%200))),
	}
	if i%5 == 4 {
		e.Type, e.Limit = TypeRateLimited, "user"
	}
	return e
}

// encoded is e as the recorder stores it.
func encoded(t testing.TB, e *Event) string {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stored is one event as a sink holds it.
type stored struct {
	id   string
	data string
}

// checkDelivered checks that every event of want (in order) is in got,
// in the same order by first appearance, and that any repeat of an id
// carries the same data. It returns the number of duplicates.
func checkDelivered(t testing.TB, got []stored, want []stored) int {
	t.Helper()
	first := map[string]int{}
	data := map[string]string{}
	dups := 0
	for i, s := range got {
		if d, ok := data[s.id]; ok {
			dups++
			if d != s.data {
				t.Fatalf("event %s delivered twice with different contents:\n%s\n%s", s.id, d, s.data)
			}
			continue
		}
		first[s.id], data[s.id] = i, s.data
	}
	last := -1
	for _, w := range want {
		i, ok := first[w.id]
		if !ok {
			t.Fatalf("event %s was acknowledged but is not in the sink (%d events there)", w.id, len(got))
		}
		if data[w.id] != w.data {
			t.Fatalf("event %s in the sink differs from what was recorded:\n got %s\nwant %s", w.id, data[w.id], w.data)
		}
		if i < last {
			t.Fatalf("event %s is out of order in the sink", w.id)
		}
		last = i
	}
	return dups
}

// Redis.

// redisStream reads the whole stream; a Redis that is down reads as
// nothing yet.
func redisStream(t testing.TB, addr, stream string) []stored {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil
	}
	defer c.Close()
	entries, err := c.Do(context.Background(), c.B().Xrange().Key(stream).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		return nil
	}
	out := make([]stored, len(entries))
	for i, e := range entries {
		out[i] = stored{id: e.FieldValues["id"], data: e.FieldValues["event"]}
	}
	return out
}

// startRedis starts a Redis that keeps its data across Restart, as a
// production one would: the outage tests restart it and expect what it
// had acknowledged to still be there.
func startRedis(t testing.TB) *testredis.Server {
	return testredis.Start(t, testredis.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	return strings.TrimPrefix(testnet.RefusedURL(t), "http://")
}

// NATS: a real nats-server with JetStream, in this process, on a free
// port and a temporary store, never the machine's own on 4222.

type natsServer struct {
	t    testing.TB
	dir  string
	port int
	srv  *natsserver.Server
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	n := &natsServer{t: t, dir: t.TempDir(), port: -1}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *natsServer) start() {
	n.t.Helper()
	opts := &natsserver.Options{
		Host:      "127.0.0.1",
		Port:      n.port,
		JetStream: true,
		StoreDir:  n.dir,
		NoLog:     true,
		NoSigs:    true,
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		srv, err := natsserver.NewServer(opts)
		if err != nil {
			n.t.Fatalf("nats-server: %v", err)
		}
		go srv.Start()
		if srv.ReadyForConnections(5 * time.Second) {
			n.srv = srv
			n.port = srv.Addr().(*net.TCPAddr).Port
			return
		}
		srv.Shutdown()
		// The port of a restart may still be held for a moment.
		if time.Now().After(deadline) {
			n.t.Fatalf("nats-server did not start on port %d", n.port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *natsServer) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func (n *natsServer) restart() {
	n.stop()
	n.start()
}

func (n *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// natsStream reads every message on subject; a server that is down reads
// as nothing yet.
func natsStream(t testing.TB, url, subject string) []stored {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		return nil
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name, err := js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil
	}
	last := st.CachedInfo().State.LastSeq
	if last == 0 {
		return nil
	}
	oc, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil
	}
	var out []stored
	for {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return out
		}
		n := 0
		for m := range batch.Messages() {
			n++
			out = append(out, stored{id: m.Headers().Get(nats.MsgIdHdr), data: string(m.Data())})
			if md, err := m.Metadata(); err == nil && md.Sequence.Stream >= last {
				return out
			}
		}
		if n == 0 {
			return out
		}
	}
}

// File.

func fileLines(t testing.TB, path string) []stored {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []stored
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%s: a line that is not an event: %q", path, sc.Text())
		}
		out = append(out, stored{id: e.ID, data: sc.Text()})
	}
	return out
}
