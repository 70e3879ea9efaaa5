package events

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// boundMax is the MaxEntryBytes of the bound tests: far above the events
// they write, far below the entry they forge.
const boundMax = 64 << 10

// boundEvents are the two events the bound tests write around a forged
// entry, encoded as a recorder stores them.
func boundEvents(t *testing.T) (ids, data []string) {
	t.Helper()
	for _, i := range []int{0, 1} {
		e := testEvent(i)
		e.ID = "bound-" + strconv.Itoa(i)
		ids = append(ids, e.ID)
		data = append(data, encoded(t, e))
	}
	return ids, data
}

// readBound reads src to its end the way replay does (Pending, then Next
// and Done), and returns the ids Pending and Next gave.
func readBound(t *testing.T, src Source) (pending, next []string) {
	t.Helper()
	ctx := context.Background()
	if err := src.Pending(ctx, func(e *Event) bool { pending = append(pending, e.ID); return true }); err != nil {
		t.Fatalf("Pending: %v", err)
	}
	for {
		e, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return pending, next
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		next = append(next, e.ID)
		if err := src.Done(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSourceBoundRedis forges a stream entry of 8 MB between two events:
// the source passes over it, naming its entry id, reads the events on
// either side, and Redis sends the client a small part of the 8 MB.
func TestSourceBoundRedis(t *testing.T) {
	t.Parallel()
	srv := testredis.Start(t)
	c := withRedis(baseSink(SinkRedis), srv.Addr())
	ids, data := boundEvents(t)

	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	xadd := func(id, event string) string {
		t.Helper()
		entry, err := cl.Do(ctx, cl.B().Xadd().Key(c.Redis.Stream).Id("*").FieldValue().
			FieldValue("id", id).FieldValue("event", event).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		return entry
	}
	const forged = 8 << 20
	xadd(ids[0], data[0])
	bad := xadd("forged", `{"type":"breaker_rejected","route":"lucky-meal","body":"`+strings.Repeat("A", forged-64)+`"}`)
	xadd(ids[1], data[1])

	log, buf := testLogger(t)
	src, err := OpenSource(ctx, c, "lucky-meal", Options{Logger: log, MaxEntryBytes: boundMax})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	before := netOutput(t, srv)
	pending, next := readBound(t, src)
	sent := netOutput(t, srv) - before
	t.Logf("Redis sent the source %d bytes", sent)
	if !equal(pending, ids) || !equal(next, ids) {
		t.Fatalf("Pending = %v, Next = %v; want %v for both", pending, next, ids)
	}
	// Pending and Next each pass over the forged entry once; whole, it
	// would have been 16 MB.
	if sent > 1<<20 {
		t.Errorf("Redis sent the source %d bytes: the forged entry was read whole", sent)
	}
	logged := buf.String()
	if n := strings.Count(logged, `"entry":"`+bad+`"`); n != 2 || !strings.Contains(logged, "longer than any") {
		t.Errorf("the forged entry %s is not named twice (Pending, Next) as too long:\n%s", bad, logged)
	}
	// Passed over for good: acknowledged in the group, with the others.
	src.Close()
	src, err = OpenSource(ctx, c, "lucky-meal", Options{Logger: log, MaxEntryBytes: boundMax})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after reopening = %v, want io.EOF", err)
	}
}

// netOutput is what srv has sent its clients, in bytes.
func netOutput(t *testing.T, srv *testredis.Server) int64 {
	t.Helper()
	m := regexp.MustCompile(`total_net_output_bytes:(\d+)`).FindStringSubmatch(srv.Do(t, "INFO", "stats"))
	if m == nil {
		t.Fatal("INFO stats has no total_net_output_bytes")
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// TestSourceBoundNATS forges two messages of 512 KB between two events,
// one of them with a Nats-Msg-Size header of its own that claims it is
// small: the source passes over both, naming their sequences, reads the
// events on either side, and receives a small part of the 1 MB.
func TestSourceBoundNATS(t *testing.T) {
	t.Parallel()
	n := startNATS(t)
	c := baseSink(SinkNATS)
	c.NATS.URL = n.url()
	ids, data := boundEvents(t)

	nc, err := nats.Connect(n.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "bound", Subjects: []string{c.NATS.Subject}}); err != nil {
		t.Fatal(err)
	}
	publish := func(m *nats.Msg) uint64 {
		t.Helper()
		m.Subject = c.NATS.Subject
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	const forged = 512 << 10
	big := []byte(`{"type":"breaker_rejected","route":"lucky-meal","body":"` + strings.Repeat("A", forged-64) + `"}`)
	publish(&nats.Msg{Data: []byte(data[0])})
	bad := []uint64{publish(&nats.Msg{Data: big})}
	liar := nats.Header{}
	liar.Set(nats.MsgSize, "10")
	bad = append(bad, publish(&nats.Msg{Data: big, Header: liar}))
	publish(&nats.Msg{Data: []byte(data[1])})
	// The replay consumer as an older floodgate left it, delivering whole
	// messages: the source makes it headers-only.
	if _, err := js.CreateConsumer(ctx, "bound", jetstream.ConsumerConfig{
		Durable: ReplayGroup("lucky-meal"), FilterSubject: c.NATS.Subject,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: replayAckWait,
	}); err != nil {
		t.Fatal(err)
	}

	log, buf := testLogger(t)
	src, err := OpenSource(ctx, c, "lucky-meal", Options{Logger: log, MaxEntryBytes: boundMax})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	before := src.(*natsSource).nc.Stats().InBytes
	pending, next := readBound(t, src)
	received := src.(*natsSource).nc.Stats().InBytes - before
	t.Logf("the source received %d bytes", received)
	if !equal(pending, ids) || !equal(next, ids) {
		t.Fatalf("Pending = %v, Next = %v; want %v for both", pending, next, ids)
	}
	// Pending and Next each pass over the forged messages once; whole,
	// they would have been 2 MB.
	if received > 256<<10 {
		t.Errorf("the source received %d bytes: a forged message was read whole", received)
	}
	logged := buf.String()
	for _, seq := range bad {
		if n := strings.Count(logged, `"seq":`+strconv.FormatUint(seq, 10)+`,`); n != 2 {
			t.Errorf("the forged message %d is named %d times, want twice (Pending, Next):\n%s", seq, n, logged)
		}
	}
	if n := strings.Count(logged, `"bytes":`+strconv.Itoa(len(big))); n != 4 {
		t.Errorf("%d warnings give the forged messages' length, want 4:\n%s", n, logged)
	}
	src.Close()
	src, err = OpenSource(ctx, c, "lucky-meal", Options{Logger: log, MaxEntryBytes: boundMax})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after reopening = %v, want io.EOF", err)
	}
}
