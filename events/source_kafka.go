package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaSource replays a route from the sink's topic. Its progress is the
// committed offsets of the consumer group ReplayGroup(route), one per
// partition: the offset of the first record not yet done. They are read
// and committed with the admin API rather than by joining the group as a
// member: a member that died (a crash, a kill) holds its partitions until
// its session times out, so a replay started again at once would wait
// for it, and a member's partitions move at every rebalance, while replay
// reads every partition of the topic from one process anyway. The group is
// a group all the same for the cluster's tools (kafka-consumer-groups
// --describe shows its offsets and lag), and a commit is refused while
// members of a group of that name are active.
//
// The end is the topic's end offsets when the source opens: events
// recorded after that are left to the next replay, as the other sources
// do. Events come in order within a partition, which holds every event of
// one limiting key (toKafka); partitions are read side by side.
//
// A record is bounded by the broker's message.max.bytes (1 MB by default)
// before it reaches the client; its value is decoded only within the
// matcher's bound.
type kafkaSource struct {
	topic string
	group string
	opts  []kgo.Opt // connection options, without any consuming
	m     matcher

	adm   *kadm.Client
	admCl *kgo.Client
	ends  map[int32]int64 // the end offset of each partition at open

	rd *kafkaReader // the reader of Next, made on its first call
	// Per partition: the offsets Next returned that are not done yet, in
	// order, and the offset after the last record Next read.
	taken     map[int32][]int64
	read      map[int32]int64
	committed map[int32]int64
	inFlight  map[*Event]kafkaPos
	atEnd     bool // the last Next found no more
}

type kafkaPos struct {
	partition int32
	offset    int64
}

// kafkaConnOpts are the options that reach c's cluster, shared by the
// sink's producer, and the source's admin client and readers.
func kafkaConnOpts(c KafkaSink) []kgo.Opt {
	id := c.ClientID
	if id == "" {
		id = "floodgate"
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(id),
		kgo.DialTimeout(kafkaDialTimeout),
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if c.SASL != nil {
		o, _ := kafkaSASL(*c.SASL) // c.check accepted it
		opts = append(opts, o)
	}
	return opts
}

func openKafkaSource(ctx context.Context, c KafkaSink, m matcher) (*kafkaSource, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := &kafkaSource{
		topic:     c.Topic,
		group:     ReplayGroup(m.route),
		opts:      kafkaConnOpts(c),
		m:         m,
		taken:     map[int32][]int64{},
		read:      map[int32]int64{},
		committed: map[int32]int64{},
		inFlight:  map[*Event]kafkaPos{},
	}
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		return nil, err
	}
	s.admCl, s.adm = cl, kadm.NewClient(cl)
	ends, err := s.adm.ListEndOffsets(ctx, c.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("events: the end of kafka topic %s on %s: %w", c.Topic, strings.Join(c.Brokers, ","), err)
	}
	s.ends = map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { s.ends[o.Partition] = o.Offset })
	return s, nil
}

// starts returns, for every partition with records left before its end,
// the group's committed offset, or the partition's start when the group
// has committed none.
func (s *kafkaSource) starts(ctx context.Context) (map[int32]int64, error) {
	committed, err := s.adm.FetchOffsets(ctx, s.group)
	if err == nil {
		err = committed.Error()
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		// No replay of the route committed yet. (Kafka answers with no
		// offsets; some implementations with this error.)
		committed, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("events: offsets of group %s: %w", s.group, err)
	}
	// A partition whose records before the end are all gone (retention,
	// DeleteRecords) has nothing to read: the reader would wait for ever.
	logStarts, err := s.adm.ListStartOffsets(ctx, s.topic)
	if err == nil {
		err = logStarts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("events: the start of kafka topic %s: %w", s.topic, err)
	}
	starts := map[int32]int64{}
	for p, end := range s.ends {
		at := int64(0) // before the log start: the reader resets to it
		if o, ok := committed.Lookup(s.topic, p); ok && o.At >= 0 {
			at = o.At
		}
		if o, ok := logStarts.Lookup(s.topic, p); ok {
			at = max(at, o.Offset)
		}
		if at < end {
			starts[p] = at
		}
	}
	return starts, nil
}

// kafkaReader reads partitions from given offsets to the source's ends,
// without a group: nothing it reads is committed.
type kafkaReader struct {
	cl    *kgo.Client
	topic string
	ends  map[int32]int64
	left  map[int32]bool // partitions not read to their end yet
	// queued holds, per partition, the records fetched and not yet
	// returned, in offset order; paused, the partitions whose fetching
	// waits for their queue to be taken.
	queued map[int32][]*kgo.Record
	paused map[int32]bool
}

func (s *kafkaSource) newReader(starts map[int32]int64) (*kafkaReader, error) {
	r := &kafkaReader{topic: s.topic, ends: s.ends, left: map[int32]bool{}, queued: map[int32][]*kgo.Record{}, paused: map[int32]bool{}}
	if len(starts) == 0 {
		return r, nil
	}
	offsets := map[int32]kgo.Offset{}
	for p, at := range starts {
		offsets[p] = kgo.NewOffset().At(at)
		r.left[p] = true
	}
	cl, err := kgo.NewClient(append(slices.Clone(s.opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: offsets}),
		// An offset the topic's retention deleted: from the oldest kept.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// A fetch brings a partition a bounded bite (maxQueued), so that
		// one whose events come later is not held whole in memory.
		kgo.FetchMaxPartitionBytes(kafkaFetchBytes),
		kgo.FetchMaxBytes(kafkaFetchBytes),
		kgo.MaxConcurrentFetches(1),
	)...)
	if err != nil {
		return nil, err
	}
	r.cl = cl
	return r, nil
}

// next returns the next record before the ends, or io.EOF. The partitions
// are merged in the order of their records' times (the sink stamps each
// with its event's time), so that one user's events on two partitions (a
// route with a limit per user and one per address, say) come back in the
// order they were recorded, an admission before the refusals after it. A
// record is returned only once every partition not read to its end has
// one fetched to compare it with.
func (r *kafkaReader) next(ctx context.Context) (*kgo.Record, error) {
	for {
		waiting := false
		for p := range r.left {
			if len(r.queued[p]) == 0 {
				waiting = true
				break
			}
		}
		if !waiting {
			break
		}
		fs := r.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("events: reading kafka topic %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			p, end := rec.Partition, r.ends[rec.Partition]
			if !r.left[p] {
				return
			}
			if rec.Offset >= end {
				// Recorded after the source opened, past a gap (the
				// records before the end deleted meanwhile).
				r.finish(p)
				return
			}
			r.queued[p] = append(r.queued[p], rec)
			if rec.Offset+1 >= end {
				r.finish(p)
			} else if len(r.queued[p]) >= maxQueued && !r.paused[p] {
				// Enough to compare with the others: fetching more
				// would hold a partition whole in memory while another
				// lags.
				r.paused[p] = true
				r.cl.PauseFetchPartitions(map[string][]int32{r.topic: {p}})
			}
		})
	}
	var first *kgo.Record
	for _, q := range r.queued {
		if len(q) > 0 && (first == nil || earlier(q[0], first)) {
			first = q[0]
		}
	}
	if first == nil {
		return nil, io.EOF
	}
	p := first.Partition
	q := r.queued[p]
	q[0] = nil
	r.queued[p] = q[1:]
	if len(q) == 1 && r.paused[p] && r.left[p] {
		r.paused[p] = false
		r.cl.ResumeFetchPartitions(map[string][]int32{r.topic: {p}})
	}
	return first, nil
}

// maxQueued is how many fetched records a partition holds before its
// fetching pauses until they are taken; kafkaFetchBytes bounds what one
// fetch brings of a partition (at least one record, however long).
const (
	maxQueued       = 512
	kafkaFetchBytes = 256 << 10
)

// earlier orders records of different partitions by time, then by event
// id (the time to the millisecond, then the recording gateway and its
// count), then by partition.
func earlier(a, b *kgo.Record) bool {
	if !a.Timestamp.Equal(b.Timestamp) {
		return a.Timestamp.Before(b.Timestamp)
	}
	if ia, ib := header(a, "id"), header(b, "id"); ia != ib {
		return ia < ib
	}
	return a.Partition < b.Partition
}

// header is the value of rec's header key, or "".
func header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (r *kafkaReader) finish(p int32) {
	delete(r.left, p)
	// What the partition holds past its end is for a later replay.
	r.cl.PauseFetchPartitions(map[string][]int32{r.topic: {p}})
}

func (r *kafkaReader) close() {
	if r.cl != nil {
		r.cl.Close()
	}
}

// event returns the event of rec if it is one to replay. The headers the
// sink writes name the route and type, so other routes' events are passed
// over without decoding; a record without them is decoded and judged on
// its JSON.
func (s *kafkaSource) event(rec *kgo.Record) (*Event, bool) {
	for _, h := range rec.Headers {
		switch {
		case h.Key == "route" && string(h.Value) != s.m.route:
			return nil, false
		case h.Key == "type" && !s.m.takes(string(h.Value)):
			return nil, false
		}
	}
	return s.m.decode(rec.Value, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset)
}

func (s *kafkaSource) Next(ctx context.Context) (*Event, error) {
	if s.rd == nil {
		starts, err := s.starts(ctx)
		if err != nil {
			return nil, err
		}
		if s.rd, err = s.newReader(starts); err != nil {
			return nil, err
		}
		for p, at := range starts {
			s.read[p], s.committed[p] = at, at
		}
	}
	s.atEnd = false
	for {
		rec, err := s.rd.next(ctx)
		if errors.Is(err, io.EOF) {
			// The events of other routes read since the last Done are
			// passed in the group too, so that the next replay does not
			// read them again.
			s.atEnd = true
			return nil, errors.Join(io.EOF, s.commit(ctx))
		}
		if err != nil {
			return nil, err
		}
		s.read[rec.Partition] = rec.Offset + 1
		e, ok := s.event(rec)
		if !ok {
			continue
		}
		s.taken[rec.Partition] = append(s.taken[rec.Partition], rec.Offset)
		s.inFlight[e] = kafkaPos{rec.Partition, rec.Offset}
		return e, nil
	}
}

func (s *kafkaSource) Done(ctx context.Context, e *Event) error {
	pos, ok := s.inFlight[e]
	if !ok {
		return fmt.Errorf("events: Done with an event Next did not return")
	}
	taken := s.taken[pos.partition]
	if i := slices.Index(taken, pos.offset); i >= 0 {
		s.taken[pos.partition] = slices.Delete(taken, i, i+1)
	}
	if lazyDone(e) && !(s.atEnd && len(s.inFlight) == 1) {
		// Committed with the next Done, or at the end with the events
		// passed over; the last one done after Next found the end is
		// committed now.
		delete(s.inFlight, e)
		return nil
	}
	if err := s.commit(ctx); err != nil {
		return fmt.Errorf("events: committing %s in group %s: %w", e.ID, s.group, err)
	}
	delete(s.inFlight, e)
	return nil
}

// commit commits, for each partition, the first offset not done: the
// first taken and not done, or past the last read when none is.
// Committing past an event in flight would lose it if replay stopped
// before it was done.
func (s *kafkaSource) commit(ctx context.Context) error {
	offs := kadm.Offsets{}
	for p, read := range s.read {
		at := read
		if taken := s.taken[p]; len(taken) > 0 {
			at = taken[0]
		}
		if at > s.committed[p] {
			offs.Add(kadm.Offset{Topic: s.topic, Partition: p, At: at, LeaderEpoch: -1})
		}
	}
	if len(offs) == 0 {
		return nil
	}
	resp, err := s.adm.CommitOffsets(ctx, s.group, offs)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return err
	}
	offs.Each(func(o kadm.Offset) { s.committed[o.Partition] = o.At })
	return nil
}

func (s *kafkaSource) Pending(ctx context.Context, fn func(*Event) bool) error {
	starts, err := s.starts(ctx)
	if err != nil {
		return err
	}
	r, err := s.newReader(starts)
	if err != nil {
		return err
	}
	defer r.close()
	for {
		rec, err := r.next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if e, ok := s.event(rec); ok && !fn(e) {
			return nil
		}
	}
}

func (s *kafkaSource) Close() error {
	if s.rd != nil {
		s.rd.close()
	}
	s.admCl.Close()
	return nil
}
