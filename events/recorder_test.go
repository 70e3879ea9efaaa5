package events

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// A sinkCase is one way of configuring a recorder against a real sink.
type sinkCase struct {
	name string
	// setup returns the events block (spool_dir included when the case
	// has one), the options, and a reader of what the sink holds.
	setup func(t *testing.T) (Sink, Options, func() []stored)
}

func redisCase(t *testing.T) (Sink, Options, func() []stored) {
	srv := startRedis(t)
	c := baseSink(SinkRedis)
	c.SpoolDir = t.TempDir()
	return withRedis(c, srv.Addr()), Options{}, func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }
}

func natsCase(t *testing.T) (Sink, Options, func() []stored) {
	n := startNATS(t)
	c := baseSink(SinkNATS)
	c.NATS.URL = n.url()
	c.SpoolDir = t.TempDir()
	return c, Options{}, func() []stored { return natsStream(t, n.url(), c.NATS.Subject) }
}

func fileCase(spool bool) func(t *testing.T) (Sink, Options, func() []stored) {
	return func(t *testing.T) (Sink, Options, func() []stored) {
		c := baseSink(SinkFile)
		c.File.Path = filepath.Join(t.TempDir(), "events.jsonl")
		if spool {
			c.SpoolDir = t.TempDir()
		}
		return c, Options{}, func() []stored { return fileLines(t, c.File.Path) }
	}
}

var sinkCases = []sinkCase{
	{"redis", redisCase},
	{"nats", natsCase},
	{"file+spool", fileCase(true)},
	{"file", fileCase(false)},
}

// TestRecordDelivered records events through each sink and checks that
// they arrive in order with every field intact, and that the metrics
// count them.
func TestRecordDelivered(t *testing.T) {
	for _, sc := range sinkCases {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			c, o, read := sc.setup(t)
			// A sink slower than the usual 40 ms (a loaded test machine)
			// would rightly send a batch to the spool, and part of it
			// twice; this test is about what arrives, not that timeout.
			o.directTimeout = deliverTimeout
			r := newTestRecorder(t, c, o)
			const n = 50
			var want []stored
			for i := range n {
				e := testEvent(i)
				if i == 0 {
					// A body over max_body, kept as the gateway would.
					body := strings.Repeat("0123456789", 10_000)
					kept, truncated, rest := CaptureBody(strings.NewReader(body), 1000)
					e.Body, e.Truncated = kept, truncated
					if all, _ := io.ReadAll(rest); string(all) != body {
						t.Fatalf("CaptureBody's rest is not the whole body")
					}
				}
				if !r.Record(context.Background(), e) {
					t.Fatalf("Record(event %d) = false; Ready: %v", i, r.Ready())
				}
				if e.ID == "" {
					t.Fatal("Record did not set the event's ID")
				}
				want = append(want, stored{id: e.ID, data: encoded(t, e)})
			}
			waitFor(t, "every event in the sink", func() bool { return len(read()) >= n })
			got := read()
			if dups := checkDelivered(t, got, want); dups != 0 || len(got) != n {
				t.Fatalf("%d events in the sink with %d duplicates, want %d and none", len(got), dups, n)
			}
			var first Event
			if err := jsonUnmarshal(got[0].data, &first); err != nil {
				t.Fatal(err)
			}
			if !first.Truncated || len(first.Body) != 1000 || !bytes.Equal(first.Body, []byte(strings.Repeat("0123456789", 100))) {
				t.Errorf("the truncated event came back with truncated=%v and a body of %d bytes", first.Truncated, len(first.Body))
			}
			waitFor(t, "the delivered counts", func() bool {
				return r.total(TypeBreakerRejected, resultDelivered) == 40 && r.total(TypeRateLimited, resultDelivered) == 10
			})
			if got, want := r.total(TypeBreakerRejected, resultRecorded), 40.0; got != want {
				t.Errorf("recorded breaker_rejected = %v, want %v", got, want)
			}
			if got := r.spooledGauge(); got != 0 {
				t.Errorf("gateway_events_spooled = %v after delivery, want 0", got)
			}
			if err := r.Ready(); err != nil {
				t.Errorf("Ready() = %v with a healthy sink", err)
			}
		})
	}
}

func TestCaptureBody(t *testing.T) {
	t.Parallel()
	errBroken := errors.New("connection reset")
	tests := []struct {
		name      string
		body      io.Reader
		max       int64
		kept      string
		truncated bool
		rest      string
		restErr   error
	}{
		{"shorter", strings.NewReader("hello"), 10, "hello", false, "hello", nil},
		{"exactly max", strings.NewReader("hello"), 5, "hello", false, "hello", nil},
		{"longer", strings.NewReader("hello world"), 5, "hello", true, "hello world", nil},
		{"max 0 keeps nothing", strings.NewReader("x"), 0, "", true, "x", nil},
		{"max 0, empty body", strings.NewReader(""), 0, "", false, "", nil},
		{"read error", io.MultiReader(strings.NewReader("hel"), iotest.ErrReader(errBroken)), 10, "hel", true, "hel", errBroken},
		{"one byte at a time", iotest.OneByteReader(strings.NewReader("hello world")), 8, "hello wo", true, "hello world", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, truncated, rest := CaptureBody(tt.body, tt.max)
			if string(kept) != tt.kept || truncated != tt.truncated {
				t.Errorf("CaptureBody = %q, %v; want %q, %v", kept, truncated, tt.kept, tt.truncated)
			}
			all, err := io.ReadAll(rest)
			if string(all) != tt.rest || !errors.Is(err, tt.restErr) {
				t.Errorf("rest = %q, %v; want %q, %v", all, err, tt.rest, tt.restErr)
			}
		})
	}
	if kept, truncated, rest := CaptureBody(nil, 10); kept != nil || truncated || rest != nil {
		t.Errorf("CaptureBody(nil) = %q, %v, %v", kept, truncated, rest)
	}
}

// TestSinkOutage stops the sink while 1,000 events are recorded and
// starts it again: every event Record acknowledged must end up in the
// sink, in order, and a duplicate only ever with the same id.
func TestSinkOutage(t *testing.T) {
	t.Parallel()
	type outage struct {
		name     string
		start    func(t *testing.T) (c Sink, o Options, read func() []stored, stop, restart func())
		stopped  int // events recorded before the sink stops
		restored int // and before it starts again
	}
	cases := []outage{
		{"redis", func(t *testing.T) (Sink, Options, func() []stored, func(), func()) {
			srv := startRedis(t)
			c := baseSink(SinkRedis)
			c.SpoolDir = t.TempDir()
			return withRedis(c, srv.Addr()), Options{},
				func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }, srv.Stop, srv.Restart
		}, 300, 600},
		{"nats", func(t *testing.T) (Sink, Options, func() []stored, func(), func()) {
			n := startNATS(t)
			c := baseSink(SinkNATS)
			c.NATS.URL = n.url()
			c.SpoolDir = t.TempDir()
			return c, Options{}, func() []stored { return natsStream(t, n.url(), c.NATS.Subject) }, n.stop, n.restart
		}, 300, 600},
	}
	for _, oc := range cases {
		t.Run(oc.name, func(t *testing.T) {
			t.Parallel()
			c, o, read, stop, restart := oc.start(t)
			r := newTestRecorder(t, c, o)
			var want []stored
			for i := range 1000 {
				switch i {
				case oc.stopped:
					stop()
				case (oc.stopped + oc.restored) / 2:
					waitFor(t, "Ready to report the sink down", func() bool { return r.Ready() != nil })
					if msg := r.Ready().Error(); !strings.Contains(msg, "spooled") {
						t.Errorf("Ready() = %q, want the number of events spooled", msg)
					}
				case oc.restored:
					restart()
				}
				e := testEvent(i)
				if r.Record(context.Background(), e) {
					want = append(want, stored{id: e.ID, data: encoded(t, e)})
				}
			}
			if len(want) < 990 {
				t.Fatalf("only %d of 1000 events acknowledged with a healthy spool", len(want))
			}
			waitFor(t, "every acknowledged event in the sink", func() bool { return len(read()) >= len(want) })
			dups := checkDelivered(t, read(), want)
			t.Logf("%d acknowledged, %d duplicates in the sink", len(want), dups)
			waitFor(t, "Ready once the sink is back", func() bool { return r.Ready() == nil })
			waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
		})
	}
}

// TestTornTail cuts the spool's last record short, and then appends
// garbage after a good one, as a crash in the middle of a write can:
// recovery truncates the torn bytes, keeps every whole record, and the
// recorder goes on.
func TestTornTail(t *testing.T) {
	t.Parallel()
	tails := map[string]func(good []byte) []byte{
		"header cut short": func([]byte) []byte { return []byte{0x30, 0x00, 0x00} },
		"body cut short":   func(good []byte) []byte { return good[:len(good)-7] },
		"bad checksum": func(good []byte) []byte {
			b := bytes.Clone(good)
			b[len(b)-1] ^= 0xff
			return b
		},
		"zeros": func([]byte) []byte { return make([]byte, 4096) },
	}
	for name, tail := range tails {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := startRedis(t)
			c := baseSink(SinkRedis)
			c.SpoolDir = t.TempDir()
			// First nothing can be delivered, so everything stays spooled.
			r := newTestRecorder(t, withRedis(c, deadAddr(t)), Options{})
			want := recordAll(t, r, 0, 10)
			r.Close()

			seg := lastSegment(t, c.SpoolDir)
			data, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			good := (&record{id: "0123", typ: TypeAdmitted, data: []byte(`{"id":"0123"}`)}).appendTo(nil)
			f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(tail(good)); err != nil {
				t.Fatal(err)
			}
			f.Close()

			r2 := newTestRecorder(t, withRedis(c, srv.Addr()), Options{directTimeout: deliverTimeout})
			if !strings.Contains(r2.log.String(), "truncating a torn record") {
				t.Errorf("recovery did not say it truncated the torn tail; log:\n%s", r2.log.String())
			}
			if st, err := os.Stat(seg); err == nil && st.Size() != int64(len(data)) {
				t.Errorf("the segment is %d bytes after recovery, want the %d of its whole records", st.Size(), len(data))
			}
			e := testEvent(10)
			if !r2.Record(context.Background(), e) {
				t.Fatal("Record after recovery = false")
			}
			want = append(want, stored{id: e.ID, data: encoded(t, e)})
			read := func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }
			waitFor(t, "the spooled events delivered", func() bool { return len(read()) >= len(want) })
			if dups := checkDelivered(t, read(), want); dups != 0 || len(read()) != len(want) {
				t.Fatalf("%d events delivered with %d duplicates, want %d", len(read()), dups, len(want))
			}
		})
	}
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*"+segSuffix))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment in %s (%v)", dir, err)
	}
	// The names are fixed-width hex, so the last in order is the newest;
	// it is empty when the recorder rolled to it at Close... find the
	// newest one with records.
	for i := len(segs) - 1; i >= 0; i-- {
		if st, err := os.Stat(segs[i]); err == nil && st.Size() > 0 {
			return segs[i]
		}
	}
	return segs[len(segs)-1]
}

// TestSpoolFull fills a small spool while the sink is down: Record must
// refuse at once, not wait out its RecordWait, and every refusal is
// counted as dropped and logged. The wait is a minute, so that a refusal
// that waited stands apart from one that did not however busy the
// machine is.
func TestSpoolFull(t *testing.T) {
	t.Parallel()
	c := baseSink(SinkRedis)
	c.SpoolDir = t.TempDir()
	c.SpoolMaxBytes = 32 << 10
	const wait = time.Minute
	r := newTestRecorder(t, withRedis(c, deadAddr(t)), Options{RecordWait: wait})
	accepted, refused := 0, 0
	for i := range 100 {
		e := testEvent(i)
		e.Body = bytes.Repeat([]byte("b"), 1000)
		start := time.Now()
		if r.Record(context.Background(), e) {
			accepted++
			continue
		}
		refused++
		if d := time.Since(start); d > wait/4 {
			t.Errorf("a refusal took %v of the %v Record may wait; a full spool must refuse at once", d, wait)
		}
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("accepted %d, refused %d; want both with a 32 KiB spool and 100 KB of events", accepted, refused)
	}
	if used := r.spool.used(); used > c.SpoolMaxBytes {
		t.Errorf("the spool holds %d bytes, over its bound of %d", used, c.SpoolMaxBytes)
	}
	dropped := r.total(TypeBreakerRejected, resultDropped) + r.total(TypeRateLimited, resultDropped)
	if int(dropped) != refused {
		t.Errorf("dropped = %v, want %d", dropped, refused)
	}
	if got := int(r.spooledGauge()); got != accepted {
		t.Errorf("gateway_events_spooled = %d, want %d", got, accepted)
	}
	if !strings.Contains(r.log.String(), "dropped events") || !strings.Contains(r.log.String(), "spool is full") {
		t.Errorf("the drops were not logged; log:\n%s", r.log.String())
	}
}

// TestSpoolFreedOnceDelivered fills a small spool while the sink is down,
// lets the sink drain it, and stops the sink again: the spool must take as
// many events as it did empty, not count the delivered ones against
// spool_max_bytes, and its segment files must stay within the bound. Then
// every event reaches the sink, from the same recorder or, after a crash
// that came just after the delivered segment was deleted, from the next.
func TestSpoolFreedOnceDelivered(t *testing.T) {
	t.Run("same recorder", func(t *testing.T) { t.Parallel(); testSpoolFreed(t, false) })
	t.Run("crash after the delete", func(t *testing.T) { t.Parallel(); testSpoolFreed(t, true) })
}

func testSpoolFreed(t *testing.T, crash bool) {
	srv := startRedis(t)
	srv.Stop()
	c := baseSink(SinkRedis)
	c.SpoolDir = t.TempDir()
	// Less than a segment (minSegment): the segment being written never
	// rolls, so only delivery can free the space.
	c.SpoolMaxBytes = 4000
	// Record waits long enough that false means refused, not slow.
	c.Redis.Addrs = []string{srv.Addr()}
	o := Options{RecordWait: waitTimeout}
	r := newTestRecorder(t, c, o)
	read := func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }
	// Events of one size, so that a full spool holds as many each time.
	next := 0
	fill := func() []stored {
		t.Helper()
		var want []stored
		for {
			e := testEvent(1000 + next)
			next++
			e.Time = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
			e.Type, e.Limit = TypeBreakerRejected, ""
			e.Body = bytes.Repeat([]byte("b"), 500)
			if !r.Record(context.Background(), e) {
				return want
			}
			want = append(want, stored{id: e.ID, data: encoded(t, e)})
		}
	}
	onDisk := func() int64 {
		t.Helper()
		segs, err := filepath.Glob(filepath.Join(c.SpoolDir, "*"+segSuffix))
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, seg := range segs {
			if st, err := os.Stat(seg); err == nil {
				n += st.Size()
			}
		}
		return n
	}

	first := fill()
	if len(first) < 2 {
		t.Fatalf("an empty spool of %d bytes took %d events of about 1 KB", c.SpoolMaxBytes, len(first))
	}
	if dropped := r.total(TypeBreakerRejected, resultDropped); dropped != 1 {
		t.Fatalf("dropped = %v after filling the spool, want the 1 event it refused", dropped)
	}

	srv.Restart()
	waitFor(t, "the spool delivered", func() bool { return len(read()) >= len(first) })
	waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
	// The forwarder's position now names the end of the segment that
	// holds the delivered events.
	offset, err := os.ReadFile(filepath.Join(c.SpoolDir, offsetFile))
	if err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	second := fill()
	if len(second) != len(first) {
		t.Fatalf("once delivered, the spool took %d events with the sink down, want %d as when it was empty", len(second), len(first))
	}
	if got := int(r.spooledGauge()); got != len(second) {
		t.Errorf("gateway_events_spooled = %d, want %d", got, len(second))
	}
	if used, disk := r.spool.used(), onDisk(); used > c.SpoolMaxBytes || disk > c.SpoolMaxBytes {
		t.Errorf("the spool counts %d bytes and its segments hold %d, over its bound of %d", used, disk, c.SpoolMaxBytes)
	}

	if crash {
		// The files as a crash leaves them when it comes after the
		// delivered segment was deleted but before the forwarder wrote
		// its position again: the offset names a segment that is gone.
		r.Close()
		if len(offset) != offsetSize {
			t.Fatalf("the offset file holds %d bytes, want %d", len(offset), offsetSize)
		}
		seg := r.spool.segPath(binary.LittleEndian.Uint64(offset))
		if _, err := os.Stat(seg); err == nil {
			t.Fatalf("%s, whose events were all delivered, is still there", filepath.Base(seg))
		}
		if err := os.WriteFile(filepath.Join(c.SpoolDir, offsetFile), offset, 0o644); err != nil {
			t.Fatal(err)
		}
		srv.Restart()
		r = newTestRecorder(t, c, o)
	} else {
		srv.Restart()
	}
	want := append(first, second...)
	waitFor(t, "every acknowledged event in the sink", func() bool { return len(read()) >= len(want) })
	if dups := checkDelivered(t, read(), want); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
}

// TestQueueFull: while the writer is stuck (here: in the file sink, whose
// lock the test holds), the queue fills and Record refuses at once
// instead of waiting.
func TestQueueFull(t *testing.T) {
	t.Parallel()
	c := baseSink(SinkFile)
	c.File.Path = filepath.Join(t.TempDir(), "events.jsonl")
	r := newTestRecorder(t, c, Options{})
	fs := r.sink.(*fileSink)
	fs.mu.Lock()
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			fs.mu.Unlock()
		}
	}
	defer unlock()
	// Hand the writer a first event to get stuck on, then fill the queue.
	// It goes straight into the queue: a Record in a goroutine might not
	// have queued it yet when the queue is seen empty, and would then find
	// the queue full and count a second drop.
	r.queue <- &pending{rec: record{id: "first", typ: TypeAdmitted, data: []byte(`{"id":"first"}`)}, done: make(chan struct{})}
	waitFor(t, "the writer to take the first event", func() bool { return len(r.queue) == 0 })
	for len(r.queue) < queueSize {
		r.queue <- &pending{rec: record{id: "x", typ: TypeAdmitted, data: []byte(`{"id":"x"}`)}, done: make(chan struct{})}
	}
	start := time.Now()
	if r.Record(context.Background(), testEvent(1)) {
		t.Fatal("Record with a full queue = true")
	}
	if d := time.Since(start); d > r.wait/4 {
		t.Errorf("a refusal on a full queue took %v of the %v Record may wait; it must be at once", d, r.wait)
	}
	if got := r.total(TypeBreakerRejected, resultDropped); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}
	unlock()
	e := testEvent(2)
	waitFor(t, "the queue to drain", func() bool { return len(r.queue) == 0 })
	if !r.Record(context.Background(), e) {
		t.Error("Record once the writer is free again = false")
	}
}

// TestUnreachableSink: a sink whose host does not resolve, or where
// nothing listens, does not keep the recorder from starting; events are
// spooled and Ready says why.
func TestUnreachableSink(t *testing.T) {
	t.Parallel()
	cases := map[string]func(t *testing.T) (Sink, Options){
		"nats host does not resolve": func(t *testing.T) (Sink, Options) {
			c := baseSink(SinkNATS)
			c.NATS.URL = "nats://no-such-host.invalid:4222"
			c.SpoolDir = t.TempDir()
			return c, Options{}
		},
		"redis host does not resolve": func(t *testing.T) (Sink, Options) {
			c := baseSink(SinkRedis)
			c.Redis.Addrs = []string{"no-such-host.invalid:6379"}
			c.SpoolDir = t.TempDir()
			return c, Options{}
		},
		"redis refuses": func(t *testing.T) (Sink, Options) {
			c := baseSink(SinkRedis)
			c.SpoolDir = t.TempDir()
			return withRedis(c, deadAddr(t)), Options{}
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, o := setup(t)
			r := newTestRecorder(t, c, o)
			if !r.Record(context.Background(), testEvent(1)) {
				t.Fatal("Record = false; the event should wait in the spool")
			}
			waitFor(t, "Ready to report the sink down", func() bool { return r.Ready() != nil })
			waitFor(t, "one log line about it", func() bool { return strings.Contains(r.log.String(), "the sink is down") })
			time.Sleep(300 * time.Millisecond) // a few retries
			if n := strings.Count(r.log.String(), "the sink is down"); n != 1 {
				t.Errorf("the sink being down was logged %d times, want once", n)
			}
			start := time.Now()
			r.Close()
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Close took %v with the sink down", d)
			}
		})
	}
}

// TestSpoolLocked: two recorders on one spool_dir would corrupt it; the
// second is refused.
func TestSpoolLocked(t *testing.T) {
	t.Parallel()
	c := baseSink(SinkFile)
	c.File.Path = filepath.Join(t.TempDir(), "events.jsonl")
	c.SpoolDir = t.TempDir()
	newTestRecorder(t, c, Options{})
	if r, err := NewRecorder(c, Options{}); err == nil {
		r.Close()
		t.Fatal("a second recorder on the same spool_dir started")
	}
}

// TestCloseLeavesNothing: after Close no goroutine of the recorder (nor
// of its clients) is left, and Record refuses.
func TestCloseLeavesNothing(t *testing.T) {
	srv := startRedis(t)
	before := runtime.NumGoroutine()
	for _, sc := range []sinkCase{{"redis", func(t *testing.T) (Sink, Options, func() []stored) {
		c := baseSink(SinkRedis)
		c.SpoolDir = t.TempDir()
		return withRedis(c, srv.Addr()), Options{}, nil
	}}, {"file", fileCase(false)}, {"file+spool", fileCase(true)}} {
		c, o, _ := sc.setup(t)
		if o.RecordWait == 0 {
			// As newTestRecorder: an fsync on a loaded machine can take
			// longer than the product's 100 ms.
			o.RecordWait = 5 * time.Second
		}
		r, err := NewRecorder(c, o)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if !r.Record(context.Background(), testEvent(i)) {
				t.Fatalf("%s: Record = false", sc.name)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if r.Record(context.Background(), testEvent(99)) {
			t.Errorf("%s: Record after Close = true", sc.name)
		}
		r.Close() // idempotent
	}
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// TestSinkNone: a recorder for sink none records nothing and is always
// ready.
func TestSinkNone(t *testing.T) {
	t.Parallel()
	r, err := NewRecorder(baseSink(SinkNone), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Record(context.Background(), testEvent(1)) {
		t.Error("Record with sink none = true")
	}
	if err := r.Ready(); err != nil {
		t.Error(err)
	}
	r.Close()
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func TestIDs(t *testing.T) {
	t.Parallel()
	g := newIDGen()
	now := time.Now()
	seen := map[string]bool{}
	prev := ""
	for range 10000 {
		id := g.next(now)
		if len(id) != 32 || seen[id] {
			t.Fatalf("id %q: bad length or repeated", id)
		}
		if id <= prev {
			t.Fatalf("ids of one millisecond are not increasing: %s after %s", id, prev)
		}
		seen[id], prev = true, id
	}
	if later := g.next(now.Add(time.Millisecond)); later <= prev {
		t.Errorf("an id a millisecond later sorts first: %s <= %s", later, prev)
	}
}

// TestSegments: a spool of many segments (a small spool_max_bytes makes
// them small) is delivered in order across them, and each delivered
// segment is deleted.
func TestSegments(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	srv.Stop()
	c := baseSink(SinkRedis)
	c.SpoolDir = t.TempDir()
	c.SpoolMaxBytes = 1 << 20 // 64 KiB segments
	r := newTestRecorder(t, withRedis(c, srv.Addr()), Options{})
	var want []stored
	for i := range 150 {
		e := testEvent(i)
		e.Body = bytes.Repeat([]byte{'a' + byte(i%26)}, 2000) // 2.7 KB in JSON
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%d) = false", i)
		}
		want = append(want, stored{id: e.ID, data: encoded(t, e)})
	}
	segs, _ := filepath.Glob(filepath.Join(c.SpoolDir, "*"+segSuffix))
	if len(segs) < 5 {
		t.Fatalf("%d segments for 400 KB of events, want several of 64 KiB", len(segs))
	}
	srv.Restart()
	read := func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }
	waitFor(t, "delivery", func() bool { return len(read()) >= len(want) })
	checkDelivered(t, read(), want)
	waitFor(t, "the delivered segments deleted", func() bool {
		segs, _ := filepath.Glob(filepath.Join(c.SpoolDir, "*"+segSuffix))
		return len(segs) == 1
	})
	if used := r.spool.used(); used > 64<<10 {
		t.Errorf("the spool holds %d bytes once delivered", used)
	}
}

// TestOffsetCorrupt: a corrupt offset file makes the next recorder deliver
// the spool from its start again — duplicates, which at-least-once allows,
// but nothing lost.
func TestOffsetCorrupt(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	c := baseSink(SinkRedis)
	c.SpoolDir = t.TempDir()
	c.Redis.Addrs = []string{srv.Addr()}
	o := Options{}
	read := func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }
	// The sink is down while the first events are recorded, so that they
	// go through the spool (a healthy sink takes them directly).
	srv.Stop()
	r := newTestRecorder(t, c, o)
	want := recordAll(t, r, 0, 10)
	srv.Restart()
	waitFor(t, "delivery", func() bool { return len(read()) == 10 })
	r.Close()
	if err := os.WriteFile(filepath.Join(c.SpoolDir, offsetFile), []byte("garbage, not an offset"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = newTestRecorder(t, c, o)
	if !strings.Contains(r.log.String(), "offset file is corrupt") {
		t.Errorf("the corrupt offset file was not reported; log:\n%s", r.log.String())
	}
	e := testEvent(10)
	if !r.Record(context.Background(), e) {
		t.Fatal("Record = false")
	}
	want = append(want, stored{id: e.ID, data: encoded(t, e)})
	waitFor(t, "delivery", func() bool { return len(read()) >= 21 })
	if dups := checkDelivered(t, read(), want); dups != 10 {
		t.Errorf("%d duplicates, want the 10 events of the first run again", dups)
	}
}

// TestIdleSinkDown: a sink that goes away while nothing is being recorded
// shows in Ready within the idle probe interval.
func TestIdleSinkDown(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	dir := t.TempDir()
	r, err := NewRecorder(Sink{
		Kind: SinkRedis, Redis: RedisSink{Stream: "fg:events", MaxLen: 1000, Addrs: []string{srv.Addr()}},
		SpoolDir: dir, SpoolMaxBytes: 1 << 20,
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	deadline := time.Now().Add(3 * time.Second)
	for r.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("sink up but not ready: %v", r.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	srv.Stop()
	deadline = time.Now().Add(idleProbe + 3*time.Second)
	for r.Ready() == nil {
		if time.Now().After(deadline) {
			t.Fatal("an idle recorder never noticed its sink went away")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHealthySinkBypassesTheSpool: while the sink is up and the spool is
// empty, events go straight to the sink, in order, and nothing is written
// to the spool.
func TestHealthySinkBypassesTheSpool(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	c := baseSink(SinkRedis)
	c.SpoolDir = t.TempDir()
	// A sink slower than the usual 40 ms (a loaded test machine) would
	// rightly send a batch to the spool.
	r := newTestRecorder(t, withRedis(c, srv.Addr()), Options{directTimeout: 5 * time.Second})
	want := recordAll(t, r, 0, 200)
	got := redisStream(t, srv.Addr(), c.Redis.Stream)
	if len(got) != len(want) {
		t.Fatalf("%d events in the stream once Record returned, want %d: recorded means accepted by the sink", len(got), len(want))
	}
	if dups := checkDelivered(t, got, want); dups != 0 {
		t.Errorf("%d duplicates", dups)
	}
	ents, err := os.ReadDir(c.SpoolDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), segSuffix) {
			continue
		}
		if fi, err := e.Info(); err != nil || fi.Size() != 0 {
			t.Errorf("spool segment %s holds %d bytes, want none while the sink is up", e.Name(), fi.Size())
		}
	}
	for _, result := range []string{resultRecorded, resultDelivered} {
		if n := r.total(TypeBreakerRejected, result) + r.total(TypeRateLimited, result); n != 200 {
			t.Errorf("%s %v, want 200", result, n)
		}
	}
}

// TestSlowSinkBacksOff: a batch the sink does not take within the direct
// timeout goes to the spool, and so do the batches after it for a while,
// even once the spool has drained; then batches go straight to the sink
// again. Nothing is lost, and only the batch that timed out may arrive
// twice.
func TestSlowSinkBacksOff(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	c := baseSink(SinkRedis)
	c.SpoolDir = t.TempDir()
	const timeout, backoff = time.Second, 5 * time.Second
	r := newTestRecorder(t, withRedis(c, srv.Addr()), Options{directTimeout: timeout, directBackoff: backoff, RecordWait: 2 * waitTimeout})
	read := func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }
	drained := func() bool { return r.spool.pending.Load() == 0 }

	want := recordAll(t, r, 0, 1)
	if n := r.directs.Load(); n != 1 {
		t.Fatalf("%d batches sent straight to a healthy sink, want 1", n)
	}
	// Writes wait in Redis longer than the direct timeout, then run.
	srv.Do(t, "CLIENT", "PAUSE", strconv.Itoa(int(timeout.Milliseconds())+500), "WRITE")
	slow := time.Now()
	want = append(want, recordAll(t, r, 1, 2)...)
	if n := r.directs.Load(); n != 2 {
		t.Fatalf("%d batches sent straight to the sink, want 2", n)
	}
	if !strings.Contains(r.log.String(), "batches go through the spool") {
		t.Errorf("the slow sink was not reported; log:\n%s", r.log.String())
	}
	waitFor(t, "the spool drained", drained)

	// The backoff runs until at least slow + timeout + backoff.
	want = append(want, recordAll(t, r, 2, 3)...)
	if time.Since(slow) < timeout+backoff {
		if n := r.directs.Load(); n != 2 {
			t.Fatalf("a batch went straight to the sink %v after it was too slow, within the backoff", time.Since(slow))
		}
	} else {
		t.Logf("the machine took %v to drain the spool: the backoff had passed, nothing to check", time.Since(slow))
	}
	// Then straight to the sink again.
	for i := 3; r.directs.Load() == 2; i++ {
		if time.Since(slow) > timeout+backoff+waitTimeout {
			t.Fatalf("no batch went straight to the sink %v after the backoff began", time.Since(slow))
		}
		waitFor(t, "the spool drained", drained)
		want = append(want, recordAll(t, r, i, i+1)...)
		time.Sleep(100 * time.Millisecond)
	}
	if took := time.Since(slow); took < backoff {
		t.Fatalf("straight to the sink again after %v, before the backoff of %v", took, backoff)
	}
	waitFor(t, "every event in the sink", func() bool { return len(read()) >= len(want) })
	if dups := checkDelivered(t, read(), want); dups > 1 {
		t.Errorf("%d duplicates, want at most the event that timed out", dups)
	}
}

// TestFileSinkCutsATornLine: a file sink whose file ends in a line that a
// crash left half written (never fsynced, so never acknowledged) cuts it
// when it opens, and the next event starts on a line of its own; whole
// lines before it stay. The torn line is longer than the 64 KiB the sink
// reads back at a time.
func TestFileSinkCutsATornLine(t *testing.T) {
	t.Parallel()
	for _, torn := range []string{`{"id":"half`, `{"id":"long","body":"` + strings.Repeat("x", 100_000)} {
		c := baseSink(SinkFile)
		c.File.Path = filepath.Join(t.TempDir(), "events.jsonl")
		first := newTestRecorder(t, c, Options{})
		want := recordAll(t, first, 0, 2)
		first.Close()
		f, err := os.OpenFile(c.File.Path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(torn); err != nil {
			t.Fatal(err)
		}
		f.Close()

		r := newTestRecorder(t, c, Options{})
		want = append(want, recordAll(t, r, 2, 3)...)
		got := fileLines(t, c.File.Path) // fails on a line that is not an event
		if dups := checkDelivered(t, got, want); dups != 0 || len(got) != len(want) {
			t.Fatalf("torn line of %d bytes: %d lines with %d duplicates, want %d", len(torn), len(got), dups, len(want))
		}
	}
}

// Recorded events hold the headers events.headers names, Authorization's
// bearer tokens among them by default: the file sink and the spool are
// readable by their owner alone.
func TestRecordedFilesArePrivate(t *testing.T) {
	t.Parallel()
	c := baseSink(SinkFile)
	c.File.Path = filepath.Join(t.TempDir(), "events.jsonl")
	c.SpoolDir = filepath.Join(t.TempDir(), "spool")
	r := newTestRecorder(t, c, Options{})
	recordAll(t, r, 0, 2)
	r.Close()
	paths := []string{c.File.Path, c.SpoolDir}
	segs, _ := filepath.Glob(filepath.Join(c.SpoolDir, "*"))
	for _, p := range append(paths, segs...) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: others may read recorded tokens", p, fi.Mode().Perm())
		}
	}
}
