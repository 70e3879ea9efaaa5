package events

import (
	"context"
	"fmt"
)

// A sink is where events end up. Implementations connect lazily and
// reconnect by themselves: a sink that cannot be reached at start is an
// error from deliver, not from NewRecorder, so the gateway serves while
// the events wait in the spool.
type sink interface {
	// deliver stores recs in order and returns how many, from the first,
	// are stored for sure. When it returns n < len(recs) it returns an
	// error too, and the caller retries from recs[n]; a record after n
	// may have been stored already, so a retry can duplicate it, with
	// the same id. A refusedError says recs[n] will never be stored, so
	// that it is set aside rather than retried for ever.
	deliver(ctx context.Context, recs []record) (n int, err error)
	// probe checks that the sink is reachable (and prepares it: the nats
	// sink creates its stream), so Ready can say so before any event.
	probe(ctx context.Context) error
	// name describes the sink for logs and Ready: "redis 10.0.0.1:6379".
	name() string
	close() error
}

// refusedError is a sink's error for a record it will never take, such as
// one longer than the topic's bound.
type refusedError struct{ err error }

func (e refusedError) Error() string { return e.err.Error() }
func (e refusedError) Unwrap() error { return e.err }

func newSink(c Sink) (sink, error) {
	switch c.Kind {
	case SinkRedis:
		if err := c.Redis.check(); err != nil {
			return nil, err
		}
		return newRedisSink(c.Redis), nil
	case SinkNATS:
		return newNATSSink(c.NATS)
	case SinkKafka:
		return newKafkaSink(c.Kafka)
	case SinkFile:
		if c.File.Path == "" {
			return nil, fmt.Errorf("events: the file sink needs a path")
		}
		return newFileSink(c.File.Path), nil
	}
	return nil, fmt.Errorf("events: unknown sink %q", c.Kind)
}
