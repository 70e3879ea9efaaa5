package stores

import (
	"slices"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
)

// The events block becomes a sink: a redis sink without addresses of its
// own writes to the store's Redis (through its sentinels when the store
// has them), and the store's credentials go with it either way.
func TestEventSink(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Store.Type = config.StoreRedis
	cfg.Store.Redis.Addrs = []string{"10.0.0.1:26379", "10.0.0.2:26379"}
	cfg.Store.Redis.Mode = config.RedisSentinel
	cfg.Store.Redis.MasterName = "mymaster"
	cfg.Store.Redis.Username, cfg.Store.Redis.Password, cfg.Store.Redis.DB = "u", "p", 3
	cfg.Store.Redis.TLS = true
	cfg.Events.Sink = config.SinkRedis
	cfg.Events.SpoolDir = "/var/spool/fg"

	s := sinkOf(t, cfg)
	if s.Kind != events.SinkRedis || s.SpoolDir != "/var/spool/fg" || s.SpoolMaxBytes != cfg.Events.SpoolMaxBytes {
		t.Errorf("sink %+v", s)
	}
	r := s.Redis
	if !slices.Equal(r.Addrs, cfg.Store.Redis.Addrs) || r.MasterName != "mymaster" ||
		r.Username != "u" || r.Password != "p" || r.DB != 3 || r.TLS == nil ||
		r.Stream != cfg.Events.Redis.Stream || r.MaxLen != cfg.Events.Redis.MaxLen {
		t.Errorf("store's Redis: %+v", r)
	}

	// Addresses of its own are a Redis of its own, not the sentinels.
	cfg.Events.Redis.Addrs = []string{"10.0.0.7:6379"}
	if r := sinkOf(t, cfg).Redis; !slices.Equal(r.Addrs, []string{"10.0.0.7:6379"}) || r.MasterName != "" || r.Password != "p" {
		t.Errorf("own Redis: %+v", r)
	}

	// A memory store has no Redis to lend.
	cfg.Events.Redis.Addrs = nil
	cfg.Store.Type = config.StoreMemory
	if r := sinkOf(t, cfg).Redis; len(r.Addrs) != 0 {
		t.Errorf("memory store: %+v", r)
	}

	for in, want := range map[config.Sink]events.SinkKind{
		config.SinkNone: events.SinkNone, "": events.SinkNone,
		config.SinkNATS: events.SinkNATS, config.SinkFile: events.SinkFile,
	} {
		cfg.Events.Sink = in
		if s := sinkOf(t, cfg); s.Kind != want {
			t.Errorf("sink %q: kind %q, want %q", in, s.Kind, want)
		}
	}
	cfg.Events.Sink = config.SinkKafka
	cfg.Events.Kafka.Brokers = []string{"10.0.0.1:9092"}
	cfg.Events.Kafka.Acks, cfg.Events.Kafka.Compression = "leader", "zstd"
	cfg.Events.Kafka.SASL = &config.EventsKafkaSASL{Mechanism: "scram-sha-256", Username: "u", PasswordEnv: "X", Password: "pw"}
	k := sinkOf(t, cfg).Kafka
	if s := sinkOf(t, cfg); s.Kind != events.SinkKafka || !slices.Equal(k.Brokers, cfg.Events.Kafka.Brokers) ||
		k.Topic != "floodgate-events" || k.ClientID != "floodgate" || k.Acks != "leader" || k.Compression != "zstd" ||
		k.TLS != nil || k.SASL == nil || *k.SASL != (events.KafkaSASL{Mechanism: "scram-sha-256", Username: "u", Password: "pw"}) {
		t.Errorf("kafka sink %+v", k)
	}
	// A TLS file that went away between check and serve is an error
	// that names it, not a plaintext connection.
	cfg.Events.Kafka.TLS = &config.EventsKafkaTLS{CA: "/nonexistent/ca.pem"}
	if _, err := EventSink(cfg); err == nil || !strings.Contains(err.Error(), "events.kafka.tls.ca") {
		t.Errorf("kafka sink with a missing CA file: %v", err)
	}

	cfg.Events.Sink = config.SinkFile
	if s := sinkOf(t, cfg); s.File.Path != cfg.Events.File.Path || s.NATS.URL != cfg.Events.NATS.URL {
		t.Errorf("file sink %+v", s)
	}
}

func sinkOf(t *testing.T, cfg *config.Config) events.Sink {
	t.Helper()
	s, err := EventSink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
