package events

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsSink publishes each event to a JetStream subject with the
// Nats-Msg-Id header set to the event ID, so that the stream's duplicate
// window drops a redelivered event instead of storing it twice. It creates
// a file-backed stream for the subject when none captures it.
type natsSink struct {
	url     string
	subject string

	mu      sync.Mutex
	nc      *nats.Conn
	js      jetstream.JetStream
	ensured bool // a stream captures the subject, as far as we know
}

// natsReconnectWait is the pause between reconnection attempts; the
// forwarder's own backoff decides how often a delivery is retried.
const natsReconnectWait = 250 * time.Millisecond

func newNATSSink(c NATSSink) (*natsSink, error) {
	if _, err := url.Parse(c.URL); err != nil {
		return nil, fmt.Errorf("events: the nats sink's URL: %w", err)
	}
	return &natsSink{url: c.URL, subject: c.Subject}, nil
}

func (s *natsSink) name() string { return "nats " + redactURL(s.url) }

// redactURL drops the credentials of a URL, for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// natsConnect connects to url, or keeps trying in the background when the
// server cannot be reached yet.
func natsConnect(url, name string) (*nats.Conn, error) {
	return nats.Connect(url,
		nats.Name(name),
		// A server that is down at start is retried like one that went
		// away later, instead of failing Connect.
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
		// Publishes while disconnected fail at once rather than wait in
		// a client buffer: the events wait in the spool, in order.
		nats.ReconnectBufSize(-1),
		nats.NoCallbacksAfterClientClose(),
	)
}

// conn returns the JetStream context, connecting first if needed.
func (s *natsSink) conn() (jetstream.JetStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.js != nil {
		return s.js, nil
	}
	nc, err := natsConnect(s.url, "floodgate events")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(deliverTimeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.nc, s.js = nc, js
	return js, nil
}

// streamName derives a stream name from a subject: stream names may not
// hold dots.
func streamName(subject string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(subject))
}

// ensureStream finds the stream that captures the subject, creating one
// when there is none.
func (s *natsSink) ensureStream(ctx context.Context, js jetstream.JetStream) error {
	s.mu.Lock()
	ok, nc := s.ensured, s.nc
	s.mu.Unlock()
	if ok {
		return nil
	}
	if nc != nil && !nc.IsConnected() {
		return fmt.Errorf("not connected (%s)", nc.Status())
	}
	_, err := js.StreamNameBySubject(ctx, s.subject)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:     streamName(s.subject),
			Subjects: []string{s.subject},
			Storage:  jetstream.FileStorage,
		})
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ensured = true
	s.mu.Unlock()
	return nil
}

func (s *natsSink) setUnsure() {
	s.mu.Lock()
	s.ensured = false
	s.mu.Unlock()
}

func (s *natsSink) probe(ctx context.Context) error {
	js, err := s.conn()
	if err != nil {
		return err
	}
	if err := s.ensureStream(ctx, js); err != nil {
		s.setUnsure()
		return err
	}
	return nil
}

func (s *natsSink) deliver(ctx context.Context, recs []record) (int, error) {
	if err := s.probe(ctx); err != nil {
		return 0, err
	}
	js, _ := s.conn()
	futures := make([]jetstream.PubAckFuture, 0, len(recs))
	var pubErr error
	for i := range recs {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: s.subject, Data: recs[i].data}, jetstream.WithMsgID(recs[i].id))
		if err != nil {
			pubErr = err
			break
		}
		futures = append(futures, f)
	}
	// The server stores one connection's publishes in order, so the acks
	// are read in order and the first failure ends what is known stored.
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			s.setUnsure()
			return i, err
		case <-ctx.Done():
			s.setUnsure()
			return i, ctx.Err()
		}
	}
	if pubErr != nil {
		s.setUnsure()
		return len(futures), pubErr
	}
	return len(recs), nil
}

func (s *natsSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc != nil {
		s.nc.Close()
		s.nc, s.js = nil, nil
	}
	return nil
}
