// Package events is the durable record of the requests the gateway turned
// away: every request an open breaker rejects on a route with
// fallback.record, and with events.audit the rate-limit decisions too.
//
// # Recording
//
// The gateway builds an Event and calls Recorder.Record, which answers
// true only once the event is durable, so that a fallback's
// "recorded": true is a promise kept across a crash. Record never holds a
// request for long: it waits at most about 100 ms, and refuses at once
// (false, counted as dropped, logged at most once a second) when the
// in-memory queue in front of the writer is full or the spool has reached
// spool_max_bytes. Refusing is the right answer to overload: the client
// already has its fallback, and blocking would turn a slow disk into a
// slow gateway.
//
// # The spool
//
// With spool_dir set (required for the redis, nats and kafka sinks), one writer
// goroutine takes whatever is queued as a batch. While the sink is up and
// nothing waits in the spool, the batch goes straight to the sink, and an
// event is recorded once the sink has accepted it: no disk is touched.
// Otherwise — the sink is down or slow (it has 40 ms), or earlier events
// still wait — the batch is appended to the spool, so that the order
// holds. A sink that was too slow gets no batch straight away for a
// while (1 s, doubling up to a minute while it stays slow): one that is
// healthy but slower than 40 ms would otherwise time out, and take part
// of a batch twice, every time the spool drains. The spool is a directory of append-only segment files holding length-prefixed
// records with a CRC-32C, each record the event's JSON with its id and type
// in front. The writer group-commits: one write and one fsync per batch,
// and only then does it answer every Record waiting on that batch. Under
// load the batches grow, so the fsyncs per second stay bounded while the
// events per second do not. A new segment's directory entry is fsynced too.
//
// A forwarder goroutine reads the spool in order — never past what the
// writer has fsynced — and delivers it to the sink in batches. After each
// delivered batch it persists its position in an offset file (fsynced);
// segments wholly delivered are then deleted. spool_max_bytes bounds the
// segment files on disk, so delivered records count until their segment
// is deleted; when a batch would not fit and the sink has taken every
// record in the spool, the writer starts a new segment and deletes the
// delivered ones at once, so a drained spool takes spool_max_bytes of
// events again. While the sink is down it retries with a capped, jittered
// backoff, the spool grows up to spool_max_bytes, Ready says why, and the
// transition is logged once. On restart a new Recorder resumes from the
// offset file: delivery is at least once, and a duplicate carries the same
// id (the nats sink even drops it, through Nats-Msg-Id). A crash can only
// leave a torn record at the end of a segment, never acknowledged;
// recovery finds it by its length or CRC and truncates it, and serving
// goes on.
//
// With the file sink and no spool_dir, the writer appends to the file
// itself with the same group commit and fsync, and an event is recorded
// when it is in the file.
//
// # Sinks
//
//   - redis: XADD events.redis.stream MAXLEN ~ maxlen * id ID event JSON,
//     pipelined, on the store's Redis unless events.redis.addrs names
//     another (github.com/redis/rueidis).
//   - nats: a JetStream publish to events.nats.subject with Nats-Msg-Id set
//     to the event ID; a file-backed stream is created for the subject when
//     none captures it (github.com/nats-io/nats.go).
//   - kafka: one record per event on events.kafka.topic with the
//     idempotent producer (acks all; acks leader turns idempotence off),
//     keyed by the limiting key (the values of the key of the limit whose
//     name sorts first, joined by "|"), so that one user's events of a
//     route stay in order on one partition, with the id, route and type
//     as headers and the event JSON as the value
//     (github.com/twmb/franz-go). The topic must exist; it is not created.
//   - file: JSON lines, fsynced.
//
// A sink that cannot be reached at start, even one whose host does not
// resolve, does not stop NewRecorder: the gateway serves, the events wait
// in the spool, and Ready reports the cause.
//
// # Replay
//
// OpenSource reads back the breaker_rejected events of one route for
// "floodgate events replay", and marks each done once it has been handled,
// in a way that survives a restart: a Redis consumer group per route, a
// durable JetStream pull consumer per route, or an offset file beside the
// events file.
//
// Whoever can write the sink can write anything to it, so a Source learns
// an entry's length before it receives the entry, and passes over, with a
// warning naming it, one longer than Options.MaxEntryBytes: a file's line
// is read through without being kept; a Redis stream is read by a Lua
// script (stream_read.lua) that sends a longer event's length in its
// place; NATS consumers are headers-only, the server gives the payload's
// length in Nats-Msg-Size, and the payload is fetched by sequence only
// within the bound.
//
// # Metrics
//
// gateway_events_total{type,result} counts events by type and result:
// recorded (durable), delivered (accepted by the sink), dropped (refused:
// queue or spool full, or the recorder closed) and failed (an I/O or sink
// error kept it from being durable). gateway_events_spooled is the number
// of events in the spool not yet delivered.
package events
