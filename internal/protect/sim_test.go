package protect

import (
	"container/heap"
	"slices"
	"testing"
	"time"
)

// api is the mock upstream of `floodgate upstream`: per 1-second window,
// the first capacity requests answer after healthy, the next capacity/2
// after overloaded, the rest 503 after overloaded.
type api struct {
	capacity func(at time.Duration) int
	window   int64
	count    int
}

const (
	healthy    = 200 * time.Millisecond
	overloaded = 3 * time.Second
	timeout    = 2 * time.Second // the route's upstream timeout
)

// take is what the API does with a request at at: its latency and
// result as the gateway sees them.
func (a *api) take(at time.Duration) (time.Duration, Result) {
	if w := int64(at / time.Second); w != a.window {
		a.window, a.count = w, 0
	}
	a.count++
	c := a.capacity(at)
	switch {
	case a.count <= c:
		return healthy, Answered
	case a.count <= c+c/2:
		return timeout, Failed // 3 s: the gateway times out at 2 s
	}
	return timeout, Failed
}

type completion struct {
	at     time.Duration
	ticket Ticket
	result Result
}

type events []completion

func (e events) Len() int            { return len(e) }
func (e events) Less(i, j int) bool  { return e[i].at < e[j].at }
func (e events) Swap(i, j int)       { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)         { *e = append(*e, x.(completion)) }
func (e *events) Pop() any           { old := *e; c := old[len(old)-1]; *e = old[:len(old)-1]; return c }
func (e events) next() time.Duration { return e[0].at }

// second is what one second of a run did.
type second struct {
	admitted, bad int
	limit         float64
}

// simulate offers rate requests a second to a protected api for d, on a
// clock of its own, and returns each second's counts.
func simulate(t *testing.T, s Settings, rate int, capacity func(time.Duration) int, d time.Duration) []second {
	t.Helper()
	epoch := time.Unix(1_700_000_000, 0)
	p := New(s, epoch)
	up := &api{capacity: capacity, window: -1}
	var pending events
	out := make([]second, int(d/time.Second))
	gap := time.Second / time.Duration(rate)
	tick := p.Settings().Interval
	nextTick := tick
	for at := time.Duration(0); at < d; at += gap {
		for pending.Len() > 0 && pending.next() <= at || nextTick <= at {
			if pending.Len() > 0 && pending.next() <= nextTick && pending.next() <= at {
				c := heap.Pop(&pending).(completion)
				p.Gate.Done(c.ticket, p.Gate.At(epoch.Add(c.at)), c.result, 0)
				continue
			}
			p.Tick(epoch.Add(nextTick))
			nextTick += tick
		}
		sec := &out[at/time.Second]
		sec.limit = p.Limit()
		tk, ok := p.Gate.Admit(p.Gate.At(epoch.Add(at)))
		if !ok {
			continue
		}
		sec.admitted++
		took, r := up.take(at)
		if r != Answered || took > 2*healthy {
			sec.bad++
		}
		heap.Push(&pending, completion{at: at + took, ticket: tk, result: r})
	}
	return out
}

func constant(c int) func(time.Duration) int { return func(time.Duration) int { return c } }

func medianAdmitted(ss []second) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = float64(s.admitted)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func badShare(ss []second) float64 {
	var a, b int
	for _, s := range ss {
		a += s.admitted
		b += s.bad
	}
	return float64(b) / float64(max(a, 1))
}

// Against an upstream that keeps its capacity, what reaches it settles in
// [0.85, 1] of the capacity, and hardly any admitted request is slow or
// fails, at capacities below, near and above the offered load.
func TestSteadyCapacity(t *testing.T) {
	t.Parallel()
	for _, c := range []int{250, 500, 1000} {
		run := simulate(t, Settings{Min: 10}, 800, constant(c), 60*time.Second)
		steady := run[20:]
		m := medianAdmitted(steady)
		want := float64(min(c, 800))
		if m < 0.85*want || m > 1.0*want {
			t.Errorf("capacity %d: median %v a second reached it, want in [%v, %v]", c, m, 0.85*want, want)
		}
		if b := badShare(steady); b > 0.01 {
			t.Errorf("capacity %d: %.1f%% of admitted requests failed or were slow, want ≤ 1%%", c, 100*b)
		}
		t.Logf("capacity %d: median %v/s, %.2f%% bad, limit at the end %.0f", c, m, 100*badShare(steady), run[len(run)-1].limit)
	}
}

// A capacity that halves is followed within 3 s; one that doubles back,
// within 15 s.
func TestCapacityDropAndRise(t *testing.T) {
	t.Parallel()
	checkFollows(t, simulate(t, Settings{Min: 10}, 800, dropAndRise, 60*time.Second))
}
