package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
)

// Source reads back, in the order they were recorded, the breaker_rejected
// and overloaded events of one route from the configured sink, for replay,
// and with Options.Admitted its admitted events among them. It is used by
// one goroutine: Next, handle the event, Done, with Done called in the
// order Next returned the events; several may be taken before the first is
// done (events replay --parallel).
//
// Progress is kept in the sink's own terms, so that a replay that stops
// (Ctrl-C, a crash) resumes where it was and sends again at most the events
// it was handling:
//
//   - redis: a consumer group "floodgate-replay-ROUTE" on the stream,
//     created at the stream's start; Done is XACK. The events of other
//     routes and types are acknowledged in passing, in this route's group
//     only. A restart first takes back the entries it read but did not
//     acknowledge (the ones in flight).
//   - nats: a durable, headers-only pull consumer
//     "floodgate-replay-ROUTE" on the stream that captures the subject;
//     Done is an acknowledgement the server confirms. A restart resets the
//     consumer to its acknowledgement floor, so the ones in flight come
//     again at once.
//   - kafka: the committed offsets of the consumer group
//     "floodgate-replay-ROUTE" on the topic, one per partition; Done
//     commits, per partition, the offset of the first event not done, so
//     the ones in flight come again after a restart. Other routes' events
//     are passed over on their headers, without decoding.
//   - file: the offset of the next line, in the file
//     "<path>.replay-ROUTE.offset", replaced atomically on Done.
//
// One group or consumer per route, rather than one shared by every route,
// keeps the replay of one route from consuming another route's events.
type Source interface {
	// Next returns the next event to replay, or io.EOF when none is left.
	// It does not wait for events recorded after the end was reached.
	Next(ctx context.Context) (*Event, error)
	// Done marks e, returned by Next, handled: no later Next of this or
	// another run returns it. For an admitted event (Options.Admitted)
	// that holds once the next Done returns or Next reaches the end.
	Done(ctx context.Context, e *Event) error
	// Pending calls fn in order for every event of the route not yet
	// marked done, the one returned by Next but not done included, without
	// consuming anything; it stops when fn returns false. With
	// Options.Admitted the route's admitted events not marked done are
	// among them.
	Pending(ctx context.Context, fn func(*Event) bool) error
	// Close releases the connection or file.
	Close() error
}

// ReplayGroup is the name of the consumer group (redis, kafka) or durable
// consumer (nats) that replays route.
func ReplayGroup(route string) string { return "floodgate-replay-" + route }

// ReplayOffsetFile is where replay of route keeps its position in the
// events file path.
func ReplayOffsetFile(path, route string) string { return path + ".replay-" + route + ".offset" }

// OpenSource opens the sink c for replaying the breaker_rejected and
// overloaded events of route, and its admitted ones with o.Admitted.
// Unlike NewRecorder it fails when the sink cannot be reached: a replay
// has nothing to do without it.
func OpenSource(ctx context.Context, c Sink, route string, o Options) (Source, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	m := matcher{route: route, max: o.MaxEntryBytes, admitted: o.Admitted, log: log}
	switch c.Kind {
	case SinkRedis:
		if err := c.Redis.check(); err != nil {
			return nil, err
		}
		return openRedisSource(ctx, c.Redis, m)
	case SinkNATS:
		return openNATSSource(ctx, c.NATS, m)
	case SinkFile:
		return openFileSource(c.File.Path, m)
	case SinkKafka:
		return openKafkaSource(ctx, c.Kafka, m)
	case SinkNone:
		return nil, fmt.Errorf("events: no sink: nothing was recorded")
	}
	return nil, fmt.Errorf("events: unknown sink %q", c.Kind)
}

// matcher picks a route's events to replay (breaker_rejected, overloaded,
// and admitted ones with admitted) out of everything the sink holds.
type matcher struct {
	route    string
	max      int64 // the longest entry decoded; 0: any
	admitted bool  // admitted events are taken too
	log      *slog.Logger
}

// takes reports whether an event of type typ is one m picks, whatever its
// route.
func (m matcher) takes(typ string) bool {
	return typ == TypeBreakerRejected || typ == TypeOverloaded || m.admitted && typ == TypeAdmitted
}

// lazyDone reports whether Done of e may wait for the next Done or the
// end of the events (Options.Admitted): it is an admission, which a
// replay counts and never sends.
func lazyDone(e *Event) bool { return e.Type == TypeAdmitted }

// decode returns the event in data when it is one to replay; an entry
// that does not decode, or is longer than m.max, is logged and passed
// over, so one bad entry cannot block a replay forever. where are the log
// attributes that say which entry it is.
func (m matcher) decode(data []byte, where ...any) (*Event, bool) {
	if len(data) == 0 {
		return nil, false
	}
	if m.max > 0 && int64(len(data)) > m.max {
		m.tooLong(int64(len(data)), where...)
		return nil, false
	}
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		m.log.Warn("events: passing over an entry that is not an event", append(where, "error", err.Error())...)
		return nil, false
	}
	if !m.takes(e.Type) || e.Route != m.route {
		return nil, false
	}
	return &e, true
}

// tooLong logs an entry of n bytes passed over for its length.
func (m matcher) tooLong(n int64, where ...any) {
	m.log.Warn("events: passing over an entry longer than any this configuration records",
		append(where, "bytes", n, "max_bytes", m.max)...)
}
