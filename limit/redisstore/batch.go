package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/internal/core"
)

// Batching. Every decision of mode d (fixed windows only, the limits most
// requests meet) goes through the store's batcher. While fewer than
// maxFlying calls of mode d are in flight, a decision is sent at once as
// its own call, so an idle gateway waits for nothing. Once they are all
// in flight, decisions queue, and when a call returns, everything queued
// meanwhile goes to Redis as one call of mode b, which decides the
// requests one after the other exactly as separate calls would. A busy
// gateway then makes fewer, larger calls: keys that every request shares
// (a global limit, a route's) are read and written once per batch instead
// of once per request, and Redis runs one script instead of many, which is
// what bounds how many decisions one Redis makes for all the gateways that
// share it.
const (
	// maxFlying is how many calls of mode d and b are in flight at once:
	// enough that at moderate load decisions rarely queue, few enough
	// that under saturation the batches are large. A queued decision
	// waits for one of them to return (or more, while over maxBatch
	// decisions are queued). docs/bench-log.md compares 2 and 4.
	maxFlying = 4

	// A batch takes at most this many requests and limits, so that its
	// script runs for a bounded time and its keys fit Lua's unpack.
	maxBatch       = 64
	maxBatchLimits = 256
)

// batcher queues the decisions of mode d that wait for a call.
type batcher struct {
	mu     sync.Mutex
	queue  []*waiter
	flying int // calls of mode d or b in flight

	batched atomic.Int64 // requests decided by calls of mode b
}

// waiter is a queued decision. done gets one value when res and err are
// set, at the latest at by: a batch's call ends at its first waiter's by,
// and a waiter whose by has passed when its batch forms is answered
// unavailable without being sent. So a queued decision takes no timer of
// its own. A waiter whose context ends leaves without its answer; the
// batch that holds it may still decide it, as a call that timed out may
// have run.
type waiter struct {
	req  *limit.Request
	sc   *scriptCall // the request's keys (and mode d arguments)
	by   time.Time   // when it was queued, plus the store's timeout
	res  limit.Result
	err  error
	done chan struct{}

	// dec holds res's decisions, which the caller copies to its own
	// array: the waiter's, kept with it from use to use, because a
	// batch may answer a request whose caller has given up waiting,
	// and whose array is someone else's by then.
	dec []limit.Decision
}

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// coalesce decides req, whose call sc is of mode d: at once while a call
// may still go out, else in the next batch.
func (s *Store) coalesce(ctx context.Context, c rueidis.Client, req *limit.Request, sc *scriptCall) (limit.Result, error) {
	b := &s.batch
	b.mu.Lock()
	if b.flying < maxFlying {
		b.flying++
		b.mu.Unlock()
		res, err := s.decideOne(ctx, c, req, sc)
		s.next(c)
		return res, err
	}
	w := waiters.Get().(*waiter)
	w.req, w.sc, w.by = req, sc, time.Now().Add(s.timeout)
	b.queue = append(b.queue, w)
	b.mu.Unlock()

	select {
	case <-w.done:
		res, err := w.res, w.err
		if err == nil {
			res.Decisions = core.Decisions(req, len(req.Limits))
			copy(res.Decisions, w.res.Decisions)
		}
		clear(w.dec) // no rules or keys kept alive in the pool
		*w = waiter{done: w.done, dec: w.dec}
		waiters.Put(w)
		return res, err
	case <-ctx.Done():
		return limit.Result{}, unavailable("decide", ctx.Err())
	}
}

// errQueued answers the waiters whose time ran out in the queue.
var errQueued = unavailable("decide", fmt.Errorf("queued for a call: %w", context.DeadlineExceeded))

// next is called when a call returns: what queued meanwhile goes out as
// one batch, which takes over the call's place in flight.
func (s *Store) next(c rueidis.Client) {
	b := &s.batch
	b.mu.Lock()
	// The queue is in the order of by; the waiters whose time is up have
	// their answer now.
	now := time.Now()
	late := 0
	for late < len(b.queue) && !now.Before(b.queue[late].by) {
		w := b.queue[late]
		w.sc.put()
		w.sc, w.err = nil, errQueued
		w.done <- struct{}{}
		late++
	}
	if late > 0 {
		rest := copy(b.queue, b.queue[late:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
	}
	if len(b.queue) == 0 {
		b.flying--
		b.mu.Unlock()
		return
	}
	n, limits := 0, 0
	for n < len(b.queue) && n < maxBatch {
		limits += len(b.queue[n].req.Limits)
		if n > 0 && limits > maxBatchLimits {
			break
		}
		n++
	}
	ws := make([]*waiter, n)
	copy(ws, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	b.mu.Unlock()
	go s.decideBatch(c, ws)
}

// decideBatch sends ws as one call of mode b, answers every waiter, and
// hands its place in flight on.
func (s *Store) decideBatch(c rueidis.Client, ws []*waiter) {
	sc := calls.Get().(*scriptCall)
	want := s.batchCall(sc, ws)
	ctx := withDeadline(s.life, ws[0].by)
	v, err := decideScript.Exec(ctx, c, sc.keys, sc.args).ToArray()
	if err != nil {
		ctx.discard()
		sc.dropBufs()
	} else {
		ctx.release()
	}
	sc.put()
	if err == nil && len(v) != want {
		err = fmt.Errorf("script returned %d values where a batch of %d requests has %d", len(v), len(ws), want)
	}
	s.batch.batched.Add(int64(len(ws)))
	var now int64
	if err == nil {
		now, err = v[0].AsInt64()
	}
	o := 1
	for _, w := range ws {
		if err != nil {
			w.err = unavailable("decide", err)
		} else {
			w.res, o, w.err = batchResult(w.req, now, v, o, w.dec)
			w.dec = w.res.Decisions
		}
		w.done <- struct{}{}
	}
	s.next(c)
}

// replyLen is how many numbers mode b answers for a limit on a: three
// for a window aligned to its first admission, one for a window aligned
// to the clock, whose reset and retry batchResult works out.
func replyLen(a *ruleArgs) int {
	if a.head[0] == "F" {
		return 3
	}
	return 1
}

// batchResult is req's answer from a batch's reply v, whose time is now
// (µs), reading from v[o], with its decisions in dec's array if it holds
// them; it returns where the next request's numbers start. A window aligned to the clock has one number, the remaining
// count, or -1 - the remaining count where the limit rejects; its window
// is the one that holds now, as in the script, so its reset is that
// window's end, and its retry the reset, or the whole window for a cost
// above the limit.
func batchResult(req *limit.Request, now int64, v []rueidis.RedisMessage, o int, dec []limit.Decision) (limit.Result, int, error) {
	res := limit.Result{
		Allowed: true,
		// Not req.Into: a batch may answer a request whose caller has
		// given up waiting, and whose array is someone else's by now.
		Decisions: slices.Grow(dec[:0], len(req.Limits))[:len(req.Limits)],
		Time:      time.UnixMicro(now),
	}
	for i, l := range req.Limits {
		a := argsOf(l.Rule)
		if replyLen(a) == 3 {
			d, err := decision(l, v[o:o+3])
			if err != nil {
				return limit.Result{}, o, err
			}
			add(&res, i, d)
			o += 3
			continue
		}
		x, err := v[o].AsInt64()
		if err != nil {
			return limit.Result{}, o, unavailable("decide", err)
		}
		o++
		z := core.Zone{Window: a.w}
		if a.zone {
			z = core.ZoneAt(l.Rule, req.Now)
		}
		_, end := z.Bounds(now)
		reset := us(end - now)
		d := limit.Decision{Rule: l.Rule, Key: l.Key, Allowed: x >= 0, Limit: a.n, Remaining: x, ResetAfter: reset}
		if !d.Allowed {
			d.Remaining = -1 - x
			d.RetryAfter = d.ResetAfter
			if core.CostOf(l.Rule, req.Hits) > a.n {
				d.RetryAfter = us(a.w)
			}
		}
		add(&res, i, d)
	}
	return res, o, nil
}

// argSet is one distinct set of a limit's arguments in a batch: most
// requests of a batch share their rules, costs and zone windows, so each
// set is sent once and the requests refer to it.
type argSet struct {
	a                  *ruleArgs
	cost, window, zone int64
}

// zoneBias is added to a zone offset in a batch, where every number is
// unsigned (decideSource): offsets are within a day of 0, far below it.
const zoneBias = 1 << 47

// appendSet appends set's 30 bytes: the algorithm and shadow flag as
// their characters, then count, window, cost and zone offset + zoneBias
// as 56-bit numbers, high byte first. Every one is below 2^53, so a Lua
// double holds it exactly.
func appendSet(b []byte, set argSet) []byte {
	b = append(b, set.a.head[0][0], set.a.head[1][0])
	for _, v := range [4]int64{set.a.n, set.window, set.cost, set.zone + zoneBias} {
		b = append(b, byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return b
}

// bufString is b's bytes as a string, valid while b's array is not
// written again (scriptCall).
func bufString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// batchCall fills c with the keys and arguments of mode b for ws, puts
// the waiters' own calls back, and returns the length of the reply. The
// requests and the argument sets are two strings of numbers (decideSource),
// which Redis and the script read for much less than one argument per
// number.
func (s *Store) batchCall(c *scriptCall, ws []*waiter) int {
	c.keys, c.kbuf, c.reqs, c.setb, c.sets = c.keys[:0], c.kbuf[:0], c.reqs[:0], c.setb[:0], c.sets[:0]
	if c.index == nil {
		c.index = make(map[string]int, 2*maxBatch)
	}
	want := 1
	for _, w := range ws {
		c.reqs = binary.BigEndian.AppendUint16(c.reqs, uint16(len(w.req.Limits)))
		for i, l := range w.req.Limits {
			k := w.sc.keys[i]
			x, ok := c.index[k]
			if !ok {
				// The waiter's keys may be made in its call's
				// buffer, which is put back below: the batch
				// copies them to its own.
				start := len(c.kbuf)
				c.kbuf = append(c.kbuf, k...)
				k = unsafe.String(&c.kbuf[start], len(k))
				c.keys = append(c.keys, k)
				x = len(c.keys)
				c.index[k] = x
			}
			set := argSet{a: argsOf(l.Rule), cost: core.CostOf(l.Rule, w.req.Hits)}
			want += replyLen(set.a)
			set.window = set.a.w
			if set.a.zone {
				z := core.ZoneAt(l.Rule, w.req.Now)
				set.window, set.zone = z.Window, z.Off
			}
			// A batch holds few distinct sets: a scan costs less than
			// a map.
			t := slices.Index(c.sets, set)
			if t < 0 {
				c.sets = append(c.sets, set)
				c.setb = appendSet(c.setb, set)
				t = len(c.sets) - 1
			}
			c.reqs = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(c.reqs, uint16(x)), uint16(t+1))
		}
		w.sc.put()
		w.sc = nil
	}
	c.args = append(c.args[:0], "b", s.offsetArg(), strconv.Itoa(len(ws)), strconv.Itoa(len(c.sets)), bufString(c.setb), bufString(c.reqs))
	return want
}
