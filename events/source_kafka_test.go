package events

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordKafka records 30 events of two routes and four types through the
// kafka sink, and returns the sink and the ids replay of lucky-meal takes.
func recordKafka(t *testing.T, addrs []string) (Sink, []string) {
	t.Helper()
	c := kafkaCase(t, addrs)
	r := newTestRecorder(t, c, Options{directTimeout: deliverTimeout})
	var want []string
	for i := range 30 {
		e := testEvent(i)
		e.Type = TypeBreakerRejected
		switch i % 5 {
		case 1:
			e.Route = "other"
		case 2:
			e.Type = TypeAdmitted
		case 3:
			e.Type = TypeOverloaded
		}
		if !r.Record(context.Background(), e) {
			t.Fatalf("Record(%d) = false", i)
		}
		if e.Route == "lucky-meal" && e.Type != TypeAdmitted {
			want = append(want, e.ID)
		}
	}
	waitFor(t, "delivery", func() bool { return len(kafkaRecords(t, addrs)) >= 30 })
	r.Close()
	return c, want
}

func openKafka(t *testing.T, c Sink, o Options) Source {
	t.Helper()
	src, err := OpenSource(context.Background(), c, "lucky-meal", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return src
}

// partitionWriter is a client that produces each record to the
// partition the record names.
func partitionWriter(t *testing.T, k *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.ListenAddrs()...), kgo.DefaultProduceTopic(kafkaTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// writeEvent produces e to partition p as the sink would (toKafka).
func writeEvent(t *testing.T, cl *kgo.Client, e *Event, p int32) {
	t.Helper()
	data, err := encode(e)
	if err != nil {
		t.Fatal(err)
	}
	rec := &toKafka([]record{{id: e.ID, typ: e.Type, data: data}})[0].Record
	rec.Partition = p
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// replayAll takes every event src has, marking each done, and returns
// their ids in the order Next gave them.
func replayAll(t *testing.T, src Source) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for {
		e, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("after %v: Next: %v", got, err)
		}
		got = append(got, e.ID)
		if err := src.Done(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}

func pendingIDs(t *testing.T, src Source) []string {
	t.Helper()
	var ids []string
	if err := src.Pending(context.Background(), func(e *Event) bool { ids = append(ids, e.ID); return true }); err != nil {
		t.Fatalf("Pending: %v", err)
	}
	return ids
}

// sameSet says whether a and b hold the same ids, each once. Kafka keeps
// order within a partition only; TestKafkaDelivered checks that order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return equal(a, b)
}

// groupOffsets are the offsets replay of lucky-meal committed.
func groupOffsets(t *testing.T, addrs []string) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).FetchOffsets(context.Background(), ReplayGroup("lucky-meal"))
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil // kfake's answer for a group that never committed
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// TestKafkaSource replays a route from the topic: only its events of the
// types replay takes come back, each once; a replay stopped with events
// done and one in flight resumes with the rest, the one in flight
// included; and once all are done, nothing is left.
func TestKafkaSource(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	addrs := k.ListenAddrs()
	c, want := recordKafka(t, addrs)
	ctx := context.Background()

	src := openKafka(t, c, Options{})
	if got := pendingIDs(t, src); !sameSet(got, want) {
		t.Fatalf("Pending before any replay = %v, want %v", got, want)
	}
	var done []string
	for range 4 {
		e, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := src.Done(ctx, e); err != nil {
			t.Fatal(err)
		}
		done = append(done, e.ID)
	}
	// Three taken at once, as --parallel takes them; the last never done.
	var taken []*Event
	for range 3 {
		e, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, e)
	}
	for _, e := range taken[:2] {
		if err := src.Done(ctx, e); err != nil {
			t.Fatal(err)
		}
		done = append(done, e.ID)
	}
	src.Close()

	var rest []string
	for _, id := range want {
		if !slices.Contains(done, id) {
			rest = append(rest, id)
		}
	}
	src = openKafka(t, c, Options{})
	if got := pendingIDs(t, src); !sameSet(got, rest) {
		t.Fatalf("Pending after 6 done = %v, want %v", got, rest)
	}
	var got []string
	for {
		e, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.ID)
		if err := src.Done(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if !sameSet(got, rest) {
		t.Fatalf("after reopening, Next = %v, want %v", got, rest)
	}
	if !slices.Contains(got, taken[2].ID) {
		t.Errorf("the event in flight at the stop, %s, did not come again", taken[2].ID)
	}
	src.Close()

	src = openKafka(t, c, Options{})
	if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next once all are done = %v, want io.EOF", err)
	}
	if got := pendingIDs(t, src); len(got) != 0 {
		t.Fatalf("Pending once all are done = %v", got)
	}
	// Every record passed, other routes' included: the group is at the
	// end of each partition.
	ends := map[int32]int64{}
	for _, r := range kafkaRecords(t, addrs) {
		ends[r.partition]++
	}
	if offs := groupOffsets(t, addrs); !equalOffsets(offs, ends) {
		t.Errorf("committed offsets %v, want the ends %v", offs, ends)
	}
}

func equalOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, o := range a {
		if b[p] != o {
			return false
		}
	}
	return true
}

// TestKafkaSourceDryRun: Pending, as --dry-run calls it, commits nothing;
// nor does Next without Done for the partitions it took events from, so a
// later replay gets every event.
func TestKafkaSourceDryRun(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	addrs := k.ListenAddrs()
	c, want := recordKafka(t, addrs)
	ctx := context.Background()

	src := openKafka(t, c, Options{})
	for range 2 {
		if got := pendingIDs(t, src); !sameSet(got, want) {
			t.Fatalf("Pending = %v, want %v", got, want)
		}
	}
	src.Close()
	if offs := groupOffsets(t, addrs); len(offs) != 0 {
		t.Fatalf("Pending committed %v", offs)
	}

	src = openKafka(t, c, Options{})
	for range want {
		if _, err := src.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	src.Close()
	src = openKafka(t, c, Options{})
	if got := pendingIDs(t, src); !sameSet(got, want) {
		t.Fatalf("Pending after Next without Done = %v, want %v", got, want)
	}
}

// TestKafkaSourceBound writes an oversized and a malformed record of the
// route between two events: the source reports each, naming its offset,
// reads the events on either side, and passes over both for good.
func TestKafkaSourceBound(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	addrs := k.ListenAddrs()
	c := kafkaCase(t, addrs)
	ids, data := boundEvents(t)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(kafkaTopic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	headers := []kgo.RecordHeader{{Key: "route", Value: []byte("lucky-meal")}, {Key: "type", Value: []byte(TypeBreakerRejected)}}
	big := `{"type":"breaker_rejected","route":"lucky-meal","body":"` + strings.Repeat("A", boundMax) + `"}`
	for _, v := range []string{data[0], big, `{"type":"breaker_rejected",`, data[1]} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Headers: headers}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	log, buf := testLogger(t)
	o := Options{Logger: log, MaxEntryBytes: boundMax}
	src := openKafka(t, c, o)
	pending, next := readBound(t, src)
	if !equal(pending, ids) || !equal(next, ids) {
		t.Fatalf("Pending = %v, Next = %v; want %v for both", pending, next, ids)
	}
	logged := buf.String()
	if strings.Count(logged, `"offset":1`) != 2 || !strings.Contains(logged, "longer than any") {
		t.Errorf("the oversized record (offset 1) is not named twice (Pending, Next):\n%s", logged)
	}
	if strings.Count(logged, `"offset":2`) != 2 || !strings.Contains(logged, "not an event") {
		t.Errorf("the malformed record (offset 2) is not named twice (Pending, Next):\n%s", logged)
	}
	src.Close()
	src = openKafka(t, c, o)
	if _, err := src.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after reopening = %v, want io.EOF", err)
	}
}

// TestKafkaSourceMergesByTime: a replay reads the partitions in the order
// of their events' times, whatever their offsets: here each partition
// holds events in time order, but a later partition's first event is the
// earliest of all, and the events of one partition interleave with the
// others'.
func TestKafkaSourceMergesByTime(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	c := kafkaCase(t, k.ListenAddrs())
	cl := partitionWriter(t, k)
	base := time.UnixMilli(1765000000000)
	// Event i at base+i ms, on partition (5-i)%3: partition 2 holds 0, 3;
	// 1 holds 1, 4; 0 holds 2, 5. Written partition by partition, each
	// in time order.
	var want []string
	byPart := [3][]*Event{}
	for i := range 6 {
		e := testEvent(i)
		e.Route, e.Type = "lucky-meal", TypeBreakerRejected
		e.Time = base.Add(time.Duration(i) * time.Millisecond)
		e.ID = ids.next(e.Time)
		byPart[(5-i)%3] = append(byPart[(5-i)%3], e)
		want = append(want, e.ID)
	}
	for p, es := range byPart {
		for _, e := range es {
			writeEvent(t, cl, e, int32(p))
		}
	}
	got := replayAll(t, openKafka(t, c, Options{}))
	if !slices.Equal(got, want) {
		t.Errorf("replayed %v, want in time order %v", got, want)
	}
}

// TestKafkaSourceDeletedRecords: a partition whose records before the
// end were all deleted (retention, DeleteRecords) has nothing to replay,
// and the replay of the others ends rather than wait for it.
func TestKafkaSourceDeletedRecords(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	c := kafkaCase(t, k.ListenAddrs())
	cl := partitionWriter(t, k)
	var want string
	for i := range 4 {
		e := testEvent(i)
		e.Route, e.Type = "lucky-meal", TypeBreakerRejected
		e.ID = ids.next(e.Time)
		p := int32(0)
		if i == 3 {
			p, want = 1, e.ID
		}
		writeEvent(t, cl, e, p)
	}
	var gone kadm.Offsets
	gone.Add(kadm.Offset{Topic: kafkaTopic, Partition: 0, At: 3})
	if _, err := kadm.NewClient(cl).DeleteRecords(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	got := replayAll(t, openKafka(t, c, Options{}))
	if !slices.Equal(got, []string{want}) {
		t.Errorf("replayed %v, want the one event left, %s", got, want)
	}
}

// TestKafkaSourceMergeHoldsLittle: while one partition's events come
// first, the other's are fetched no further than the reader's queue
// bound, rather than held whole in memory.
func TestKafkaSourceMergeHoldsLittle(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	c := kafkaCase(t, k.ListenAddrs())
	// Small uncompressed batches: else one batch holds a partition.
	cl := partitionWriter(t, k, kgo.ProducerBatchMaxBytes(16<<10), kgo.ProducerBatchCompression(kgo.NoCompression()))
	base := time.UnixMilli(1765000000000)
	val := bytes.Repeat([]byte("v"), 1000)
	const n = 3000
	for p := range int32(2) {
		for i := range n {
			at := base.Add(time.Duration(i) * time.Millisecond)
			if p == 0 {
				// Every event of partition 0 after partition 1's: the
				// broker fills a fetch with partition 0 first.
				at = at.Add(time.Hour)
			}
			cl.Produce(context.Background(), &kgo.Record{Partition: p, Value: val, Timestamp: at}, nil)
		}
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	src := openKafka(t, c, Options{}).(*kafkaSource)
	starts, err := src.starts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rd, err := src.newReader(starts)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.close()
	most, read := 0, 0
	for {
		rec, err := rd.next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		read++
		if rec.Partition == 1 {
			most = max(most, len(rd.queued[0]))
		}
	}
	if read != 2*n {
		t.Errorf("read %d records, want %d", read, 2*n)
	}
	// A fetch that was under way when the bound was reached still lands.
	if most > 2*maxQueued {
		t.Errorf("partition 0 held %d records while partition 1 was read, want about %d at most", most, maxQueued)
	}
}
