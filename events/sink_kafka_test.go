package events

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka: franz-go's kfake, a Kafka cluster in this process that speaks the
// real protocol, with three brokers on free ports.

const (
	kafkaTopic      = "floodgate-events"
	kafkaPartitions = 3
)

func startKafka(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(3), kfake.SeedTopics(kafkaPartitions, kafkaTopic)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// kafkaCase is a recorder's sink on the cluster at addrs, with a spool.
func kafkaCase(t testing.TB, addrs []string) Sink {
	c := baseSink(SinkKafka)
	c.Kafka.Brokers = addrs
	c.SpoolDir = t.TempDir()
	return c
}

// kafkaStored is one record of the topic.
type kafkaStored struct {
	stored
	key       string
	partition int32
	headers   map[string]string
}

// kafkaRecords reads the whole topic, partition by partition in offset
// order, with the client options opts (TLS, SASL) besides; a cluster that
// is down reads as nothing yet.
func kafkaRecords(t testing.TB, addrs []string, opts ...kgo.Opt) []kafkaStored {
	t.Helper()
	opts = append(opts, kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(kafkaTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, kafkaTopic)
	if err != nil {
		return nil
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	var out []kafkaStored
	for int64(len(out)) < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			s := kafkaStored{key: string(r.Key), partition: r.Partition, headers: map[string]string{}}
			for _, h := range r.Headers {
				s.headers[h.Key] = string(h.Value)
			}
			s.id, s.data = s.headers["id"], string(r.Value)
			out = append(out, s)
		})
	}
	return out
}

// checkKafka checks that every event of want is in the topic, and in
// order within each partition, which is the order Kafka promises.
func checkKafka(t testing.TB, got []kafkaStored, want []stored) int {
	t.Helper()
	return checkKafkaCopies(t, got, want, false)
}

// holdsAll says whether every event of want is in got. A count would
// not do: a batch sent again after a leader moved is in the topic twice,
// and the count reaches want's while an event is still on its way.
func holdsAll(got []kafkaStored, want []stored) bool {
	in := make(map[string]bool, len(got))
	for _, r := range got {
		in[r.id] = true
	}
	for _, w := range want {
		if !in[w.id] {
			return false
		}
	}
	return true
}

// checkKafkaCopies is checkKafka; with last, each event's last copy is
// the one in order (see TestKafkaTopicRefusesWrites).
func checkKafkaCopies(t testing.TB, got []kafkaStored, want []stored, last bool) int {
	t.Helper()
	if last {
		seen := map[string]bool{}
		var kept []kafkaStored
		for i := len(got) - 1; i >= 0; i-- {
			if !seen[got[i].id] {
				seen[got[i].id] = true
				kept = append(kept, got[i])
			}
		}
		slices.Reverse(kept)
		dups := len(got) - len(kept)
		checkKafkaCopies(t, kept, want, false)
		return dups
	}
	part := map[string]int32{}
	byPart := map[int32][]stored{}
	for _, r := range got {
		if _, ok := part[r.id]; !ok {
			part[r.id] = r.partition
		}
		byPart[r.partition] = append(byPart[r.partition], r.stored)
	}
	wantPart := map[int32][]stored{}
	for _, w := range want {
		p, ok := part[w.id]
		if !ok {
			t.Fatalf("event %s was acknowledged but is not in the topic (%d records there)", w.id, len(got))
		}
		wantPart[p] = append(wantPart[p], w)
	}
	dups := 0
	for p, w := range wantPart {
		dups += checkDelivered(t, byPart[p], w)
	}
	return dups
}

// TestKafkaDelivered records events and consumes them back: the key is the
// first limit's key, the headers the id, route and type, the value the
// event's JSON, and one key's events are on one partition, in order.
func TestKafkaDelivered(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	c := kafkaCase(t, k.ListenAddrs())
	r := newTestRecorder(t, c, Options{directTimeout: deliverTimeout})
	const n = 60
	want := recordAll(t, r, 0, n)
	// An event without keys gets no record key.
	admin := &Event{Type: TypeAdminAction, Action: ActionForceBreaker, State: "open"}
	if !r.Record(context.Background(), admin) {
		t.Fatal("Record(admin action) = false")
	}
	want = append(want, stored{id: admin.ID, data: encoded(t, admin)})
	// Audited events get their key from the event, in the writer.
	const audited = 10
	for i := n; i < n+audited; i++ {
		e := testEvent(i)
		r.Audit(e)
		want = append(want, stored{id: e.ID, data: encoded(t, e)})
	}

	var got []kafkaStored
	waitFor(t, "every event in the topic", func() bool { got = kafkaRecords(t, k.ListenAddrs()); return holdsAll(got, want) })
	if dups := checkKafka(t, got, want); dups != 0 || len(got) != len(want) {
		t.Fatalf("%d records with %d duplicates, want %d and none", len(got), dups, len(want))
	}
	keyPart := map[string]int32{}
	parts := map[int32]bool{}
	for _, g := range got {
		var e Event
		if err := jsonUnmarshal(g.data, &e); err != nil {
			t.Fatal(err)
		}
		wantKey := ""
		if v := e.Keys["user"]; v != nil {
			wantKey = v[0] + "|" + v[1]
		}
		if g.key != wantKey {
			t.Errorf("event %s: key %q, want %q", e.ID, g.key, wantKey)
		}
		if g.headers["id"] != e.ID || g.headers["route"] != e.Route || g.headers["type"] != e.Type || len(g.headers) != 3 {
			t.Errorf("event %s: headers %v, want id, route %q and type %q", e.ID, g.headers, e.Route, e.Type)
		}
		if wantKey == "" {
			continue
		}
		if p, ok := keyPart[g.key]; ok && p != g.partition {
			t.Errorf("key %q on partitions %d and %d", g.key, p, g.partition)
		}
		keyPart[g.key] = g.partition
		parts[g.partition] = true
	}
	if len(parts) < 2 {
		t.Errorf("7 keys all on partitions %v of %d", parts, kafkaPartitions)
	}
	waitFor(t, "the delivered counts", func() bool {
		return r.total(TypeBreakerRejected, resultDelivered)+r.total(TypeRateLimited, resultDelivered) == n+audited
	})
	if err := r.Ready(); err != nil {
		t.Errorf("Ready() = %v with a healthy cluster", err)
	}
}

// freePorts reserves n loopback ports, for a cluster to start on later.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	return ports
}

// TestKafkaDownAtStart starts a recorder before any broker listens: the
// events wait in the spool, Ready says the sink is down, and once the
// cluster listens on those addresses every event reaches the topic, in
// order.
func TestKafkaDownAtStart(t *testing.T) {
	t.Parallel()
	ports := freePorts(t, 3)
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	r := newTestRecorder(t, kafkaCase(t, addrs), Options{})
	want := recordAll(t, r, 0, 100)
	waitFor(t, "Ready to report the sink down", func() bool { return r.Ready() != nil })
	if got := r.spooledGauge(); got == 0 {
		t.Errorf("gateway_events_spooled = 0 with the cluster down")
	}
	k := startKafka(t, kfake.Ports(ports...))
	want = append(want, recordAll(t, r, 100, 200)...)
	var got []kafkaStored
	waitFor(t, "every event in the topic", func() bool { got = kafkaRecords(t, k.ListenAddrs()); return holdsAll(got, want) })
	dups := checkKafka(t, got, want)
	t.Logf("%d acknowledged, %d duplicates in the topic", len(want), dups)
	waitFor(t, "Ready once the cluster is up", func() bool { return r.Ready() == nil })
	waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
}

// refuseProduce makes every broker answer every produce with code until
// the returned function is called: the topic refuses writes, as it does
// when fewer replicas are in sync than min.insync.replicas asks.
func refuseProduce(k *kfake.Cluster, code int16) (refused *atomic.Int64, stop func()) {
	refused = new(atomic.Int64)
	var on atomic.Bool
	on.Store(true)
	k.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !on.Load() {
			k.DropControl()
			return nil, nil, false
		}
		k.KeepControl()
		refused.Add(1)
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		resp.Version = pr.Version
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return refused, func() { on.Store(false) }
}

// TestKafkaTopicRefusesWrites records while the brokers refuse every
// produce: the events are spooled, and delivered once the topic takes
// writes again, nothing lost. A retriable refusal (not enough replicas)
// is retried by the producer in place: every event's first copy is in
// order. A refusal that is not (the topic not authorized) fails the
// refused batch, and a later batch of the same partition, sent after the
// refusal ended, can be stored before the spool sends the refused one
// again, with those after it: then each event's last copy is in order,
// not its first (a consumer that keeps the last copy of each id reads
// them in order).
func TestKafkaTopicRefusesWrites(t *testing.T) {
	t.Parallel()
	for _, code := range []int16{kerr.NotEnoughReplicas.Code, kerr.TopicAuthorizationFailed.Code} {
		t.Run(kerr.ErrorForCode(code).Error(), func(t *testing.T) {
			t.Parallel()
			k := startKafka(t)
			r := newTestRecorder(t, kafkaCase(t, k.ListenAddrs()), Options{})
			want := recordAll(t, r, 0, 20)
			waitFor(t, "every event in the topic", func() bool { return len(kafkaRecords(t, k.ListenAddrs())) >= 20 })

			refused, stop := refuseProduce(k, code)
			want = append(want, recordAll(t, r, 20, 120)...)
			waitFor(t, "a refused produce", func() bool { return refused.Load() > 0 })
			waitFor(t, "events in the spool", func() bool { return r.spooledGauge() > 0 })
			stop()
			want = append(want, recordAll(t, r, 120, 150)...)
			var got []kafkaStored
			waitFor(t, "every event in the topic", func() bool { got = kafkaRecords(t, k.ListenAddrs()); return holdsAll(got, want) })
			dups := checkKafkaCopies(t, got, want, code == kerr.TopicAuthorizationFailed.Code)
			t.Logf("%d acknowledged, %d produces refused, %d duplicates in the topic", len(want), refused.Load(), dups)
			waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
		})
	}
}

// TestKafkaLeaderMoves moves every partition's leadership to another
// broker while events are recorded: the producer finds the new leaders
// and every event reaches the topic, in order.
func TestKafkaLeaderMoves(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	r := newTestRecorder(t, kafkaCase(t, k.ListenAddrs()), Options{})
	var want []stored
	for round := range 3 {
		want = append(want, recordAll(t, r, round*50, round*50+50)...)
		for p := range int32(kafkaPartitions) {
			leader := k.LeaderFor(kafkaTopic, p)
			if err := k.MoveTopicPartition(kafkaTopic, p, (leader+1)%3); err != nil {
				t.Fatalf("MoveTopicPartition(%d): %v", p, err)
			}
		}
	}
	want = append(want, recordAll(t, r, 150, 200)...)
	var got []kafkaStored
	waitFor(t, "every event in the topic", func() bool { got = kafkaRecords(t, k.ListenAddrs()); return holdsAll(got, want) })
	dups := checkKafka(t, got, want)
	t.Logf("%d acknowledged, %d duplicates in the topic", len(want), dups)
}

// TestKafkaMissingTopic: a topic that does not exist is the sink down,
// with the topic named in Ready, and the events wait in the spool.
func TestKafkaMissingTopic(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	c := kafkaCase(t, k.ListenAddrs())
	c.Kafka.Topic = "nowhere"
	r := newTestRecorder(t, c, Options{})
	recordAll(t, r, 0, 5)
	waitFor(t, "Ready to report the topic", func() bool { err := r.Ready(); return err != nil && strings.Contains(err.Error(), "nowhere") })
	if got := r.spooledGauge(); got != 5 {
		t.Errorf("gateway_events_spooled = %v, want 5", got)
	}
}

func TestKafkaSinkCheck(t *testing.T) {
	t.Parallel()
	ok := KafkaSink{Brokers: []string{"127.0.0.1:9092"}, Topic: "t"}
	cases := []struct {
		name string
		edit func(*KafkaSink)
		want string // "" for none
	}{
		{"defaults", func(*KafkaSink) {}, ""},
		{"every option", func(c *KafkaSink) {
			c.Acks, c.Compression, c.ClientID = "leader", "zstd", "gw-1"
			c.SASL = &KafkaSASL{Mechanism: "scram-sha-512", Username: "u", Password: "p"}
		}, ""},
		{"no broker", func(c *KafkaSink) { c.Brokers = nil }, "no broker"},
		{"no topic", func(c *KafkaSink) { c.Topic = "" }, "no topic"},
		{"acks", func(c *KafkaSink) { c.Acks = "none" }, `acks "none"`},
		{"compression", func(c *KafkaSink) { c.Compression = "brotli" }, `compression "brotli"`},
		{"sasl", func(c *KafkaSink) { c.SASL = &KafkaSASL{Mechanism: "gssapi"} }, `mechanism "gssapi"`},
	}
	for _, tc := range cases {
		c := ok
		tc.edit(&c)
		_, err := newSink(Sink{Kind: SinkKafka, Kafka: c})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: newSink = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestLimitingKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		keys map[string][]string
		want string
	}{
		{nil, ""},
		{map[string][]string{"user": {"u1"}}, "u1"},
		{map[string][]string{"per-user": {"u1", "/a"}, "global-ip": {"10.0.0.1"}}, "10.0.0.1"},
	} {
		if got := string(limitingKey(tc.keys)); got != tc.want {
			t.Errorf("limitingKey(%v) = %q, want %q", tc.keys, got, tc.want)
		}
	}
}

// TestKafkaRecordRefusedForGood: a record the topic refuses for good
// (MESSAGE_TOO_LARGE, a topic whose max.message.bytes is smaller than the
// event) is set aside in the spool directory's refused file, counted
// failed and logged, and the events behind it are delivered: it neither
// blocks the spool nor is sent again and again.
func TestKafkaRecordRefusedForGood(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	c := kafkaCase(t, k.ListenAddrs())
	r := newTestRecorder(t, c, Options{})
	refused, stop := refuseProduce(k, kerr.MessageTooLarge.Code)
	poison := recordAll(t, r, 0, 1)[0]
	path := filepath.Join(c.SpoolDir, refusedFile)
	waitFor(t, "the event in the refused file", func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), poison.id)
	})
	stop()
	want := recordAll(t, r, 1, 11)
	var got []kafkaStored
	waitFor(t, "the events behind it in the topic", func() bool { got = kafkaRecords(t, k.ListenAddrs()); return holdsAll(got, want) })
	for _, g := range got {
		if g.id == poison.id {
			t.Errorf("the refused event %s reached the topic", g.id)
		}
	}
	checkKafka(t, got, want)
	waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
	if n := r.total(TypeBreakerRejected, resultFailed); n != 1 {
		t.Errorf("failed = %v, want 1", n)
	}
	b, _ := os.ReadFile(path)
	if string(b) != poison.data+"\n" {
		t.Errorf("refused file = %q, want the event's JSON line %q", b, poison.data+"\n")
	}
	t.Logf("%d produces refused", refused.Load())
}

// TestKafkaEventTooLarge: an event longer than a Kafka record can be is
// refused at once, not queued.
func TestKafkaEventTooLarge(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	r := newTestRecorder(t, kafkaCase(t, k.ListenAddrs()), Options{})
	e := testEvent(0)
	e.Body = make([]byte, 800<<10) // 1.07 MB in base64
	if r.Record(context.Background(), e) {
		t.Fatal("Record of a 1 MB event = true")
	}
	if n := r.total(TypeBreakerRejected, resultFailed); n != 1 {
		t.Errorf("failed = %v, want 1", n)
	}
}

// TestEventTime: a Kafka record carries its event's time, read from the
// id, so that a spooled event keeps its place in a replay's merge.
func TestEventTime(t *testing.T) {
	at := time.UnixMilli(1765000000123)
	if got := eventTime(ids.next(at)); !got.Equal(at) {
		t.Errorf("eventTime = %v, want %v", got, at)
	}
	for _, id := range []string{"", "x", "zz" + strings.Repeat("0", 30), strings.Repeat("0", 32)} {
		if got := eventTime(id); !got.IsZero() {
			t.Errorf("eventTime(%q) = %v, want zero", id, got)
		}
	}
}

// TestKafkaTopicMadeAgain deletes the topic while events are recorded and
// makes it again: meanwhile Ready names the topic rather than a timeout,
// the events wait in the spool, and once the topic is back they are
// delivered without a restart, though its id changed.
func TestKafkaTopicMadeAgain(t *testing.T) {
	t.Parallel()
	k := startKafka(t)
	r := newTestRecorder(t, kafkaCase(t, k.ListenAddrs()), Options{})
	recordAll(t, r, 0, 5)
	waitFor(t, "the first events in the topic", func() bool { return len(kafkaRecords(t, k.ListenAddrs())) >= 5 })
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	if _, err := adm.DeleteTopics(ctx, kafkaTopic); err != nil {
		t.Fatalf("DeleteTopics: %v", err)
	}
	want := recordAll(t, r, 5, 25)
	waitFor(t, "Ready to name the topic", func() bool {
		err := r.Ready()
		return err != nil && strings.Contains(err.Error(), kafkaTopic)
	})
	if _, err := adm.CreateTopics(ctx, kafkaPartitions, 1, nil, kafkaTopic); err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	var got []kafkaStored
	waitFor(t, "the events in the new topic", func() bool { got = kafkaRecords(t, k.ListenAddrs()); return holdsAll(got, want) })
	checkKafka(t, got, want)
	waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
}

// TestKafkaBatchTooLargeForTheTopic: a topic whose max.message.bytes is
// below the client's batch bound refuses batches of events that fit one
// by one; each such event is sent again alone and delivered, and none is
// set aside.
func TestKafkaBatchTooLargeForTheTopic(t *testing.T) {
	t.Parallel()
	k := startKafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "12000"}))
	var produces atomic.Int64
	k.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		produces.Add(1)
		return nil, nil, false
	})
	c := kafkaCase(t, k.ListenAddrs())
	r := newTestRecorder(t, c, Options{})
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		e := testEvent(i)
		e.Body = []byte(strings.Repeat("y", 3000)) // 4 KB in base64: three fit in a batch of 12 KB
		wg.Go(func() {
			if !r.Record(context.Background(), e) {
				t.Errorf("Record(%d) = false", i)
			}
		})
	}
	wg.Wait()
	waitFor(t, "every event in the topic", func() bool { return len(kafkaRecords(t, k.ListenAddrs())) >= n })
	// Three fit in a batch: a forwarder that halves a refused batch finds
	// that in a few refusals, and sends about one produce an event (a
	// delivery of two goes to two brokers). Sending the first of a refused
	// batch alone, and the rest again whole, took 106-110 produces.
	t.Logf("%d produces for %d events", produces.Load(), n)
	if p := produces.Load(); p > 2*n {
		t.Errorf("%d produces for %d events, want at most %d", p, n, 2*n)
	}
	if b, err := os.ReadFile(filepath.Join(c.SpoolDir, refusedFile)); err == nil {
		t.Errorf("%d events set aside, want none", bytes.Count(b, []byte("\n")))
	}
	if f := r.total(TypeBreakerRejected, resultFailed); f != 0 {
		t.Errorf("failed = %v, want 0", f)
	}
}
