package events

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Sink says where a Recorder writes events and where a Source reads them
// back. The zero Sink records nothing.
type Sink struct {
	// Kind is SinkRedis, SinkNATS, SinkKafka or SinkFile; empty: none.
	Kind SinkKind

	// Redis, NATS, Kafka and File configure the sink of the same name.
	Redis RedisSink
	NATS  NATSSink
	Kafka KafkaSink
	File  FileSink

	// SpoolDir keeps events on disk while the sink is down or slow.
	// Empty: no spool, and an event the sink does not take in time is not
	// recorded.
	SpoolDir string

	// SpoolMaxBytes bounds the spool. Zero: 1 GiB.
	SpoolMaxBytes int64
}

// SinkKind names a sink.
type SinkKind string

// The sinks.
const (
	SinkNone  SinkKind = ""
	SinkRedis SinkKind = "redis" // XADD to a capped stream
	SinkNATS  SinkKind = "nats"  // a JetStream subject
	SinkKafka SinkKind = "kafka" // a Kafka topic, idempotent producer
	SinkFile  SinkKind = "file"  // JSON lines, fsynced
)

// RedisSink is a Redis stream, on a standalone server or a master that
// sentinels watch.
type RedisSink struct {
	// Addrs are the server's "host:port" addresses, or the sentinels'
	// when MasterName is set. Required.
	Addrs      []string
	MasterName string

	// Username, Password, DB and TLS authenticate and select the
	// database. TLS nil: none.
	Username string
	Password string
	DB       int
	TLS      *tls.Config

	// Stream is the stream key; MaxLen caps it (XADD MAXLEN ~). Zero
	// MaxLen: 1,000,000.
	Stream string
	MaxLen int64
}

// NATSSink is a NATS JetStream subject.
type NATSSink struct {
	URL     string
	Subject string
}

// KafkaSink is a Kafka topic. Each event is one record: the key is the
// event's limiting key (see the package doc), the headers its id, route
// and type, the value its JSON.
type KafkaSink struct {
	// Brokers are the seed brokers' "host:port" addresses. Required.
	Brokers []string

	// Topic is where the events go; it must exist. Required.
	Topic string

	// ClientID names the producer to the brokers. Empty: "floodgate".
	ClientID string

	// Acks is "all" (every in-sync replica, with the idempotent producer)
	// or "leader" (the partition leader alone, not idempotent). Empty:
	// "all".
	Acks string

	// Compression is none, gzip, snappy, lz4 or zstd. Empty: none.
	Compression string

	// TLS connects with TLS. Nil: plaintext.
	TLS *tls.Config

	// SASL authenticates the connection. Nil: no SASL.
	SASL *KafkaSASL
}

// KafkaSASL is the SASL authentication of a Kafka sink.
type KafkaSASL struct {
	// Mechanism is "plain", "scram-sha-256" or "scram-sha-512".
	Mechanism string
	Username  string
	Password  string
}

// FileSink is a file of JSON lines.
type FileSink struct {
	Path string
}

// Options are what NewRecorder and OpenSource need besides the Sink.
type Options struct {
	// Logger receives the recorder's logs. Nil: slog.Default().
	Logger *slog.Logger

	// Registerer registers gateway_events_total and
	// gateway_events_spooled. Nil: the metrics are kept but not exported.
	Registerer prometheus.Registerer

	// RecordWait is the longest Record waits for an event to become
	// durable. Zero: 100 ms, the bound a request that is being answered
	// can afford; a caller that records outside a request's path (a
	// backfill, a test's fixture) may wait longer.
	RecordWait time.Duration

	// MaxEntryBytes bounds the entry a Source reads back: a longer one
	// (a file's line, a stream entry's event, a message's payload) is
	// passed over and logged, as one that is not an event is, and is
	// never received whole: its length is known first (a file is read
	// through, Redis's script and NATS's headers-only delivery give it).
	// A recorder writes no entry longer than its events.max_body allows,
	// so a longer one was written by someone else. Zero: no bound.
	MaxEntryBytes int64

	// Admitted makes a Source return the route's TypeAdmitted events too,
	// in the order they were recorded among the events to replay (events
	// replay counts them, and sends none). Done and Pending take them as
	// they take the others; Done of one may become durable only with the
	// next Done or when Next reaches the end, as the passing over of other
	// routes' events does: an admission read again after a stop is counted
	// again, never sent. The recorder ignores it.
	Admitted bool

	// directTimeout replaces the package's directTimeout when not zero
	// (tests that must not see a slow machine spool an event), and
	// directBackoff the first wait after a direct delivery fell short.
	directTimeout time.Duration
	directBackoff time.Duration
}
