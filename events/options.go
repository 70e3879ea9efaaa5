package events

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
)

// Options are what NewRecorder needs besides the events block.
type Options struct {
	// Logger receives the recorder's logs. Nil: slog.Default().
	Logger *slog.Logger

	// Registerer registers gateway_events_total and
	// gateway_events_spooled. Nil: the metrics are kept but not exported.
	Registerer prometheus.Registerer

	// StoreRedis are the store's Redis addresses, which the redis sink
	// uses when events.redis.addrs is empty. RedisMasterName, when set,
	// makes them sentinels of that master.
	StoreRedis      []string
	RedisMasterName string

	// RedisUsername, RedisPassword, RedisDB and RedisTLS authenticate and
	// select the database on the sink's Redis, as the store's fields of the
	// same names do. RedisTLS nil: no TLS.
	RedisUsername string
	RedisPassword string
	RedisDB       int
	RedisTLS      *tls.Config

	// RecordWait is the longest Record waits for an event to become
	// durable. Zero: 100 ms, the bound a request that is being answered
	// can afford; a caller that records outside a request's path (a
	// backfill, a test's fixture) may wait longer.
	RecordWait time.Duration

	// directTimeout replaces the package's directTimeout when not zero
	// (tests that must not see a slow machine spool an event), and
	// directBackoff the first wait after a direct delivery fell short.
	directTimeout time.Duration
	directBackoff time.Duration
}

// StoreOptions returns the Options that point the redis sink (and replay)
// at the store's Redis, with its credentials, as serve and "floodgate
// events replay" both need. The caller adds Logger and Registerer. The
// credentials also apply to events.redis.addrs when that names another
// Redis: the events block has none of its own.
func StoreOptions(s config.Store) Options {
	r := s.Redis
	o := Options{
		RedisUsername: r.Username,
		RedisPassword: r.Password,
		RedisDB:       r.DB,
	}
	if s.Type == config.StoreRedis {
		o.StoreRedis = r.Addrs
	}
	if r.Mode == config.RedisSentinel {
		o.RedisMasterName = r.MasterName
	}
	if r.TLS {
		o.RedisTLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o
}
