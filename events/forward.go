package events

import (
	"context"
	"math/rand/v2"
	"time"
)

// forward delivers the spool to the sink in order. It persists its
// position after each delivered batch, so a restart resends at most the
// batch that was in flight; while the sink fails it retries with a capped,
// jittered backoff and the spool grows.
func (r *Recorder) forward() {
	defer r.wg.Done()
	var (
		backoff  = minBackoff
		stopping bool
		deadline time.Time
		healthy  bool
	)
	var probed time.Time // when the sink was last probed
	// wait pauses for d, or until there is something new to send; it
	// reports false when the forwarder must stop now.
	wait := func(d time.Duration, onKick bool) bool {
		var tc <-chan time.Time
		if d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			tc = t.C
		}
		kick := r.kick
		if !onKick {
			kick = nil
		}
		flush := r.flush
		if stopping {
			flush = nil
		}
		select {
		case <-tc:
		case <-kick:
		case <-flush:
			stopping, deadline = true, time.Now().Add(closeFlush)
			// The sink being down, there is no point in a last pass.
			return healthy
		}
		return true
	}
	retry := func(err error) bool {
		healthy = false
		r.sinkDown(err)
		if stopping {
			return false
		}
		d := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		return wait(d, false)
	}

	ctx, cancel := context.WithTimeout(r.life, deliverTimeout)
	err := r.sink.probe(ctx)
	cancel()
	probed = time.Now()
	if err == nil {
		healthy = true
		r.sinkUp()
	} else {
		r.sinkDown(err)
	}

	for {
		if stopping && time.Now().After(deadline) {
			return
		}
		// A fresh buffer for every batch: a sink whose delivery timed out
		// may still write the records' bytes later (a pipelined command
		// already queued), so they must never be overwritten.
		recs, ends, _, err := r.spool.read(r.cursor, maxBatch, maxBatchBytes, nil)
		if err != nil {
			r.log.Error("events: cannot read the spool", "error", err.Error())
			if !retry(err) {
				return
			}
			continue
		}
		if len(recs) == 0 {
			if stopping {
				return
			}
			if !healthy || time.Since(probed) >= idleProbe {
				// Nothing to send, but Ready should notice when the
				// sink comes back, and when it goes away while idle.
				probed = time.Now()
				ctx, cancel := context.WithTimeout(r.life, deliverTimeout)
				err := r.sink.probe(ctx)
				cancel()
				if err != nil {
					if !retry(err) {
						return
					}
					continue
				}
				if !healthy {
					healthy, backoff = true, minBackoff
					r.sinkUp()
				}
			}
			if !wait(idleProbe, true) {
				return
			}
			continue
		}
		ctx, cancel := context.WithTimeout(r.life, deliverTimeout)
		if stopping {
			ctx, cancel = context.WithDeadline(r.life, deadline)
		}
		n, err := r.sink.deliver(ctx, recs)
		cancel()
		if n > 0 {
			r.cursor.off = ends[n-1]
			if cerr := r.spool.commit(r.cursor); cerr != nil {
				// The events are delivered; failing to remember that
				// only means they may be delivered again after a restart.
				r.log.Error("events: cannot persist the spool position", "error", cerr.Error())
			}
			r.spool.pending.Add(-int64(n))
			r.metrics.spooled.Set(float64(r.spool.pending.Load()))
			for _, rec := range recs[:n] {
				r.metrics.count(rec.typ, resultDelivered, 1)
			}
		}
		if err != nil {
			if !retry(err) {
				return
			}
			continue
		}
		if !healthy {
			healthy = true
			r.sinkUp()
		}
		backoff = minBackoff
	}
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
