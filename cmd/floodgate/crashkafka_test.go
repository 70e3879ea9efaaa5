package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
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

	"github.com/floodgate-gw/floodgate/internal/testnet"
)

// The Kafka crash tests hold the gateway to the promise of
// TestServeCrashKeepsRecordedEvents with a Kafka sink: the cluster is
// franz-go's kfake, three brokers in this process that speak the real
// protocol, keeping their logs in a directory so that they can be stopped
// and started again on the same ports with what they stored.

const (
	kafkaCrashTopic      = "floodgate-events"
	kafkaCrashPartitions = 3
	kafkaCrashUsers      = 7 // X-User-Id values: the record keys
	kafkaCrashBeforeDown = 60
	kafkaCrashWhileDown  = 150
	kafkaDeliverTimeout  = 30 * time.Second
)

// kafkaCrashConfig is crashConfig with a kafka sink, and a limit whose
// key is the user: its values are each event's record key. The breaker
// is forced open, so the limit is never decided.
const kafkaCrashConfig = `
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
  token: {{TOKEN}}
events:
  sink: kafka
  kafka: {brokers: [{{BROKERS}}], topic: "` + kafkaCrashTopic + `"}
  spool_dir: "{{SPOOL}}"
routes:
  - id: orders
    match: {path: /orders/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
    fallback: {record: true}
    limits:
      - name: user
        key: [header:X-User-Id]
        rate: 1000000/s
`

// testKafka is a kfake cluster on fixed ports with its logs on disk.
type testKafka struct {
	t     *testing.T
	ports []int
	addrs []string
	dir   string

	mu sync.Mutex
	c  *kfake.Cluster
}

// startTestKafka starts a cluster of three brokers on free loopback ports
// with a topic of kafkaCrashPartitions partitions.
func startTestKafka(t *testing.T) *testKafka {
	t.Helper()
	k := &testKafka{t: t, dir: t.TempDir()}
	for range 3 {
		addr := testnet.FreeAddr(t)
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		k.ports = append(k.ports, p)
		k.addrs = append(k.addrs, addr)
	}
	k.start()
	t.Cleanup(k.stop)
	return k
}

// start starts the cluster on its ports, with what its directory holds.
func (k *testKafka) start() {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	var err error
	// A port just closed can take a moment to be free again.
	deadline := time.Now().Add(waitTimeout)
	for {
		k.c, err = kfake.NewCluster(kfake.NumBrokers(3), kfake.Ports(k.ports...),
			kfake.SeedTopics(kafkaCrashPartitions, kafkaCrashTopic), kfake.DataDir(k.dir))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		k.t.Fatalf("kfake on %v: %v", k.addrs, err)
	}
}

// cluster is the running cluster.
func (k *testKafka) cluster() *kfake.Cluster {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c
}

// stop closes the cluster, which writes what it holds to its directory.
func (k *testKafka) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// brokersYAML is the brokers as a YAML flow sequence's items.
func (k *testKafka) brokersYAML() string {
	q := make([]string, len(k.addrs))
	for i, a := range k.addrs {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, ", ")
}

// topicRecord is one record of the topic.
type topicRecord struct {
	partition int32
	offset    int64
	key       string
	headers   map[string]string
	value     []byte
}

// readTopic reads the whole topic, up to the end offsets it has when
// asked, sorted by partition and offset.
func readTopic(addrs []string, topic string) ([]topicRecord, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	var out []topicRecord
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w (%d records read)", topic, err, len(out))
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			rec := topicRecord{partition: r.Partition, offset: r.Offset, key: string(r.Key), headers: map[string]string{}, value: r.Value}
			for _, h := range r.Headers {
				rec.headers[h.Key] = string(h.Value)
			}
			out = append(out, rec)
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	slices.SortFunc(out, func(a, b topicRecord) int {
		if a.partition != b.partition {
			return int(a.partition - b.partition)
		}
		return int(a.offset - b.offset)
	})
	return out, nil
}

// requestIDOf is the request id of a record's event, "" if it has none.
func requestIDOf(r topicRecord) string {
	var e struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(r.value, &e)
	return e.RequestID
}

// waitTopic polls the topic until every request of want has an event
// there, and returns the topic. It fails the test at the deadline, or if
// the gateway (whose done channel is given) exits first.
func waitTopic(t *testing.T, k *testKafka, want []*sentRequest, done <-chan struct{}) []topicRecord {
	t.Helper()
	deadline := time.Now().Add(kafkaDeliverTimeout)
	for {
		got, err := readTopic(k.addrs, kafkaCrashTopic)
		var missing []string
		if err == nil {
			seen := map[string]bool{}
			for _, r := range got {
				seen[requestIDOf(r)] = true
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
			t.Fatalf("after %v, %d of %d events answered \"recorded\": true are not in topic %s (last error: %v), e.g. %q",
				kafkaDeliverTimeout, len(missing), len(want), kafkaCrashTopic, err, missing[:min(5, len(missing))])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkTopic checks the topic as checkDelivered checks a stream, but for
// the order, which Kafka keeps within a partition only: each record's key
// is its request's user and its headers the event's id, route and type;
// one user's events are on one partition; a duplicate has the id and the
// very contents of the first copy; every request answered "recorded":
// true has its event on its user's partition, where the first copies are
// in the order the requests were answered.
func checkTopic(t *testing.T, sent []*sentRequest, attempted map[string]bool, users map[string]string, got []topicRecord) {
	t.Helper()
	keyPart := map[string]int32{}
	value := map[string][]byte{} // event id -> its first copy's value
	byPart := map[int32][]streamEvent{}
	for _, r := range got {
		var e streamEvent
		e.entryID = fmt.Sprintf("partition %d offset %d", r.partition, r.offset)
		e.field = r.headers["id"]
		if err := json.Unmarshal(r.value, &e.event); err != nil {
			t.Errorf("%s: the value %q is not JSON: %v", e.entryID, r.value, err)
			continue
		}
		if want := users[e.event.RequestID]; r.key != want {
			t.Errorf("%s: key %q, want the user %q of request %s", e.entryID, r.key, want, e.event.RequestID)
		}
		if r.headers["route"] != "orders" || r.headers["type"] != "breaker_rejected" || len(r.headers) != 3 {
			t.Errorf("%s: headers %v, want id, route orders and type breaker_rejected", e.entryID, r.headers)
		}
		if p, ok := keyPart[r.key]; ok && p != r.partition {
			t.Errorf("key %q on partitions %d and %d", r.key, p, r.partition)
		}
		keyPart[r.key] = r.partition
		if v, ok := value[e.field]; ok && !bytes.Equal(v, r.value) {
			t.Errorf("%s: a copy of event %s with other contents:\n%s\nthe first:\n%s", e.entryID, e.field, r.value, v)
		}
		if _, ok := value[e.field]; !ok {
			value[e.field] = r.value
		}
		byPart[r.partition] = append(byPart[r.partition], e)
	}
	sentPart := map[int32][]*sentRequest{}
	for _, r := range sent {
		p, ok := keyPart[users[r.id]]
		if !ok {
			if r.recorded {
				t.Errorf("request %s was answered \"recorded\": true and no event of its user %s is in the topic", r.id, users[r.id])
			}
			continue
		}
		sentPart[p] = append(sentPart[p], r)
	}
	for p, evs := range byPart {
		t.Logf("partition %d:", p)
		checkDelivered(t, sentPart[p], attempted, evs)
	}
	if len(byPart) < 2 {
		t.Errorf("%d users all on partitions %v", kafkaCrashUsers, slices.Collect(func(yield func(int32) bool) {
			for p := range byPart {
				if !yield(p) {
					return
				}
			}
		}))
	}
}

// kafkaSender sends requests to the open breaker from workers until the
// gateway is killed.
type kafkaSender struct {
	t *testing.T
	p *proc

	mu        sync.Mutex
	sent      []*sentRequest
	attempted map[string]bool
	users     map[string]string // request id -> X-User-Id

	// gate is read-locked by a worker around each request: the test
	// write-locks it to hold the workers while it waits for the gateway.
	gate     sync.RWMutex
	wg       sync.WaitGroup
	killed   atomic.Bool
	answered chan struct{}
	errs     chan error
}

func startKafkaSender(t *testing.T, p *proc, prefix string) *kafkaSender {
	s := &kafkaSender{
		t: t, p: p, attempted: map[string]bool{}, users: map[string]string{},
		answered: make(chan struct{}, crashWorkers*crashMaxPerWorker),
		errs:     make(chan error, crashWorkers),
	}
	for w := range crashWorkers {
		s.wg.Go(func() {
			for i := range crashMaxPerWorker {
				id := fmt.Sprintf("%s-w%d-%03d", prefix, w, i)
				// Every worker sends as every user in turn, so that one
				// user's requests come from several workers at once.
				user := fmt.Sprintf("user-%d", (w+i)%kafkaCrashUsers)
				s.mu.Lock()
				s.attempted[id], s.users[id] = true, user
				s.mu.Unlock()
				s.gate.RLock()
				r, err := tryRefusedAs(p.f.listen, id, user)
				s.gate.RUnlock()
				if err != nil {
					if !s.killed.Load() {
						s.errs <- err
					}
					return
				}
				s.mu.Lock()
				s.sent = append(s.sent, r)
				s.mu.Unlock()
				s.answered <- struct{}{}
			}
			s.errs <- fmt.Errorf("worker %d sent %d requests and the gateway was still not killed", w, crashMaxPerWorker)
		})
	}
	return s
}

// await waits for n more answers.
func (s *kafkaSender) await(n int) {
	s.t.Helper()
	timeout := time.After(waitTimeout)
	for range n {
		select {
		case <-s.answered:
		case err := <-s.errs:
			s.killed.Store(true) // the workers stop at their next error
			s.p.cmd.Process.Kill()
			s.t.Fatal(err)
		case <-timeout:
			s.killed.Store(true)
			s.p.cmd.Process.Kill()
			s.t.Fatalf("timed out after %v waiting for %d answers", waitTimeout, n)
		}
	}
}

// kill SIGKILLs the gateway while the workers send, and waits for them.
func (s *kafkaSender) kill() {
	s.t.Helper()
	s.killed.Store(true)
	if err := s.p.cmd.Process.Kill(); err != nil {
		s.t.Fatal(err)
	}
	s.p.wait()
	s.wg.Wait()
	close(s.errs)
	for err := range s.errs {
		s.t.Fatal(err)
	}
}

// TestServeCrashKafka kills a gateway recording to Kafka while requests
// are in flight: with the cluster gone (events wait in the spool), with
// the topic refusing writes (not enough replicas, which the producer
// retries), and with the cluster up and produce requests held at the
// brokers (the producer has records in flight, which the brokers store
// after the gateway is gone). A gateway started again on the spool
// delivers every event it answered "recorded": true for; a copy has its
// first's id and contents, and the first copies are in order on each
// partition.
func TestServeCrashKafka(t *testing.T) {
	skipWithoutSignals(t)
	t.Parallel()
	for _, mode := range []string{"cluster down", "writes refused", "deliveries in flight"} {
		t.Run(mode, func(t *testing.T) { testServeCrashKafka(t, mode) })
	}
}

func testServeCrashKafka(t *testing.T, mode string) {
	k := startTestKafka(t)
	f := newFixture(t, nil)
	spool := filepath.Join(f.dir, "spool")
	f.write(strings.NewReplacer("{{BROKERS}}", k.brokersYAML(), "{{SPOOL}}", spool).Replace(kafkaCrashConfig))
	p := f.serve()
	if r := p.admin("POST", "/admin/breakers/orders?state=open"); r.code != 200 {
		t.Fatalf("forcing the breaker open: %d %s", r.code, r.body)
	}
	p.waitFor("/readyz to report the sink up", func() bool { return p.readyzDetail() == "" })

	s := startKafkaSender(t, p, "kc")
	s.await(kafkaCrashBeforeDown)
	switch mode {
	case "cluster down":
		// The cluster goes away with events on their way to it; the
		// workers keep sending, and the events wait in the spool.
		k.stop()
		s.await(kafkaCrashWhileDown)
		// The gateway takes seconds to call the sink down, and spools
		// thousands of events meanwhile: the workers wait.
		s.gate.Lock()
		p.waitFor("/readyz to report the events sink down", func() bool {
			return strings.Contains(p.readyzDetail(), "events sink kafka "+k.addrs[0])
		})
		s.gate.Unlock()
		s.await(kafkaCrashWhileDown)
		s.kill()
		k.start()
	case "writes refused":
		// Every produce is answered NOT_ENOUGH_REPLICAS until after the
		// kill.
		refused, stop := refuseKafkaProduce(k.cluster(), kerr.NotEnoughReplicas.Code)
		defer stop()
		s.await(kafkaCrashWhileDown)
		p.waitFor("a refused produce", func() bool { return refused.Load() > 0 })
		s.kill()
		stop()
		t.Logf("%d produce requests refused", refused.Load())
	case "deliveries in flight":
		// The brokers hold every produce request from now until after
		// the kill: the producer has records in flight, and the events
		// answered meanwhile are spooled.
		release := make(chan struct{})
		var held atomic.Int64
		c := k.cluster()
		c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			select {
			case <-release:
			default:
				held.Add(1)
				c.SleepControl(func() { <-release })
			}
			return nil, nil, false
		})
		releaseOnce := sync.OnceFunc(func() { close(release) })
		defer releaseOnce()
		s.await(kafkaCrashWhileDown)
		p.waitFor("a produce request held at a broker", func() bool { return held.Load() > 0 })
		s.kill()
		// The brokers now store what the dead gateway's producer sent.
		releaseOnce()
		t.Logf("%d produce requests held at the kill", held.Load())
	}

	recorded := recordedOf(s.sent)
	if len(recorded)*10 < len(s.sent)*9 {
		t.Fatalf("%d of %d fallbacks said \"recorded\": true, want >= 90%%", len(recorded), len(s.sent))
	}
	t.Logf("%d of %d fallbacks answered before the kill said \"recorded\": true", len(recorded), len(s.sent))

	p2 := f.serve()
	got := waitTopic(t, k, recorded, p2.done)
	checkTopic(t, s.sent, s.attempted, s.users, got)

	// The spool is drained and the next gateway knows it.
	p2.waitFor("gateway_events_spooled to reach 0", func() bool {
		r := request(t, "GET", "http://"+f.admin+"/metrics")
		return regexp.MustCompile(`(?m)^gateway_events_spooled 0$`).MatchString(r.body)
	})
	p2.waitFor("/readyz to report the events sink up", func() bool { return p2.readyzDetail() == "" })
}

// refuseKafkaProduce makes every broker of k answer every produce with
// code until stop is called.
func refuseKafkaProduce(k *kfake.Cluster, code int16) (refused *atomic.Int64, stop func()) {
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
