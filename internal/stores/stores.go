// Package stores opens what a configuration's store and events blocks
// name: the limits' store (memory or Redis, standalone, Cluster or
// Sentinel) and the events sink, for the gateway and for the processes
// that decide or read beside it (events replay).
package stores

import (
	"crypto/tls"
	"fmt"
	"os"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
	"github.com/floodgate-gw/floodgate/internal/tlsfiles"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

// Open opens the store c names. With memory, it is local, the gateway's
// own store shared with the local fallback; when local is nil, a new
// memory store of the caller's own (a process that decides beside the
// gateways, as events replay does). With redis, the store the fleet
// shares, so that what it decides counts against the same quotas as the
// fleet's requests. The caller closes a store it did not pass in.
func Open(c config.Store, local *memory.Store) (limit.Store, error) {
	if c.Type != config.StoreRedis {
		if local == nil {
			return memory.New(memory.Options{MaxKeys: c.Memory.MaxKeys}), nil
		}
		return local, nil
	}
	r := c.Redis
	o := redisstore.Options{
		Mode: redisstore.Mode(r.Mode), MasterName: r.MasterName,
		Addrs: r.Addrs, Username: r.Username, Password: r.Password,
		DB: r.DB, Prefix: r.Prefix, Timeout: r.Timeout,
		NoLocalRejects: !c.LocalRejects, LocalRejectsMax: c.LocalRejectsMax,
	}
	if r.TLS {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	s, err := redisstore.New(o)
	if err != nil {
		return nil, err
	}
	// Not behind limit.Guard: the store guards itself, node by node, so
	// that a cluster whose one master fails still decides on the others.
	return s, nil
}

// Key names a store's settings: two configurations whose stores have the
// same key share one store.
func Key(c config.Store) string {
	r := c.Redis
	return fmt.Sprintf("%s %+v %t %d | %s %q %q %q %q %d %t %q %s", c.Type, c.Memory, c.LocalRejects, c.LocalRejectsMax,
		r.Mode, r.Addrs, r.MasterName, r.Username, r.Password, r.DB, r.TLS, r.Prefix, r.Timeout)
}

// Same reports whether a and b name the same store.
func Same(a, b config.Store) bool { return Key(a) == Key(b) }

// EventSink is the sink cfg's events block names, as the recorder and
// "floodgate events replay" use it. A redis sink without addresses of its
// own writes to the store's Redis (its sentinels' master, with
// store.redis.mode sentinel); the store's credentials and TLS apply to
// either, as the events block has none of its own. The kafka sink's TLS
// files are read here; an error names the file.
func EventSink(cfg *config.Config) (events.Sink, error) {
	e, r := cfg.Events, cfg.Store.Redis
	s := events.Sink{
		File:          events.FileSink{Path: e.File.Path},
		NATS:          events.NATSSink{URL: e.NATS.URL, Subject: e.NATS.Subject},
		SpoolDir:      e.SpoolDir,
		SpoolMaxBytes: e.SpoolMaxBytes,
	}
	switch e.Sink {
	case config.SinkRedis:
		s.Kind = events.SinkRedis
	case config.SinkNATS:
		s.Kind = events.SinkNATS
	case config.SinkKafka:
		s.Kind = events.SinkKafka
	case config.SinkFile:
		s.Kind = events.SinkFile
	}
	s.Redis = events.RedisSink{
		Addrs:    e.Redis.Addrs,
		Username: r.Username,
		Password: r.Password,
		DB:       r.DB,
		Stream:   e.Redis.Stream,
		MaxLen:   e.Redis.MaxLen,
	}
	if len(s.Redis.Addrs) == 0 && cfg.Store.Type == config.StoreRedis {
		s.Redis.Addrs = r.Addrs
		if r.Mode == config.RedisSentinel {
			s.Redis.MasterName = r.MasterName
		}
	}
	if r.TLS {
		s.Redis.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	k := e.Kafka
	s.Kafka = events.KafkaSink{
		Brokers: k.Brokers, Topic: k.Topic, ClientID: k.ClientID,
		Acks: k.Acks, Compression: k.Compression,
	}
	if k.SASL != nil {
		s.Kafka.SASL = &events.KafkaSASL{Mechanism: k.SASL.Mechanism, Username: k.SASL.Username, Password: k.SASL.Password}
	}
	if k.TLS != nil && e.Sink == config.SinkKafka {
		t, err := kafkaTLS(*k.TLS)
		if err != nil {
			return events.Sink{}, err
		}
		s.Kafka.TLS = t
	}
	return s, nil
}

// kafkaTLS is the client TLS of events.kafka.tls. The files are read
// once: a rotated certificate takes a reload.
func kafkaTLS(t config.EventsKafkaTLS) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("events.kafka.tls.ca: %w", err)
		}
		if c.RootCAs, err = tlsfiles.CertPool(pem); err != nil {
			return nil, fmt.Errorf("events.kafka.tls.ca: %q: %w", t.CA, err)
		}
	}
	if t.Cert != "" {
		certPEM, err := os.ReadFile(t.Cert)
		if err != nil {
			return nil, fmt.Errorf("events.kafka.tls.cert: %w", err)
		}
		keyPEM, err := os.ReadFile(t.Key)
		if err != nil {
			return nil, fmt.Errorf("events.kafka.tls.key: %w", err)
		}
		cert, err := tlsfiles.KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("events.kafka.tls: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
