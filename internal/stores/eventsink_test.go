package stores

import (
	"slices"
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

	s := EventSink(cfg)
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
	if r := EventSink(cfg).Redis; !slices.Equal(r.Addrs, []string{"10.0.0.7:6379"}) || r.MasterName != "" || r.Password != "p" {
		t.Errorf("own Redis: %+v", r)
	}

	// A memory store has no Redis to lend.
	cfg.Events.Redis.Addrs = nil
	cfg.Store.Type = config.StoreMemory
	if r := EventSink(cfg).Redis; len(r.Addrs) != 0 {
		t.Errorf("memory store: %+v", r)
	}

	for in, want := range map[config.Sink]events.SinkKind{
		config.SinkNone: events.SinkNone, "": events.SinkNone,
		config.SinkNATS: events.SinkNATS, config.SinkFile: events.SinkFile,
	} {
		cfg.Events.Sink = in
		if s := EventSink(cfg); s.Kind != want {
			t.Errorf("sink %q: kind %q, want %q", in, s.Kind, want)
		}
	}
	cfg.Events.Sink = config.SinkFile
	if s := EventSink(cfg); s.File.Path != cfg.Events.File.Path || s.NATS.URL != cfg.Events.NATS.URL {
		t.Errorf("file sink %+v", s)
	}
}
