package events

import (
	"context"
	"errors"
	"fmt"
	"io"
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
		e, ok := s.m.decode(msg.Data(), "stream", s.stream, "seq", msgSeq(msg))
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

func msgSeq(m jetstream.Msg) string {
	if md, err := m.Metadata(); err == nil {
		return fmt.Sprint(md.Sequence.Stream)
	}
	return "?"
}

func (s *natsSource) Done(ctx context.Context, e *Event) error {
	msg, ok := s.inFlight[e]
	if !ok {
		return fmt.Errorf("events: Done with an event Next did not return")
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
	st, err := s.js.Stream(ctx, s.stream)
	if err != nil {
		return err
	}
	last := st.CachedInfo().State.LastSeq
	if last <= floor {
		return nil
	}
	oc, err := s.js.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    floor + 1,
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
			if e, ok := s.m.decode(msg.Data(), "stream", s.stream, "seq", msgSeq(msg)); ok && !fn(e) {
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
