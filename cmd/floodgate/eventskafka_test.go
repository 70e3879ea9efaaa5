package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/events"
)

// replayKafkaKeys is how many limiting keys the Kafka replay's events
// have: event i's is user-(i mod replayKafkaKeys).
const replayKafkaKeys = 5

// replayKafkaKey is event i's limiting key.
func replayKafkaKey(i int) string { return fmt.Sprintf("user-%d", i%replayKafkaKeys) }

// kafkaReplayEvents records n events as recordEvents does to the topic of
// k, event i with the key replayKafkaKey(i), and returns them and the
// events block of the config.
func kafkaReplayEvents(t *testing.T, k *testKafka, n int) ([]*events.Event, string) {
	t.Helper()
	c := eventsBlock(config.SinkKafka)
	c.Kafka.Brokers = k.addrs
	c.Kafka.Topic = kafkaCrashTopic
	c.SpoolDir = t.TempDir()
	want := recordEventsWith(t, c, events.Options{}, n, func(e *events.Event, i int) {
		e.Keys = map[string][]string{"user": {replayKafkaKey(i)}}
	})
	// Every event is in the topic, one key on one partition, and the
	// keys on more than one.
	var got []topicRecord
	deadline := time.Now().Add(kafkaDeliverTimeout)
	for {
		var err error
		got, err = readTopic(k.addrs, kafkaCrashTopic)
		if err == nil && len(got) >= 2*n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d records in the topic (%v), want %d", kafkaDeliverTimeout, len(got), err, 2*n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	keyPart := map[string]int32{}
	parts := map[int32]bool{}
	for _, r := range got {
		if p, ok := keyPart[r.key]; ok && p != r.partition {
			t.Fatalf("key %q on partitions %d and %d", r.key, p, r.partition)
		}
		keyPart[r.key], parts[r.partition] = r.partition, true
	}
	if len(parts) < 2 {
		t.Fatalf("%d keys all on partitions %v", replayKafkaKeys, parts)
	}
	yaml := fmt.Sprintf("  sink: kafka\n  kafka: {brokers: [%s], topic: %q}\n  spool_dir: %q", k.brokersYAML(), kafkaCrashTopic, c.SpoolDir)
	return want, yaml
}

// replayOffsets is what the consumer group of lucky-meal's replay has
// committed, per partition; none when the group does not exist.
func replayOffsets(t *testing.T, k *testKafka) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).FetchOffsets(ctx, events.ReplayGroup("lucky-meal"))
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}
	}
	if err != nil {
		t.Fatalf("offsets of group %s: %v", events.ReplayGroup("lucky-meal"), err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == kafkaCrashTopic && o.At >= 0 {
			out[o.Partition] = o.At
		}
	})
	return out
}

// topicEnds is the end offset of each partition of the topic.
func topicEnds(t *testing.T, k *testKafka) map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, kafkaCrashTopic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			out[o.Partition] = o.Offset
		}
	})
	return out
}

// checkReplayedPerKey is checkReplayed for a sink that keeps order within
// a key alone: the upstream got every untruncated event of want, each as
// it was recorded and with its id as Idempotency-Key, at most most times
// (1: exactly once), and, when ordered, the first sends of one key's
// events came in the order they were recorded (requests sent side by side
// by --parallel can arrive in any order). The pace is not checked.
func checkReplayedPerKey(t *testing.T, got []received, want []*events.Event, most int, ordered bool) {
	t.Helper()
	byID := map[string]int{}
	for i, e := range want {
		byID[e.ID] = i
	}
	times := map[string]int{}
	last := map[string]int{} // key -> the event number last sent first
	for n, r := range got {
		id := r.header.Get("Idempotency-Key")
		i, ok := byID[id]
		if !ok {
			t.Errorf("request %d: Idempotency-Key %q is no event of lucky-meal's", n, id)
			continue
		}
		e := want[i]
		if e.Truncated {
			t.Errorf("request %d: truncated event %s (%s) was sent", n, e.ID, e.RequestID)
		}
		wantURI := "/base/activities/lucky-meal/receive?" + e.Query
		if r.method != e.Method || r.uri != wantURI || r.body != string(e.Body) {
			t.Errorf("request %d = %s %s %q, want %s %s %q", n, r.method, r.uri, r.body, e.Method, wantURI, e.Body)
		}
		for _, h := range []string{"Content-Type", "X-User-Id"} {
			if r.header.Get(h) != e.Headers[h][0] {
				t.Errorf("request %d: %s = %q, want %q", n, h, r.header.Get(h), e.Headers[h][0])
			}
		}
		if got := r.header.Get("X-Request-Id"); got != e.RequestID {
			t.Errorf("request %d: X-Request-Id = %q, want %q", n, got, e.RequestID)
		}
		if times[id]++; times[id] > 1 {
			continue
		}
		key := replayKafkaKey(i)
		if prev, ok := last[key]; ordered && ok && prev > i {
			t.Errorf("request %d: event %d of key %s was sent after event %d, recorded after it", n, i, key, prev)
		}
		last[key] = i
	}
	for i, e := range want {
		switch {
		case e.Truncated:
		case times[e.ID] == 0:
			t.Errorf("event %d (%s) was never sent", i, e.ID)
		case times[e.ID] > most:
			t.Errorf("event %d (%s) was sent %d times, want at most %d", i, e.ID, times[e.ID], most)
		}
	}
}

// TestEventsReplayKafka replays lucky-meal's events from a topic of three
// partitions, several limiting keys on each: a dry run lists them and
// commits nothing; a run stopped with Ctrl-C reports what remains, and the
// next run sends the rest and commits the topic's end; a last run sends
// nothing.
func TestEventsReplayKafka(t *testing.T) {
	t.Parallel()
	for _, parallel := range []int{1, 4} {
		t.Run("parallel "+strconv.Itoa(parallel), func(t *testing.T) {
			t.Parallel()
			testEventsReplayKafka(t, parallel)
		})
	}
}

func testEventsReplayKafka(t *testing.T, parallel int) {
	const n = 30 // 27 sendable: 0, 10 and 20 are truncated
	k := startTestKafka(t)
	want, yaml := kafkaReplayEvents(t, k, n)
	// With more than one in flight, the upstream is slow enough that
	// Ctrl-C finds several there.
	var delay time.Duration
	rate := "20/s"
	if parallel > 1 {
		delay, rate = 100*time.Millisecond, "1000/s"
	}
	up := newReplayUpstream(t, http.StatusOK, func(u *replayUpstream) { u.delay = delay })
	file := replayConfig(t, up.URL, yaml)
	par := strconv.Itoa(parallel)

	// A dry run lists every event and commits nothing, so the next
	// lists them all again.
	for range 2 {
		stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--dry-run")
		if code != exitOK {
			t.Fatalf("dry run: exit %d; stderr:\n%s", code, stderr)
		}
		for _, e := range want {
			verb := "would send event "
			if e.Truncated {
				verb = "would skip truncated event "
			}
			if !strings.Contains(stdout, verb+e.ID) {
				t.Errorf("dry run does not say %q:\n%s", verb+e.ID, stdout)
			}
		}
		if !strings.Contains(stdout, "dry run: of 30 events pending, would send 27, fail 0, skip 3, collapse 0, limit 0; nothing sent or marked done\n") {
			t.Errorf("dry run: stdout:\n%s", stdout)
		}
		if got := replayOffsets(t, k); len(got) != 0 {
			t.Fatalf("a dry run committed offsets %v", got)
		}
	}
	if n := len(up.received()); n != 0 {
		t.Fatalf("a dry run sent %d requests", n)
	}

	// Ctrl-C: the requests in flight finish, and the run reports what
	// remains.
	var out syncBuffer
	cmd := exec.Command(floodgateBin, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", rate, "--parallel", par)
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(waitTimeout)
	for len(up.received()) < 5 {
		if time.Now().After(deadline) {
			t.Fatal("replay sent nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGINT: %v, want 0; stdout:\n%s", err, out.String())
	}
	m := summaryLine.FindStringSubmatch(out.String())
	if m == nil || m[6] == "0" {
		t.Fatalf("the interrupted run does not report what remains:\n%s", out.String())
	}
	sent := len(up.received())
	if strconv.Itoa(sent) != m[1] {
		t.Errorf("the interrupted run says it succeeded %s times; the upstream got %d", m[1], sent)
	}
	if got := replayOffsets(t, k); len(got) == 0 {
		t.Errorf("the interrupted run, which sent %d events, committed no offset", sent)
	}
	t.Logf("interrupted after %d sends, at most %d at once: %s; committed %v of %v",
		sent, up.mostInFlight(), m[0], replayOffsets(t, k), topicEnds(t, k))

	// The next run sends the rest: of what the first sent, again only
	// what it had in flight.
	stdout, stderr, code := floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s", "--parallel", par)
	if code != exitOK {
		t.Fatalf("resumed replay: exit %d; stderr:\n%s", code, stderr)
	}
	m2 := summaryLine.FindStringSubmatch(stdout)
	if m2 == nil || m2[6] != "0" {
		t.Fatalf("resumed replay: %s", stdout)
	}
	// One at a time, the request in flight at Ctrl-C finished and was
	// marked done: none is sent twice, and each key's events came in
	// order. With more in flight, no more than those may be sent again.
	most := 1
	if parallel > 1 {
		most = 2
	}
	checkReplayedPerKey(t, up.received(), want, most, parallel == 1)
	if got := len(up.received()); got < 27 || got > 27+parallel || parallel == 1 && got != 27 {
		t.Errorf("the upstream got %d requests, want 27 events, of which at most %d sent twice (--parallel %d)", got, parallel, parallel)
	}
	if ends, got := topicEnds(t, k), replayOffsets(t, k); !maps.Equal(got, ends) {
		t.Errorf("after a whole replay the group committed %v; the topic ends at %v", got, ends)
	}

	// Everything is done: another run sends nothing.
	total := len(up.received())
	stdout, stderr, code = floodgate(t, "events", "replay", "-c", file, "--route", "lucky-meal", "--rate", "200/s")
	if code != exitOK {
		t.Fatalf("third replay: exit %d; stderr:\n%s", code, stderr)
	}
	if m := summaryLine.FindString(stdout); m != "succeeded 0, failed 0, skipped 0, collapsed 0, limited 0, remaining 0" {
		t.Errorf("third replay: summary %q; stdout:\n%s", m, stdout)
	}
	if got := len(up.received()); got != total {
		t.Errorf("the upstream got %d requests in all, %d before this run", got, total)
	}
}

// TestEventsReplayKafkaDuplicates: a topic holds events 0 (truncated) and
// 3 twice, the copies produced after every other event, with the same key,
// headers and value, as the sink's redelivery stores them. All the events
// have one key, so they are on one partition, in order; replay handles
// each event once, in its first place.
func TestEventsReplayKafkaDuplicates(t *testing.T) {
	t.Parallel()
	k := startTestKafka(t)
	c := eventsBlock(config.SinkKafka)
	c.Kafka.Brokers = k.addrs
	c.Kafka.Topic = kafkaCrashTopic
	c.SpoolDir = t.TempDir()
	want := recordEventsWith(t, c, events.Options{}, 20, func(e *events.Event, _ int) {
		e.Keys = map[string][]string{"user": {"one"}}
	})
	var got []topicRecord
	deadline := time.Now().Add(kafkaDeliverTimeout)
	for {
		var err error
		got, err = readTopic(k.addrs, kafkaCrashTopic)
		if err == nil && len(got) >= 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d records in the topic (%v), want 40", kafkaDeliverTimeout, len(got), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.addrs...), kgo.DefaultProduceTopic(kafkaCrashTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	copies := 0
	for _, r := range got {
		if id := r.headers["id"]; id != want[0].ID && id != want[3].ID {
			continue
		}
		rec := &kgo.Record{Key: []byte(r.key), Value: r.value}
		for _, h := range []string{"id", "route", "type"} {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h, Value: []byte(r.headers[h])})
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		res := cl.ProduceSync(ctx, rec)
		cancel()
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		if p := res[0].Record.Partition; p != r.partition {
			t.Fatalf("the copy of %s is on partition %d, the event on %d", r.headers["id"], p, r.partition)
		}
		copies++
	}
	if copies < 2 {
		t.Fatalf("%d records of events 0 and 3 in the topic, want 2 or more", copies)
	}
	yaml := fmt.Sprintf("  sink: kafka\n  kafka: {brokers: [%s], topic: %q}\n  spool_dir: %q", k.brokersYAML(), kafkaCrashTopic, c.SpoolDir)
	testDuplicatesReplayed(t, want, yaml)
}
