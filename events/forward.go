package events

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// forward delivers the spool to the sink in order. It persists its
// position after each delivered batch, so a restart resends at most the
// batch that was in flight; while the sink fails it retries with a capped,
// jittered backoff and the spool grows.
func (r *Recorder) forward() {
	defer r.wg.Done()
	f := &forwarder{r: r, backoff: minBackoff, batch: maxBatch}
	if err := f.probe(); err != nil {
		r.sinkDown(err)
	}
	for {
		if !f.stopping {
			// Close's last pass starts now, though the forwarder has not
			// waited since: it is busy with a backlog, whose delivery
			// may take far longer than Close's few seconds.
			select {
			case <-r.flush:
				f.lastPass()
			default:
			}
		}
		if f.stopping && time.Now().After(f.deadline) {
			return
		}
		// A fresh buffer for every batch: a sink whose delivery timed out
		// may still write the records' bytes later (a pipelined command
		// already queued), so they must never be overwritten.
		recs, ends, _, err := r.spool.read(r.cursor, f.batch, maxBatchBytes, nil)
		var goOn bool
		switch {
		case err != nil:
			r.log.Error("events: cannot read the spool", "error", err.Error())
			goOn = f.retry(err)
		case len(recs) == 0:
			goOn = !f.stopping && f.idle()
		default:
			goOn = f.deliver(recs, ends)
		}
		if !goOn {
			return
		}
	}
}

// forwarder is the state of forward between batches.
type forwarder struct {
	r        *Recorder
	backoff  time.Duration
	stopping bool // Close asked for a last pass, until deadline
	deadline time.Time
	healthy  bool      // the sink took the last batch or probe
	probed   time.Time // when the sink was last probed

	// batch is how many records a delivery takes: maxBatch, halved each
	// time the sink refuses a batch as too large whose first record it
	// takes alone (or refuses alone twice running), and doubled again
	// with each delivery from regrowAfter after the last refusal.
	batch  int
	shrunk time.Time
	// asideLast: the last refused batch's first record was set aside.
	asideLast bool
}

// regrowAfter is how long the forwarder keeps to a batch size a refusal
// halved before it tries larger ones again: a topic's bound on its batches
// rarely moves, and trying a larger batch once a second costs a refusal
// and a delivery.
const regrowAfter = time.Second

// lastPass starts Close's last attempt, of closeFlush at most.
func (f *forwarder) lastPass() {
	f.stopping, f.deadline = true, time.Now().Add(closeFlush)
}

// wait pauses for d, or (onKick) until there is something new to send;
// it reports false when the forwarder must stop now.
func (f *forwarder) wait(d time.Duration, onKick bool) bool {
	var tc <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	}
	kick := f.r.kick
	if !onKick {
		kick = nil
	}
	flush := f.r.flush
	if f.stopping {
		flush = nil
	}
	select {
	case <-tc:
	case <-kick:
	case <-flush:
		f.lastPass()
		// The sink being down, there is no point in a last pass.
		return f.healthy
	}
	return true
}

// retry waits out the backoff after err; false: stop.
func (f *forwarder) retry(err error) bool {
	f.healthy = false
	f.r.sinkDown(err)
	if f.stopping {
		return false
	}
	d := f.backoff/2 + rand.N(f.backoff/2+1)
	f.backoff = min(2*f.backoff, maxBackoff)
	return f.wait(d, false)
}

// probe asks the sink whether it answers, and says so when it is back;
// the error is the sink's, for the caller to act on.
func (f *forwarder) probe() error {
	f.probed = time.Now()
	ctx, cancel := context.WithTimeout(f.r.life, deliverTimeout)
	err := f.r.sink.probe(ctx)
	cancel()
	if err != nil {
		return err
	}
	if !f.healthy {
		f.healthy, f.backoff = true, minBackoff
		f.r.sinkUp()
	}
	return nil
}

// idle waits for something to send, probing the sink now and then, so
// that Ready notices when it comes back, and when it goes away while
// idle; false: stop.
func (f *forwarder) idle() bool {
	if !f.healthy || time.Since(f.probed) >= idleProbe {
		if err := f.probe(); err != nil {
			return f.retry(err)
		}
	}
	return f.wait(idleProbe, true)
}

// deliver sends one batch, and moves the spool's position past what the
// sink took; false: stop.
func (f *forwarder) deliver(recs []record, ends []int64) bool {
	r := f.r
	ctx, cancel := f.deliveryContext()
	n, err := r.sink.deliver(ctx, recs)
	cancel()
	if n > 0 {
		f.advance(ends[n-1], n)
		var t tally
		for _, rec := range recs[:n] {
			t.add(r.metrics, rec.typ, resultDelivered)
		}
		t.flush(r.metrics)
	}
	var refused refusedError
	if errors.As(err, &refused) && n < len(recs) {
		// A broker bounds a whole produce batch (max.message.bytes), so
		// a batch refused as too large may hold records that fit one by
		// one: the first goes again alone, and is set aside only if it
		// is refused alone too. Taken alone, it was the batch that was
		// too large: the next ones are half the size of what was left
		// of it, so that a topic's bound is found in a few refusals
		// rather than paid for with two deliveries an event.
		//
		// Set aside, it was the record that was too large, and the
		// batch size stays, unless the last refusal set one aside too:
		// events too large one after another halve it as well, or a
		// topic that refuses every event would cost, for each, a
		// delivery of the whole rest of its batch, and a backlog the
		// square of its bytes.
		alone, aside, goOn := f.deliverAlone(&recs[n], ends[n])
		if left := len(recs) - n; left > 1 && (alone || (aside && f.asideLast)) {
			f.batch, f.shrunk = max(1, left/2), time.Now()
		}
		f.asideLast = aside
		return goOn
	}
	if err != nil {
		return f.retry(err)
	}
	if !f.healthy {
		f.healthy = true
		f.r.sinkUp()
	}
	f.backoff, f.asideLast = minBackoff, false
	if f.batch < maxBatch && time.Since(f.shrunk) >= regrowAfter {
		f.batch = min(2*f.batch, maxBatch)
	}
	return true
}

// deliverAlone sends rec, the spool's next record, by itself, after a
// batch it was in was refused for good; it reports whether the sink took
// it, whether it refused it and it was set aside, and false for goOn when
// the forwarder must stop.
func (f *forwarder) deliverAlone(rec *record, end int64) (took, aside, goOn bool) {
	r := f.r
	ctx, cancel := f.deliveryContext()
	n, err := r.sink.deliver(ctx, []record{*rec})
	cancel()
	var refused refusedError
	switch {
	case n == 1:
		f.advance(end, 1)
		r.metrics.count(rec.typ, resultDelivered, 1)
		return true, false, true
	case errors.As(err, &refused):
		f.setAside(rec, end, err)
		return false, true, true
	}
	return false, false, f.retry(err)
}

// setAside moves the spool's position past rec, which the sink refuses for
// good, and appends it to the spool directory's refused file (up to
// maxRefusedFile), so that it neither blocks the events behind it nor is
// lost without a trace. It is counted failed and logged.
func (f *forwarder) setAside(rec *record, end int64, err error) {
	r := f.r
	kept := "refused file"
	path := filepath.Join(r.spool.dir, refusedFile)
	if st, serr := os.Stat(path); serr == nil && st.Size()+int64(len(rec.data)) > maxRefusedFile {
		kept = "not kept: the refused file is full"
	} else if werr := appendLine(path, rec.data); werr != nil {
		kept = "not kept: " + werr.Error()
	}
	r.log.Error("events: the sink refuses an event for good; it is set aside",
		"sink", r.sink.name(), "id", rec.id, "type", rec.typ, "bytes", len(rec.data), "error", err.Error(),
		"kept", kept, "path", path)
	f.advance(end, 1)
	r.metrics.count(rec.typ, resultFailed, 1)
}

// deliveryContext bounds one delivery: deliverTimeout, or what is left of
// Close's last attempts.
func (f *forwarder) deliveryContext() (context.Context, context.CancelFunc) {
	if f.stopping {
		return context.WithDeadline(f.r.life, f.deadline)
	}
	return context.WithTimeout(f.r.life, deliverTimeout)
}

// advance moves the spool's position to end, past n records that are
// done with (delivered or set aside), and persists it.
func (f *forwarder) advance(end int64, n int) {
	r := f.r
	r.cursor.off = end
	if err := r.spool.commit(r.cursor); err != nil {
		// The events are done with; failing to remember that only means
		// they may be delivered again after a restart.
		r.log.Error("events: cannot persist the spool position", "error", err.Error())
	}
	r.spool.pending.Add(-int64(n))
	r.metrics.spooled.Set(float64(r.spool.pending.Load()))
}

// The refused file holds, one JSON line each, the events a sink refused
// for good (setAside), for an operator to look at or send on by hand.
const (
	refusedFile    = "refused.jsonl"
	maxRefusedFile = 256 << 20
)

// appendLine appends data and a newline to the file path, and syncs it.
func appendLine(path string, data []byte) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = fh.Write(append(data[:len(data):len(data)], '\n'))
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// sinkDown records why the sink failed, logging only when it was up, so a
// sink that is down for an hour logs once, not at every retry.
func (r *Recorder) sinkDown(err error) {
	if prev := r.down.Swap(&err); prev == nil {
		r.log.Warn("events: the sink is down; events wait in the spool and are delivered, in order, when it is back",
			"sink", r.sink.name(), "error", err.Error(), "spooled", r.spooled())
	}
}

func (r *Recorder) sinkUp() {
	if prev := r.down.Swap(nil); prev != nil {
		r.log.Info("events: the sink is back", "sink", r.sink.name(), "spooled", r.spooled())
	}
}

func (r *Recorder) spooled() int64 {
	if r.spool == nil {
		return 0
	}
	return r.spool.pending.Load()
}
