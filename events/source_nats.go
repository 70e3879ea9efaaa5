package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// replayAckWait is how long the server waits for the acknowledgement of a
// replayed event before it offers it again. It covers one request to the
// upstream and the wait behind the few in flight before it (events replay
// --parallel), since the source fetches one event at a time.
const replayAckWait = 2 * time.Minute

type natsSource struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	stream  string // empty: no stream captures the subject, nothing was recorded
	m       matcher

	st       jetstream.Stream // found on first use
	cons     jetstream.Consumer
	inFlight map[*Event]jetstream.Msg
}

func openNATSSource(ctx context.Context, c NATSSink, m matcher) (*natsSource, error) {
	nc, err := nats.Connect(c.URL, nats.Name("floodgate events replay"))
	if err != nil {
		return nil, fmt.Errorf("events: connecting to nats %s: %w", redactURL(c.URL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s := &natsSource{nc: nc, js: js, subject: c.Subject, m: m, inFlight: map[*Event]jetstream.Msg{}}
	s.stream, err = js.StreamNameBySubject(ctx, c.Subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s.stream, err = "", nil
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("events: finding the stream of %s: %w", c.Subject, err)
	}
	return s, nil
}

// consumer creates or finds the route's durable consumer. If a previous
// replay stopped with an event unacknowledged, the consumer is reset to
// its acknowledgement floor, so that event comes first now instead of
// after the ack wait.
func (s *natsSource) consumer(ctx context.Context) (jetstream.Consumer, error) {
	if s.cons != nil {
		return s.cons, nil
	}
	name := ReplayGroup(s.m.route)
	cons, err := s.js.CreateOrUpdateConsumer(ctx, s.stream, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: s.subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       replayAckWait,
		// The payload is fetched apart, once its length is known to be
		// within the bound (natsSource.event).
		HeadersOnly: true,
	})
	if err != nil {
		return nil, fmt.Errorf("events: consumer %s on %s: %w", name, s.stream, err)
	}
	if info := cons.CachedInfo(); info != nil && info.NumAckPending > 0 {
		if _, err := s.js.ResetConsumer(ctx, s.stream, name); err != nil {
			// An older server: the event comes back after the ack wait.
			s.m.log.Warn("events: cannot reset the replay consumer; an unacknowledged event comes back after the ack wait",
				"consumer", name, "ack_wait", replayAckWait.String(), "error", err.Error())
		}
	}
	s.cons = cons
	return cons, nil
}

func (s *natsSource) Next(ctx context.Context) (*Event, error) {
	if s.stream == "" {
		return nil, io.EOF
	}
	cons, err := s.consumer(ctx)
	if err != nil {
		return nil, err
	}
	for {
		// One at a time, so that the ack wait covers one upstream
		// request, not a batch of them.
		batch, err := cons.FetchNoWait(1)
		if err != nil {
			return nil, fmt.Errorf("events: fetching from %s: %w", s.stream, err)
		}
		var msg jetstream.Msg
		for m := range batch.Messages() {
			msg = m
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, fmt.Errorf("events: fetching from %s: %w", s.stream, err)
		}
		if msg == nil {
			return nil, io.EOF
		}
		e, ok, err := s.event(ctx, msg)
		if err != nil {
			return nil, err
		}
		if !ok {
			if err := msg.Ack(); err != nil {
				return nil, fmt.Errorf("events: acknowledging in %s: %w", s.stream, err)
			}
			continue
		}
		s.inFlight[e] = msg
		return e, nil
	}
}

// event returns the event in msg, which a headers-only consumer delivered:
// the server gives the payload's length in a Nats-Msg-Size header, and the
// payload is fetched by its sequence only when that length is within the
// bound. A consumer that delivered whole messages would hand the client
// every message whole, up to the server's max_payload (64 MB at most),
// before its length could be looked at; and a pull request's max_bytes
// does not help, since the server stops at a message over it and offers
// it again on every request, so it could never be passed over.
func (s *natsSource) event(ctx context.Context, msg jetstream.Msg) (*Event, bool, error) {
	md, err := msg.Metadata()
	if err != nil {
		return nil, false, fmt.Errorf("events: a message from %s: %w", s.stream, err)
	}
	seq := md.Sequence.Stream
	where := []any{"stream", s.stream, "seq", seq}
	data := msg.Data()
	// The server adds its Nats-Msg-Size after the publisher's headers,
	// which may hold one of their own: the last one is the server's.
	if sizes := msg.Headers().Values(nats.MsgSize); len(sizes) > 0 {
		size, err := strconv.ParseInt(sizes[len(sizes)-1], 10, 64)
		if err != nil {
			return nil, false, fmt.Errorf("events: message %d of %s: %s %q", seq, s.stream, nats.MsgSize, sizes[len(sizes)-1])
		}
		if s.m.max > 0 && size > s.m.max {
			s.m.tooLong(size, where...)
			return nil, false, nil
		}
		st, err := s.streamHandle(ctx)
		if err != nil {
			return nil, false, err
		}
		raw, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// Removed since it was delivered (the stream's limits, a
			// purge): there is nothing left to replay.
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("events: getting message %d of %s: %w", seq, s.stream, err)
		}
		data = raw.Data
	}
	// Without the header the server sent the payload whole (one from
	// before headers-only consumers, 2.6.2): it is read, but still decoded
	// only within the bound.
	e, ok := s.m.decode(data, where...)
	return e, ok, nil
}

func (s *natsSource) streamHandle(ctx context.Context) (jetstream.Stream, error) {
	if s.st != nil {
		return s.st, nil
	}
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return nil, fmt.Errorf("events: stream %s: %w", s.stream, err)
	}
	s.st = st
	return st, nil
}

func (s *natsSource) Done(ctx context.Context, e *Event) error {
	msg, ok := s.inFlight[e]
	if !ok {
		return fmt.Errorf("events: Done with an event Next did not return")
	}
	if lazyDone(e) {
		// Acknowledged as the messages passed over are, without waiting
		// for the server: the next Done's confirmed acknowledgement comes
		// after it on the connection.
		if err := msg.Ack(); err != nil {
			return fmt.Errorf("events: acknowledging %s in %s: %w", e.ID, s.stream, err)
		}
		delete(s.inFlight, e)
		return nil
	}
	// DoubleAck waits for the server to confirm, so "done" is done.
	if err := msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("events: acknowledging %s in %s: %w", e.ID, s.stream, err)
	}
	delete(s.inFlight, e)
	return nil
}

func (s *natsSource) Pending(ctx context.Context, fn func(*Event) bool) error {
	if s.stream == "" {
		return nil
	}
	// Everything after the durable consumer's acknowledgement floor (we
	// acknowledge in order, so the floor is exact), read by a throwaway
	// ordered consumer that acknowledges nothing.
	var floor uint64
	if c, err := s.js.Consumer(ctx, s.stream, ReplayGroup(s.m.route)); err == nil {
		floor = c.CachedInfo().AckFloor.Stream
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("events: consumer %s: %w", ReplayGroup(s.m.route), err)
	}
	st, err := s.streamHandle(ctx)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("events: stream %s: %w", s.stream, err)
	}
	last := info.State.LastSeq
	if last <= floor {
		return nil
	}
	oc, err := s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    floor + 1,
		HeadersOnly:    true,
	})
	if err != nil {
		return err
	}
	for {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return err
			}
			e, ok, err := s.event(ctx, msg)
			if err != nil {
				return err
			}
			if ok && !fn(e) {
				return nil
			}
			if md.Sequence.Stream >= last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

func (s *natsSource) Close() error {
	s.nc.Close()
	return nil
}
