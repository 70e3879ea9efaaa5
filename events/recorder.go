package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Tuning. recordWait is the longest a request waits for its event to be
// durable: an fsync takes a few milliseconds, so a request only waits that
// long when the disk is sick, and then it answers "recorded": false rather
// than hold the client.
const (
	recordWait = 100 * time.Millisecond

	queueSize     = 32768   // events waiting for the writer: 0.65 s of 50,000/s
	maxBatch      = 1024    // events per group commit or delivery
	maxBatchBytes = 4 << 20 // bytes per group commit or delivery

	deliverTimeout = 5 * time.Second // one delivery to the sink
	closeFlush     = 5 * time.Second // Close's last delivery attempts

	// idleProbe is how often an idle forwarder checks its sink, so that
	// /readyz tells of a sink that went away before any event needs it.
	idleProbe = 5 * time.Second

	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second

	defaultSpoolMax = 1 << 30
)

var errQueueFull = errors.New("the events queue is full")

// Recorder records events durably and delivers them to the configured
// sink. Its methods are safe for concurrent use. A Recorder for sink none
// records nothing: Record returns false, Ready nil.
type Recorder struct {
	log     *slog.Logger
	metrics *metrics
	sink    sink   // nil for sink none
	spool   *spool // nil without spool_dir: the writer delivers directly
	cursor  *cursor

	queue  chan *pending
	kick   chan struct{} // writer -> forwarder: something new is spooled
	quit   chan struct{} // closed by Close: the writer drains and stops
	flush  chan struct{} // closed once the writer has stopped: the forwarder flushes and stops
	life   context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once

	down   atomic.Pointer[error] // why the sink is down; nil while it is up
	drops  dropLog
	direct time.Duration // directTimeout, or the Options' own
	wait   time.Duration // recordWait, or the Options' own
	// maxRecord bounds an event as encoded: the spool's bound, or the
	// sink's when it is smaller (Kafka's record).
	maxRecord int
	kafka     bool // the sink is Kafka: records carry their key and route

	// After a batch the sink did not take within the direct timeout,
	// batches go through the spool until directAfter, a wait that starts
	// at directBackoff and doubles while the sink stays slow: a sink that
	// is healthy but slower than the timeout would otherwise see every
	// batch sent straight to it time out, and part of it sent twice, each
	// time the spool drains. The writer alone uses these.
	directWait    time.Duration
	directAfter   time.Time
	directBackoff time.Duration
	directs       atomic.Int64 // batches sent straight to the sink
}

// The first wait after a direct delivery that fell short, and the longest.
const (
	directBackoff    = time.Second
	maxDirectBackoff = time.Minute
)

// pending is one event between Record and the writer's verdict.
type pending struct {
	rec  record
	err  error         // the verdict, set before done is closed
	done chan struct{} // closed by the writer; nil: nobody waits (Audit)
	ev   *Event        // Audit's event, for rec's Kafka key when delivered
}

// NewRecorder starts a recorder that writes to the sink c. It fails only when
// the spool cannot be opened (or c cannot work at all); a sink that cannot
// be reached is retried in the background while events wait in the spool,
// and Ready says why.
func NewRecorder(c Sink, o Options) (*Recorder, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Recorder{
		log:     log.With("component", "events"),
		metrics: newMetrics(o.Registerer),
		direct:  directTimeout,
		wait:    recordWait,

		maxRecord: maxRecord,

		directBackoff: directBackoff,
	}
	if o.directTimeout > 0 {
		r.direct = o.directTimeout
	}
	if o.directBackoff > 0 {
		r.directBackoff = o.directBackoff
	}
	if o.RecordWait > 0 {
		r.wait = o.RecordWait
	}
	r.drops.log = r.log
	if c.Kind == SinkNone {
		return r, nil
	}
	snk, err := newSink(c)
	if err != nil {
		return nil, err
	}
	r.sink = snk
	if c.Kind == SinkKafka {
		r.maxRecord, r.kafka = maxKafkaValue, true
	}
	if c.SpoolDir != "" {
		maxBytes := c.SpoolMaxBytes
		if maxBytes <= 0 {
			maxBytes = defaultSpoolMax
		}
		if r.spool, r.cursor, err = openSpool(c.SpoolDir, maxBytes, r.log); err != nil {
			snk.close()
			return nil, err
		}
		r.metrics.spooled.Set(float64(r.spool.pending.Load()))
	}
	r.queue = make(chan *pending, queueSize)
	r.kick = make(chan struct{}, 1)
	r.quit = make(chan struct{})
	r.flush = make(chan struct{})
	r.life, r.stop = context.WithCancel(context.Background())
	r.wg.Add(2)
	go r.write()
	if r.spool != nil {
		go r.forward()
	} else {
		go r.watch()
	}
	return r, nil
}

// Record hands e to the recorder and reports whether it is durable: in the
// fsynced spool, or accepted by the sink when there is no spool. It fills
// e.ID and e.Time when they are empty. It waits at most about 100 ms (less
// if ctx ends first) and never blocks when the recorder is overloaded: a
// full queue or a full spool is refused at once, counted as dropped and
// logged. An event Record returned false for may still be delivered (it
// was queued but not yet durable when Record gave up waiting); one it
// returned true for is delivered at least once, across crashes.
func (r *Recorder) Record(ctx context.Context, e *Event) bool {
	p := r.enqueue(e, true)
	if p == nil {
		return false
	}
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err == nil
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Audit hands e to the recorder and returns at once, for an event no
// answer depends on (events.audit): it is written with the others of its
// batch and delivered like any other, but nobody waits for it, so it
// costs the caller no goroutine, channel or timer. A full queue or spool
// drops it, counted and logged, as it does Record's. e must not be
// changed afterwards.
func (r *Recorder) Audit(e *Event) {
	r.enqueue(e, false)
}

// enqueue encodes e and queues it for the writer, returning what the
// writer will settle, or nil when e is refused (and counted as such).
// With wait, the writer closes the pending's done once it is settled.
func (r *Recorder) enqueue(e *Event, wait bool) *pending {
	if r == nil || r.sink == nil {
		return nil
	}
	now := time.Now()
	if e.ID == "" {
		e.ID = ids.next(now)
	}
	if e.Time.IsZero() {
		e.Time = now
	}
	if e.Type == "" || len(e.Type) > 255 || len(e.ID) > 255 {
		r.metrics.count(e.Type, resultFailed, 1)
		r.log.Error("events: an event needs a type, and an id and type of at most 255 bytes", "id", e.ID, "type", e.Type)
		return nil
	}
	data, err := encode(e)
	if err != nil {
		r.metrics.count(e.Type, resultFailed, 1)
		r.log.Error("events: cannot encode an event", "id", e.ID, "error", err.Error())
		return nil
	}
	p := &pending{rec: record{id: e.ID, typ: e.Type, data: data}}
	if wait {
		p.done = make(chan struct{})
		if r.kafka {
			// Record's caller may change e once it returns: the key is
			// taken now.
			p.rec.setKafka(e)
		}
	} else if r.kafka {
		// Audit's e is left alone: the writer takes the key off the
		// request's path, if the record goes straight to Kafka.
		p.ev = e
	}
	if p.rec.size() > r.maxRecord {
		r.metrics.count(e.Type, resultFailed, 1)
		r.log.Error("events: an event is too large to record", "id", e.ID, "bytes", len(data), "max", r.maxRecord)
		return nil
	}
	if r.closed.Load() {
		r.drop(e.Type, errClosed)
		return nil
	}
	select {
	case r.queue <- p:
	default:
		r.drop(e.Type, errQueueFull)
		return nil
	}
	return p
}

// Ready returns nil while the sink takes events, or why it does not (the
// events wait in the spool meanwhile), for /readyz to show.
func (r *Recorder) Ready() error {
	if r == nil || r.sink == nil {
		return nil
	}
	p := r.down.Load()
	if p == nil {
		return nil
	}
	if r.spool != nil {
		return fmt.Errorf("events sink %s is down: %w (%d events spooled)", r.sink.name(), *p, r.spool.pending.Load())
	}
	return fmt.Errorf("events sink %s is down: %w", r.sink.name(), *p)
}

// Close stops taking events, writes those queued, makes a last attempt of
// a few seconds at most to deliver what is spooled, and releases
// everything. Events still spooled are delivered by the next recorder on
// the same spool_dir. Close is idempotent; Record after Close returns false.
func (r *Recorder) Close() error {
	if r == nil || r.sink == nil {
		return nil
	}
	r.once.Do(func() {
		r.closed.Store(true)
		close(r.quit)
		// The writer closes flush once it has drained the queue, so the
		// forwarder's last pass sees every event written.
		r.wg.Wait()
		r.stop()
		r.drops.flush()
		r.sink.close()
		if r.spool != nil {
			if r.cursor.f != nil {
				r.cursor.f.Close()
			}
			r.spool.close()
		}
	})
	return nil
}

// write is the group-commit loop: it takes whatever is queued, makes it
// durable with one write and one fsync (or one delivery, without a spool),
// and then answers every Record waiting on that batch. Under load the
// batches grow, so the fsyncs per second stay bounded while the events
// per second do not.
func (r *Recorder) write() {
	defer r.wg.Done()
	defer close(r.flush)
	batch := make([]*pending, 0, maxBatch)
	for {
		var p *pending
		select {
		case p = <-r.queue:
		case <-r.quit:
			for {
				batch = r.fill(batch[:0])
				if len(batch) == 0 {
					return
				}
				r.commit(batch)
			}
		}
		batch = r.fill(append(batch[:0], p))
		if len(batch) < lingerBelow && r.spool != nil {
			// A small batch waits a moment for company: an fsync costs
			// the same for one event as for a hundred, and at a few
			// thousand events a second it is most of what recording
			// costs the gateway's CPU. The wait is bounded well inside
			// what Record allows.
			t := time.NewTimer(linger)
		more:
			for len(batch) < maxBatch {
				select {
				case p := <-r.queue:
					batch = append(batch, p)
				case <-t.C:
					break more
				case <-r.quit:
					break more
				}
			}
			t.Stop()
			batch = r.fill(batch)
		}
		r.commit(batch)
	}
}

// A batch of fewer than lingerBelow events waits up to linger for more
// before it is written and fsynced.
const (
	lingerBelow = 64
	linger      = 2 * time.Millisecond
)

// fill adds what is queued to batch, up to the batch bounds.
func (r *Recorder) fill(batch []*pending) []*pending {
	size := 0
	for _, p := range batch {
		size += p.rec.size()
	}
	for len(batch) < maxBatch && size < maxBatchBytes {
		select {
		case p := <-r.queue:
			batch = append(batch, p)
			size += p.rec.size()
		default:
			return batch
		}
	}
	return batch
}

func (r *Recorder) commit(batch []*pending) {
	delivered := 0 // the first events of batch, accepted by the sink
	if r.spool != nil {
		// While the sink is up and nothing waits in the spool, a batch goes
		// straight to the sink: accepted there, it is as recorded as it
		// would be in the spool, and it costs no write, fsync, read-back
		// or offset. What the sink does not take goes to the spool, and
		// so does everything after it until the forwarder has drained the
		// spool, so the order holds. The writer is the only one adding to
		// the spool, so pending == 0 here means every spooled event is
		// delivered.
		if r.spool.pending.Load() == 0 && r.down.Load() == nil && !time.Now().Before(r.directAfter) {
			delivered = r.deliverFirst(batch)
		}
		if rest := batch[delivered:]; len(rest) > 0 {
			r.spool.append(rest)
			select {
			case r.kick <- struct{}{}:
			default:
			}
			r.metrics.spooled.Set(float64(r.spool.pending.Load()))
		}
	} else {
		r.deliverDirect(batch)
		delivered = len(batch)
	}
	var tally tally
	for i, p := range batch {
		switch {
		case p.err == nil:
			tally.add(r.metrics, p.rec.typ, resultRecorded)
			if i < delivered {
				tally.add(r.metrics, p.rec.typ, resultDelivered)
			}
		case errors.Is(p.err, errSpoolFull):
			r.drop(p.rec.typ, p.err)
		default:
			tally.add(r.metrics, p.rec.typ, resultFailed)
		}
		if p.done != nil {
			close(p.done)
		}
	}
	tally.flush(r.metrics)
	if err := firstError(batch); err != nil && !errors.Is(err, errSpoolFull) {
		r.log.Error("events: cannot record events", "events", len(batch), "error", err.Error())
	}
}

// directTimeout bounds a delivery that bypasses the spool: what the sink
// has not taken by then is spooled, well within what Record waits.
const directTimeout = 40 * time.Millisecond

// deliverFirst hands batch to the sink and returns how many of its first
// events the sink accepted. A delivery that timed out may have delivered
// more: those are spooled and delivered again, with the same ids. A failure
// here does not mark the sink down (it may only have been slow): the
// events it leaves go to the spool, whose forwarder judges the sink from
// then on, and nothing goes straight to the sink until the spool is empty
// and the wait that a shortfall starts (directAfter) has passed.
func (r *Recorder) deliverFirst(batch []*pending) int {
	r.directs.Add(1)
	n, err := r.deliver(batch, r.direct)
	if n == len(batch) {
		r.directWait = 0
		return n
	}
	r.directWait = min(max(2*r.directWait, r.directBackoff), maxDirectBackoff)
	r.directAfter = time.Now().Add(r.directWait)
	why := "timed out"
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		why = err.Error()
	}
	r.log.Info("events: the sink did not take a batch straight away; batches go through the spool for a while",
		"timeout", r.direct.String(), "error", why, "for", r.directWait.String())
	return n
}

// deliver hands batch to the sink within timeout.
func (r *Recorder) deliver(batch []*pending, timeout time.Duration) (int, error) {
	recs := make([]record, len(batch))
	for i, p := range batch {
		recs[i] = p.rec
		if p.ev != nil {
			recs[i].setKafka(p.ev)
		}
	}
	ctx, cancel := context.WithTimeout(r.life, timeout)
	defer cancel()
	return r.sink.deliver(ctx, recs)
}

func firstError(batch []*pending) error {
	for _, p := range batch {
		if p.err != nil {
			return p.err
		}
	}
	return nil
}

// deliverDirect hands a batch straight to the sink, for a recorder without
// a spool (the file sink, typically, whose write is as durable as the
// spool's would be).
func (r *Recorder) deliverDirect(batch []*pending) {
	if n, err := r.deliver(batch, deliverTimeout); err != nil {
		r.sinkDown(err)
		failAll(batch[n:], err)
	} else {
		r.sinkUp()
	}
}

// watch probes the sink of a recorder without a spool at start, so that
// Ready tells the truth before the first event.
func (r *Recorder) watch() {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(r.life, deliverTimeout)
	defer cancel()
	if err := r.sink.probe(ctx); err != nil {
		r.sinkDown(err)
	} else {
		r.sinkUp()
	}
	<-r.flush
}

// drop counts an event refused before it was durable, and logs it at
// most once a second with the count since the last line: a flood of
// drops must be visible but must not flood the log.
func (r *Recorder) drop(typ string, why error) {
	r.metrics.count(typ, resultDropped, 1)
	r.drops.add(why)
}

type dropLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last time.Time
	n    int64
	why  error
}

func (d *dropLog) add(why error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	d.why = why
	if now := time.Now(); now.Sub(d.last) >= time.Second {
		d.last = now
		d.emit()
	}
}

func (d *dropLog) emit() {
	if d.n > 0 {
		d.log.Warn("events: dropped events", "count", d.n, "reason", d.why.Error())
		d.n = 0
	}
}

func (d *dropLog) flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.emit()
}
