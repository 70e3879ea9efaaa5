package events

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

// BenchmarkRecordRedis records events with bodies up to 1 KB through the
// spool to a Redis stream from many goroutines at once, as a gateway's
// requests would, and reports events/s from the first Record until the
// last event is in Redis: sustained throughput, delivery included, not
// just what the spool absorbs. The target is 10,000 events/s.
func BenchmarkRecordRedis(b *testing.B) {
	srv := testredis.Start(b)
	c := baseSink(SinkRedis)
	c.SpoolDir = b.TempDir()
	r, err := NewRecorder(withRedis(c, srv.Addr()), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	bodies := make([][]byte, 64)
	for i := range bodies {
		bodies[i] = bytes.Repeat([]byte{'a' + byte(i%26)}, i*16) // 0 to 1008 bytes
	}
	var refused, seq atomic.Int64
	b.ReportAllocs()
	// A gateway records from many request goroutines at once; group
	// commit turns them into few fsyncs.
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			e := &Event{
				Type:      TypeBreakerRejected,
				Route:     "lucky-meal",
				RequestID: "req",
				Method:    "POST",
				Path:      "/api/activities/lucky-meal/receive",
				Headers:   map[string][]string{"Content-Type": {"application/json"}},
				Body:      bodies[i%int64(len(bodies))],
			}
			if !r.Record(context.Background(), e) {
				refused.Add(1)
			}
		}
	})
	waitFor(b, "the spool to drain into Redis", func() bool { return r.spool.pending.Load() == 0 })
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(refused.Load()), "refused")
}
