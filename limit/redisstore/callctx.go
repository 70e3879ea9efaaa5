package redisstore

import (
	"context"
	"sync"
	"time"
)

// callCtx is the context of one call to Redis: its parent's values and
// cancellation, and a deadline, the earlier of the parent's and the one
// it is given. It is context.WithDeadline without what a call made alone
// never uses: rueidis sends such a call at once, on a connection whose
// own deadline it sets from Deadline, and reads Err, never Done. A
// callCtx arms its timer and its link to the parent only when something
// asks for Done (a call queued behind others on the connection), and
// callCtxs are pooled, timer and channel included: a decision pays no
// allocation for its timeout but the link to a parent that can end.
//
// release puts a callCtx back for another call only if nothing of it can
// be in use any more: its channel not closed, its timer and link stopped
// before they fired, and Value never asked. A context derived from it
// (net.Dialer's, when the call dials) asks for Value when it is made, and
// may watch Done from a goroutine after the call.
//
// A parent whose own deadline comes first (Envoy's 20 ms on a rate-limit
// call, within the store's timeout) ends the call by itself, as
// context.WithDeadline finds: Done and Err are then the parent's, and a
// call that waits arms nothing.
type callCtx struct {
	parent  context.Context
	dl      time.Time
	parent1 bool // the parent's deadline is dl: Done and Err are the parent's

	mu     sync.Mutex
	armed  bool          // Done was called in this use
	pinned bool          // not to be reused
	done   chan struct{} // closed when err is set; kept across uses until then
	err    error
	timer  *time.Timer
	stop   func() bool // ends the link to the parent (context.AfterFunc)
}

var callCtxs = sync.Pool{New: func() any { return new(callCtx) }}

// withDeadline returns a callCtx of parent that ends at the latest at dl.
// The caller calls release once the call has returned.
func withDeadline(parent context.Context, dl time.Time) *callCtx {
	c := callCtxs.Get().(*callCtx)
	c.parent, c.dl = parent, dl
	if d, ok := parent.Deadline(); ok && !d.After(dl) {
		c.dl, c.parent1 = d, parent.Done() != nil
	}
	return c
}

// withTimeout is withDeadline(parent, now + d).
func withTimeout(parent context.Context, d time.Duration) *callCtx {
	return withDeadline(parent, time.Now().Add(d))
}

// discard ends c and leaves it out of the pool: after a call that failed,
// whose command rueidis may still hold (a timed-out one, written later),
// with c as its context.
func (c *callCtx) discard() {
	c.mu.Lock()
	c.pinned = true
	c.mu.Unlock()
	c.release()
}

// release ends c, and puts it back in the pool if nothing of it can be
// in use (callCtx).
func (c *callCtx) release() {
	c.mu.Lock()
	if c.armed {
		if c.err == nil && !c.pinned {
			// A callback stopped before it ran never runs.
			stopped := c.timer.Stop()
			if c.stop != nil {
				stopped = c.stop() && stopped
			}
			c.pinned = !stopped
		}
		if c.err != nil || c.pinned {
			c.pinned = true
			c.end(context.Canceled)
			c.mu.Unlock()
			return
		}
	}
	if c.pinned {
		c.mu.Unlock()
		return
	}
	c.parent, c.dl, c.armed, c.stop, c.parent1 = nil, time.Time{}, false, nil, false
	c.mu.Unlock()
	callCtxs.Put(c)
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.dl, true }

func (c *callCtx) Value(key any) any {
	c.mu.Lock()
	c.pinned = true
	c.mu.Unlock()
	return c.parent.Value(key)
}

// Err is the error Done's closing set; before anything asks for Done,
// the parent's error, or DeadlineExceeded once the deadline has passed,
// as Done would be closed by then.
func (c *callCtx) Err() error {
	if c.parent1 {
		// The parent's timer may not have run yet at its deadline:
		// rueidis reads Err, not Done, to refuse a call whose time is up.
		if err := c.parent.Err(); err != nil {
			return err
		}
		if !time.Now().Before(c.dl) {
			return context.DeadlineExceeded
		}
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed {
		return c.err
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *callCtx) Done() <-chan struct{} {
	if c.parent1 {
		return c.parent.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed {
		return c.done
	}
	c.armed = true
	if c.done == nil {
		c.done = make(chan struct{})
	}
	if err := c.parent.Err(); err != nil {
		c.end(err)
		return c.done
	}
	d := time.Until(c.dl)
	if d <= 0 {
		c.end(context.DeadlineExceeded)
		return c.done
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(d, func() { c.cancel(context.DeadlineExceeded) })
	} else {
		c.timer.Reset(d)
	}
	if c.parent.Done() != nil {
		c.stop = context.AfterFunc(c.parent, func() { c.cancel(c.parent.Err()) })
	}
	return c.done
}

func (c *callCtx) cancel(err error) {
	c.mu.Lock()
	c.end(err)
	c.mu.Unlock()
}

// end closes done with err, once; c.mu is held. A closed callCtx is
// never reused.
func (c *callCtx) end(err error) {
	if c.err != nil {
		return
	}
	if err == nil {
		err = context.Canceled
	}
	c.err = err
	c.pinned = true
	close(c.done)
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.stop != nil {
		c.stop()
	}
}
