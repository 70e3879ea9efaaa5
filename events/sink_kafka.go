package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kafkaSink produces each event as one record to a topic, with the
// idempotent producer unless acks is "leader": a produce the client
// retries after a lost answer is then stored once, in order. The record's
// key is the event's limiting key, so that one user's events land on one
// partition, in order; its headers are the event's id, route and type, so
// that a consumer can route or drop duplicates without decoding the
// value; its value is the event's JSON, as every sink stores it.
type kafkaSink struct {
	brokers []string
	topic   string
	opts    []kgo.Opt
	sasl    string // "mechanism as username"; empty: no SASL

	mu sync.Mutex
	cl *kgo.Client
}

// kafkaDialTimeout bounds one connection attempt, so that a forwarder
// retrying an unreachable broker does not sit in a dial for long.
const kafkaDialTimeout = 2 * time.Second

// check says what keeps c from being used.
func (c KafkaSink) check() error {
	if len(c.Brokers) == 0 {
		return errors.New("events: the kafka sink has no broker")
	}
	if c.Topic == "" {
		return errors.New("events: the kafka sink has no topic")
	}
	switch c.Acks {
	case "", "all", "leader":
	default:
		return fmt.Errorf("events: the kafka sink's acks %q is not all or leader", c.Acks)
	}
	if _, err := kafkaCodec(c.Compression); err != nil {
		return err
	}
	if c.SASL != nil {
		if _, err := kafkaSASL(*c.SASL); err != nil {
			return err
		}
	}
	return nil
}

func kafkaCodec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("events: the kafka sink's compression %q is not none, gzip, snappy, lz4 or zstd", name)
}

func kafkaSASL(c KafkaSASL) (kgo.Opt, error) {
	switch c.Mechanism {
	case "plain":
		return kgo.SASL(plain.Auth{User: c.Username, Pass: c.Password}.AsMechanism()), nil
	case "scram-sha-256":
		return kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha256Mechanism()), nil
	case "scram-sha-512":
		return kgo.SASL(scram.Auth{User: c.Username, Pass: c.Password}.AsSha512Mechanism()), nil
	}
	return nil, fmt.Errorf("events: the kafka sink's SASL mechanism %q is not plain, scram-sha-256 or scram-sha-512", c.Mechanism)
}

func newKafkaSink(c KafkaSink) (*kafkaSink, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	codec, _ := kafkaCodec(c.Compression)
	opts := append(kafkaConnOpts(c),
		kgo.DefaultProduceTopic(c.Topic),
		kgo.ProducerBatchCompression(codec),
		// The recorder hands over whole batches and waits for them: a
		// linger would only add its time to every delivery, and eat into
		// the 40 ms a direct delivery has.
		kgo.ProducerLinger(0),
	)
	if c.Acks == "leader" {
		// Idempotence needs every in-sync replica's ack (KIP-679).
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	} else {
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	s := &kafkaSink{brokers: c.Brokers, topic: c.Topic, opts: opts}
	if c.SASL != nil {
		s.sasl = c.SASL.Mechanism + " as " + c.SASL.Username
	}
	return s, nil
}

// explain adds to err what it most likely means. A broker that rejects a
// SASL authentication answers SASL_AUTHENTICATION_FAILED and then closes
// the connection, but one that speaks the older handshake (SaslHandshake
// v0), or a proxy in front of it, closes it without a word: the client
// then sees only EOF, which says nothing of the credentials.
func (s *kafkaSink) explain(err error) error {
	if err == nil || s.sasl == "" || !errors.Is(err, io.EOF) {
		return err
	}
	return fmt.Errorf("%w (the broker closed the connection; SASL %s: a wrong username or password?)", err, s.sasl)
}

func (s *kafkaSink) name() string { return "kafka " + strings.Join(s.brokers, ",") }

// conn returns the client, making it first if needed. kgo.NewClient does
// not connect; the client dials the brokers when it first needs them and
// again whenever a connection dies.
func (s *kafkaSink) conn() (*kgo.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		return s.cl, nil
	}
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		return nil, err
	}
	s.cl = cl
	return cl, nil
}

// probe asks the cluster for the topic's metadata: a broker answers, and
// the topic exists. The sink does not create the topic: its partitions
// and replication are the operator's choice.
func (s *kafkaSink) probe(ctx context.Context) error {
	cl, err := s.conn()
	if err != nil {
		return err
	}
	topics, err := kadm.NewClient(cl).ListTopics(ctx, s.topic)
	if err != nil {
		return s.explain(err)
	}
	d, ok := topics[s.topic]
	switch {
	case !ok:
		return fmt.Errorf("topic %s: not in the cluster's metadata", s.topic)
	case d.Err != nil:
		return fmt.Errorf("topic %s: %w", s.topic, d.Err)
	}
	return nil
}

// deliver produces recs and waits for their acks until ctx ends. It does
// not use ProduceSync: with the idempotent producer, the client keeps a
// record it has sent until the broker answers, past any context, and
// deliver must return in time for the recorder to spool. A record still
// in the client when deliver returns is counted as not stored; the
// forwarder sends it again, and the client keeps a partition's records in
// order, so a copy can only come after the original, with the same id.
//
// ctx is the recorder's, never a request's: when it ends, the client fails
// the records it has not sent yet, which is what a retry from the spool
// wants.
func (s *kafkaSink) deliver(ctx context.Context, recs []record) (int, error) {
	cl, err := s.conn()
	if err != nil {
		return 0, err
	}
	acks := newKafkaAcks(len(recs))
	krs := toKafka(recs)
	for i := range krs {
		cl.Produce(ctx, &krs[i].Record, acks.promise(i))
	}
	select {
	case <-acks.done:
	case <-ctx.Done():
	}
	n, err := acks.stored(ctx)
	if errors.Is(err, errNoAck) {
		// The client retries what it cannot send, and says why only in
		// its logs: ask the cluster, so that Ready tells a wrong
		// password, certificate or topic rather than a timeout.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kafkaDialTimeout)
		perr := s.probe(pctx)
		cancel()
		if perr != nil {
			return n, fmt.Errorf("%w: %w", err, perr)
		}
	}
	switch {
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge), errors.Is(err, kerr.InvalidRecord):
		// This record, sent again, would be refused again.
		return n, refusedError{s.explain(err)}
	case errors.Is(err, kerr.UnknownTopicID):
		// The topic was deleted and made again: the client keeps the old
		// topic's id until it is made anew.
		s.close()
	}
	return n, s.explain(err)
}

// maxKafkaValue bounds an event's JSON on a Kafka record: the client
// refuses a batch over 1,000,012 bytes, and the record's key, headers and
// framing need some room beside the value.
const maxKafkaValue = 1_000_000 - 16<<10

// eventTime is the time, to the millisecond, of the event whose id is id,
// as NewID makes them (the first 12 hex digits); zero for another id, which
// the client then stamps with the time it produces the record.
func eventTime(id string) time.Time {
	if len(id) != 32 {
		return time.Time{}
	}
	ms, err := strconv.ParseUint(id[:12], 16, 64)
	if err != nil || ms == 0 || ms > 1<<47 {
		return time.Time{}
	}
	return time.UnixMilli(int64(ms))
}

// errNoAck is a delivery whose records the brokers did not acknowledge.
var errNoAck = errors.New("no ack")

// kafkaAcks collects the promises of one delivery's records.
type kafkaAcks struct {
	mu   sync.Mutex
	ok   []bool
	errs []error
	left int
	done chan struct{}
}

func newKafkaAcks(n int) *kafkaAcks {
	a := &kafkaAcks{ok: make([]bool, n), errs: make([]error, n), left: n, done: make(chan struct{})}
	if n == 0 {
		close(a.done)
	}
	return a
}

func (a *kafkaAcks) promise(i int) func(*kgo.Record, error) {
	return func(_ *kgo.Record, err error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.ok[i], a.errs[i] = err == nil, err
		if a.left--; a.left == 0 {
			close(a.done)
		}
	}
}

// stored is how many records from the first the brokers acknowledged,
// and why the next one is not among them.
func (a *kafkaAcks) stored(ctx context.Context) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, ok := range a.ok {
		if ok {
			continue
		}
		if err := a.errs[i]; err != nil {
			return i, err
		}
		if err := ctx.Err(); err != nil {
			return i, fmt.Errorf("%w in time (%w)", errNoAck, err)
		}
		return i, errNoAck
	}
	return len(a.ok), nil
}

// toKafka returns recs as Kafka records. Their bytes are copies, made in
// one buffer: recs may be read from the spool's buffer, which the
// forwarder reuses, while the client may still hold a record after
// deliver has returned.
func toKafka(recs []record) []kafkaRec {
	out := make([]kafkaRec, len(recs))
	routes := make([]string, len(recs))
	keys := make([][]byte, len(recs))
	n := 0
	for i := range recs {
		r := &recs[i]
		if r.kafka {
			routes[i], keys[i] = r.route, r.kafkaKey
		} else {
			routes[i], keys[i] = readKafkaFields(r.data)
		}
		n += len(keys[i]) + len(r.data) + len(r.id) + len(routes[i]) + len(r.typ)
	}
	buf := make([]byte, 0, n)
	take := func(b []byte) []byte {
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	takeS := func(s string) []byte {
		start := len(buf)
		buf = append(buf, s...)
		return buf[start:len(buf):len(buf)]
	}
	for i := range recs {
		r, k := &recs[i], &out[i]
		if keys[i] != nil {
			k.Key = take(keys[i])
		}
		k.Value = take(r.data)
		// The event's time, not the delivery's: a replay merges the
		// partitions in this order, and a spooled event keeps its place.
		k.Timestamp = eventTime(r.id)
		k.h = [3]kgo.RecordHeader{
			{Key: "id", Value: takeS(r.id)},
			{Key: "route", Value: takeS(routes[i])},
			{Key: "type", Value: takeS(r.typ)},
		}
		k.Headers = k.h[:]
	}
	return out
}

// kafkaRec is a record with room for its headers.
type kafkaRec struct {
	kgo.Record
	h [3]kgo.RecordHeader
}

func (s *kafkaSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
	return nil
}
