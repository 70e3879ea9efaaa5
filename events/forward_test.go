package events

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// recordBig records events from to to-1, each with a body of 3,000 bytes
// (about 4 KB in the spool, base64), at once, and returns them as the
// sink should hold them, though not in the spool's order.
func recordBig(t *testing.T, r *testRecorder, from, to int) []stored {
	t.Helper()
	es := make([]*Event, to-from)
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		e := testEvent(i)
		e.Body = []byte(strings.Repeat("y", 3000))
		es[i-from] = e
		wg.Go(func() {
			if !r.Record(context.Background(), e) {
				t.Errorf("Record(%d) = false", i)
			}
		})
	}
	wg.Wait()
	var want []stored
	for _, e := range es {
		want = append(want, stored{id: e.ID, data: encoded(t, e)})
	}
	return want
}

// TestKafkaCloseWhileBusy: Close makes a last attempt of a few seconds at
// most, though the forwarder is busy with a backlog that takes far longer
// to deliver, and the events it leaves in the spool are delivered by the
// next recorder on the same spool_dir.
func TestKafkaCloseWhileBusy(t *testing.T) {
	t.Parallel()
	// Batches of three events at most, and a slow broker: the backlog
	// below takes about 20 s to deliver.
	k := startKafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "12000"}))
	var slow atomic.Bool
	slow.Store(true)
	k.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		if slow.Load() {
			time.Sleep(200 * time.Millisecond)
		}
		return nil, nil, false
	})
	c := kafkaCase(t, k.ListenAddrs())
	r := newTestRecorder(t, c, Options{})
	want := recordBig(t, r, 0, 150)
	start := time.Now()
	r.Close()
	took := time.Since(start)
	t.Logf("Close took %v", took.Round(time.Millisecond))
	if limit := closeFlush + deliverTimeout + 2*time.Second; took > limit {
		t.Errorf("Close with a backlog took too long, want at most %v", limit)
	}
	slow.Store(false)
	newTestRecorder(t, c, Options{}) // the next recorder on the spool
	// Recorded at once, the events are spooled in no order of theirs:
	// what counts here is that none is lost.
	waitLong(t, "every event in the topic", func() bool { return holdsAll(kafkaRecords(t, k.ListenAddrs()), want) })
}

// TestKafkaTopicRefusesEveryEvent: a topic that refuses every event, each
// too large for it alone, has them set aside at the cost of about one
// delivery each, not of the whole rest of the batch each: a backlog must
// not cost the square of its size in bytes sent.
func TestKafkaTopicRefusesEveryEvent(t *testing.T) {
	t.Parallel()
	k := startKafka(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "1000"}))
	var records atomic.Int64
	k.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				var b kmsg.RecordBatch
				if b.ReadFrom(p.Records) == nil {
					records.Add(int64(b.NumRecords))
				}
			}
		}
		return nil, nil, false
	})
	c := kafkaCase(t, k.ListenAddrs())
	r := newTestRecorder(t, c, Options{})
	const n = 100
	recordBig(t, r, 0, n)
	path := filepath.Join(c.SpoolDir, refusedFile)
	waitLong(t, "every event set aside", func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Count(b, []byte("\n")) >= n
	})
	// The recorder's group commit may spool the events in a few batches,
	// each of which is sent whole once or twice before it is small.
	t.Logf("%d records produced for %d events", records.Load(), n)
	if p := records.Load(); p > 10*n {
		t.Errorf("%d records produced for %d events, want at most %d", p, n, 10*n)
	}
	if f := r.total(TypeBreakerRejected, resultFailed) + r.total(TypeRateLimited, resultFailed); f != n {
		t.Errorf("failed = %v, want %d", f, n)
	}
}
