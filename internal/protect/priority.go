package protect

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Levels shares a gate by priority: when the limit binds, a request of a
// higher level (0 is the highest) is admitted before any of a lower one,
// and each level has a short queue, so that the step of a surge waits a
// moment for room rather than being turned away at once. A request of a
// level waits only while no request of a higher level is waiting, and at
// most MaxWait; a queue holds no more than MaxWait's worth of the limit,
// past which waiting would be in vain. A request that finds room and no
// higher level waiting is admitted at once, without a lock.
type Levels struct {
	gate    *Gate
	n       int
	maxWait time.Duration

	waiting atomic.Int32 // requests waiting, at every level
	mu      sync.Mutex
	queues  [MaxLevels][]*waiter
	timer   *time.Timer // the next dispatch, while anyone waits

	arrived, refused [MaxLevels]atomic.Int64
}

type waiter struct {
	ready    chan struct{} // closed when admitted
	ticket   Ticket
	admitted bool
}

// DefaultMaxWait is how long a request waits for room at most, by
// default: a surge's step is absorbed, and no connection is held longer
// than a user notices.
const DefaultMaxWait = 250 * time.Millisecond

// NewLevels shares g among n levels, each request waiting at most maxWait.
func NewLevels(g *Gate, n int, maxWait time.Duration) *Levels {
	l := &Levels{gate: g, n: min(max(n, 1), MaxLevels), maxWait: maxWait}
	l.timer = time.AfterFunc(time.Hour, l.dispatch)
	l.timer.Stop()
	return l
}

// Room says whether a request of level would be admitted or could wait,
// without admitting it.
func (l *Levels) Room(level int, now int64) bool {
	level = min(max(level, 0), l.n-1)
	if l.waiting.Load() == 0 && l.gate.room(now) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.higherWaiting(level) || len(l.queues[level]) >= l.queueCap() {
		l.arrived[level].Add(1)
		l.refuse(level)
		return false
	}
	return true
}

// Admit admits a request of level at now (Gate.At), waiting up to MaxWait
// (or until ctx ends) for room; false: turned away.
func (l *Levels) Admit(ctx context.Context, level int, now time.Time) (Ticket, bool) {
	level = min(max(level, 0), l.n-1)
	l.arrived[level].Add(1)
	if l.waiting.Load() == 0 {
		if t, ok := l.gate.admit(l.gate.At(now), false); ok {
			return t, true
		}
	}
	l.mu.Lock()
	if !l.higherWaiting(level) {
		if t, ok := l.gate.admit(l.gate.At(now), false); ok {
			l.mu.Unlock()
			return t, true
		}
	}
	if l.maxWait <= 0 || len(l.queues[level]) >= l.queueCap() {
		l.mu.Unlock()
		l.refuse(level)
		return Ticket{}, false
	}
	w := &waiter{ready: make(chan struct{})}
	l.queues[level] = append(l.queues[level], w)
	l.waiting.Add(1)
	l.schedule(now)
	l.mu.Unlock()

	t := time.NewTimer(l.maxWait)
	defer t.Stop()
	select {
	case <-w.ready:
		return w.ticket, true
	case <-t.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.admitted {
		return w.ticket, true
	}
	q := l.queues[level]
	for i, x := range q {
		if x == w {
			l.queues[level] = append(q[:i:i], q[i+1:]...)
			l.waiting.Add(-1)
			break
		}
	}
	l.refuse(level)
	return Ticket{}, false
}

func (l *Levels) refuse(level int) {
	l.refused[level].Add(1)
	l.gate.refused.Add(1)
}

// higherWaiting says whether a request of a level above level waits.
// Called with mu held.
func (l *Levels) higherWaiting(level int) bool {
	for i := range level {
		if len(l.queues[i]) > 0 {
			return true
		}
	}
	return false
}

// queueCap is how many may wait at a level: what the gate admits in
// MaxWait, and one.
func (l *Levels) queueCap() int {
	e := l.gate.emission.Load()
	return int(int64(l.maxWait)/max(e, 1)) + 1
}

// schedule sets the dispatch for when the gate has room next. Called with
// mu held.
func (l *Levels) schedule(now time.Time) {
	n := l.gate.At(now)
	wait := time.Duration(max(l.gate.tat.Load()-l.gate.burst-n, 0))
	l.timer.Reset(max(wait, 100*time.Microsecond))
}

// dispatch admits the waiting requests the gate has room for, highest
// level first.
func (l *Levels) dispatch() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for lv := 0; lv < l.n; {
		q := l.queues[lv]
		if len(q) == 0 {
			lv++
			continue
		}
		w := q[0]
		t, ok := l.gate.admit(l.gate.At(now), false)
		if !ok {
			l.schedule(now)
			return
		}
		w.ticket, w.admitted = t, true
		close(w.ready)
		l.pop(lv)
	}
}

func (l *Levels) pop(lv int) {
	l.queues[lv][0] = nil
	l.queues[lv] = l.queues[lv][1:]
	l.waiting.Add(-1)
}

// Waiting is how many requests wait now, at every level.
func (l *Levels) Waiting() int { return int(l.waiting.Load()) }

// Refused is how many requests of level were turned away since the start.
func (l *Levels) Refused(level int) int64 { return l.refused[level].Load() }

// demand takes the requests each level had since the last call, in
// requests a second over elapsed.
func (l *Levels) demand(elapsed time.Duration, d *[MaxLevels]float64) {
	s := elapsed.Seconds()
	for i := range l.n {
		n := l.arrived[i].Swap(0)
		if s > 0 {
			d[i] = float64(n) / s
		}
	}
}
