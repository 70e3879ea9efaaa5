package events

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// redisSink XADDs each event to a capped stream, as the fields "id" (the
// event ID) and "event" (its JSON). MAXLEN ~ lets Redis trim whole macro
// nodes, which keeps XADD O(1); the stream then holds at least maxlen
// entries, a few more at times.
type redisSink struct {
	stream string
	maxlen string
	addrs  []string
	opt    rueidis.ClientOption

	mu     sync.Mutex
	client rueidis.Client
}

// redisDialTimeout bounds one connection attempt, so that a forwarder
// retrying an unreachable Redis does not sit in a dial for long.
const redisDialTimeout = 2 * time.Second

// defaultMaxLen caps a stream whose RedisSink.MaxLen is zero.
const defaultMaxLen = 1_000_000

// check says what keeps c from being used.
func (c RedisSink) check() error {
	if len(c.Addrs) == 0 {
		return errors.New("events: the redis sink has no address")
	}
	if c.Stream == "" {
		return errors.New("events: the redis sink has no stream")
	}
	return nil
}

func newRedisSink(c RedisSink) *redisSink {
	maxlen := c.MaxLen
	if maxlen <= 0 {
		maxlen = defaultMaxLen
	}
	return &redisSink{
		stream: c.Stream,
		maxlen: strconv.FormatInt(maxlen, 10),
		addrs:  c.Addrs,
		opt:    redisOptions(c),
	}
}

func redisOptions(c RedisSink) rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress: c.Addrs,
		Username:    c.Username,
		Password:    c.Password,
		SelectDB:    c.DB,
		TLSConfig:   c.TLS,
		Dialer:      net.Dialer{Timeout: redisDialTimeout},
		// The sink only writes and replay only reads streams; neither
		// would ever hit the client-side cache, which needs CLIENT
		// TRACKING on every connection.
		DisableCache: true,
		// A failed batch is retried by the forwarder from the first
		// record not known stored, in order; a client-side retry of one
		// command in the middle could reorder the stream.
		DisableRetry:     true,
		ConnWriteTimeout: 5 * time.Second,
	}
	if c.MasterName != "" {
		// Asking the sentinels every few seconds, besides their
		// +switch-master message, recovers from a message missed.
		opt.Sentinel = rueidis.SentinelOption{MasterSet: c.MasterName, TopologyRefreshInterval: 5 * time.Second}
	}
	return opt
}

func (s *redisSink) name() string { return "redis " + strings.Join(s.addrs, ",") }

// conn returns the client, connecting first if needed. rueidis.NewClient
// fails when it cannot connect at once, so the client is made on first
// use and again after such a failure; once made, it reconnects by itself.
func (s *redisSink) conn() (rueidis.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		return s.client, nil
	}
	c, err := rueidis.NewClient(s.opt)
	if err != nil {
		return nil, err
	}
	s.client = c
	return c, nil
}

func (s *redisSink) deliver(ctx context.Context, recs []record) (int, error) {
	c, err := s.conn()
	if err != nil {
		return 0, err
	}
	cmds := make(rueidis.Commands, len(recs))
	for i := range recs {
		cmds[i] = c.B().Xadd().Key(s.stream).Maxlen().Almost().Threshold(s.maxlen).Id("*").
			FieldValue().FieldValue("id", recs[i].id).FieldValue("event", rueidis.BinaryString(recs[i].data)).Build()
	}
	// One pipelined round trip. Redis runs a connection's commands in
	// order, so when one fails on a dead connection, none after it ran.
	for i, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			return i, err
		}
	}
	return len(recs), nil
}

func (s *redisSink) probe(ctx context.Context) error {
	c, err := s.conn()
	if err != nil {
		return err
	}
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

func (s *redisSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
	return nil
}
