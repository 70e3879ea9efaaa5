package protect

import (
	"container/heap"
	"testing"
	"time"
)

// fleetRun is a simulated fleet of gateways in front of one api, ending
// their intervals together and sharing their reports through a bus that
// keeps each instance's latest for busTTL.
type fleetRun struct {
	epoch   time.Time
	ps      []*Protector
	n       int
	weight  func(at time.Duration) []int // the load balancer's split, in parts
	alive   func(i int, at time.Duration) bool
	reports map[int]busEntry
	joined  map[int]bool
	hook    func(i int, at time.Duration)
	down    func(at time.Duration) bool // the bus is out of reach
}

type busEntry struct {
	r  Report
	at time.Duration
}

const busTTL = time.Second

type fleetCompletion struct {
	completion
	inst int
}

type fleetEvents []fleetCompletion

func (e fleetEvents) Len() int           { return len(e) }
func (e fleetEvents) Less(i, j int) bool { return e[i].at < e[j].at }
func (e fleetEvents) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *fleetEvents) Push(x any)        { *e = append(*e, x.(fleetCompletion)) }
func (e *fleetEvents) Pop() any {
	old := *e
	c := old[len(old)-1]
	*e = old[:len(old)-1]
	return c
}

// fleetSecond is one second of a fleet's run.
type fleetSecond struct {
	second
	byInst  []int // admitted by each instance
	offered []int
}

// round ends the interval of every live instance at at: each reports,
// then each reads the others' reports and moves its limit, as the
// gateways do.
func (f *fleetRun) round(at time.Duration) {
	now := f.epoch.Add(at)
	own := map[int]Report{}
	for i, p := range f.ps {
		if !f.alive(i, at) || !f.joined[i] {
			continue
		}
		own[i] = p.Begin(now)
		if f.down == nil || !f.down(at) {
			f.reports[i] = busEntry{own[i], at}
		}
	}
	for i, r := range own {
		if f.down != nil && f.down(at) {
			f.ps[i].Alone(now, r)
			if f.hook != nil {
				f.hook(i, at)
			}
			continue
		} else {
			f.ps[i].Join(now, r, f.peers(i, at))
		}
		if f.hook != nil {
			f.hook(i, at)
		}
	}
}

// enter starts instance i at at.
func (f *fleetRun) enter(i int, at time.Duration) {
	f.joined[i] = true
	if f.down == nil || !f.down(at) {
		f.ps[i].Enter(f.epoch.Add(at), f.peers(i, at))
	}
}

// peers are the reports of the others the bus keeps at at.
func (f *fleetRun) peers(i int, at time.Duration) []Peer {
	var others []Peer
	for j, e := range f.reports {
		if j != i && at-e.at <= busTTL {
			others = append(others, Peer{e.r, at - e.at})
		}
	}
	return others
}

// run offers rate requests a second for d, split among the live instances
// by weight, and returns each second's counts.
func (f *fleetRun) run(s Settings, rate int, capacity func(time.Duration) int, d time.Duration) []fleetSecond {
	n := f.n
	f.epoch = time.Unix(1_700_000_000, 0)
	f.reports, f.joined = map[int]busEntry{}, map[int]bool{}
	f.ps = make([]*Protector, n)
	for i := range f.ps {
		f.ps[i] = New(s, f.epoch)
	}
	up := &api{capacity: capacity, window: -1}
	out := make([]fleetSecond, int(d/time.Second))
	for i := range out {
		out[i].byInst, out[i].offered = make([]int, n), make([]int, n)
	}
	var pending fleetEvents
	interval := f.ps[0].Settings().Interval
	next := interval
	gap := time.Second / time.Duration(rate)
	var credit []float64
	for at := time.Duration(0); at < d; at += gap {
		f.settle(&pending, &next, at, interval)
		i := f.pick(&credit, at)
		if i < 0 {
			continue
		}
		if !f.joined[i] {
			f.enter(i, at) // as it starts
		}
		sec := &out[at/time.Second]
		sec.offered[i]++
		p := f.ps[i]
		sec.limit = p.Limit()
		tk, ok := p.Gate.Admit(p.Gate.At(f.epoch.Add(at)))
		if !ok {
			continue
		}
		sec.admitted++
		sec.byInst[i]++
		took, r := up.take(at)
		if r != Answered || took > 2*healthy {
			sec.bad++
		}
		heap.Push(&pending, fleetCompletion{completion{at: at + took, ticket: tk, result: r}, i})
	}
	return out
}

// settle runs the completions and rounds due by at, in order.
func (f *fleetRun) settle(pending *fleetEvents, next *time.Duration, at, interval time.Duration) {
	for {
		if pending.Len() > 0 && (*pending)[0].at <= at && (*pending)[0].at <= *next {
			c := heap.Pop(pending).(fleetCompletion)
			p := f.ps[c.inst]
			p.Gate.Done(c.ticket, p.Gate.At(f.epoch.Add(c.at)), c.result, 0)
			continue
		}
		if *next > at {
			return
		}
		f.round(*next)
		*next += interval
	}
}

// pick is the live instance the load balancer sends the request at at to:
// the one furthest behind its weight.
func (f *fleetRun) pick(credit *[]float64, at time.Duration) int {
	w := f.weight(at)
	if *credit == nil {
		*credit = make([]float64, len(w))
	}
	total := 0
	for i, x := range w {
		if f.alive(i, at) {
			total += x
		}
	}
	best := -1
	for i, x := range w {
		if !f.alive(i, at) {
			continue
		}
		(*credit)[i] += float64(x) / float64(total)
		if best < 0 || (*credit)[i] > (*credit)[best] {
			best = i
		}
	}
	if best >= 0 {
		(*credit)[best]--
	}
	return best
}

func split(parts ...int) func(time.Duration) []int {
	return func(time.Duration) []int { return parts }
}

func always(int, time.Duration) bool { return true }

func seconds(fs []fleetSecond) []second {
	out := make([]second, len(fs))
	for i, f := range fs {
		out[i] = f.second
	}
	return out
}

// Three gateways with a 70/15/15 split hold the capacity between them as
// one does, and each admits the same share of what it is offered: none is
// starved.
func TestFleetSteadyCapacity(t *testing.T) {
	t.Parallel()
	for _, c := range []int{250, 500, 1000} {
		f := &fleetRun{n: 3, weight: split(70, 15, 15), alive: always}
		run := f.run(Settings{Min: 10}, 800, constant(c), 60*time.Second)
		steady := run[20:]
		m := medianAdmitted(seconds(steady))
		want := float64(min(c, 800))
		if m < 0.85*want || m > 1.0*want {
			t.Errorf("capacity %d: median %v a second reached it, want in [%v, %v]", c, m, 0.85*want, want)
		}
		if b := badShare(seconds(steady)); b > 0.01 {
			t.Errorf("capacity %d: %.1f%% of admitted requests failed or were slow, want ≤ 1%%", c, 100*b)
		}
		var adm, off [3]int
		for _, s := range steady {
			for i := range 3 {
				adm[i] += s.byInst[i]
				off[i] += s.offered[i]
			}
		}
		frac := func(i int) float64 { return float64(adm[i]) / float64(off[i]) }
		for i := 1; i < 3; i++ {
			if r := frac(i) / frac(0); r < 0.8 || r > 1.25 {
				t.Errorf("capacity %d: instance %d admitted %.0f%% of its offer, instance 0 %.0f%%", c, i, 100*frac(i), 100*frac(0))
			}
		}
		t.Logf("capacity %d: median %v/s, %.2f%% bad, admitted %.0f%% %.0f%% %.0f%% of each one's offer", c, m,
			100*badShare(seconds(steady)), 100*frac(0), 100*frac(1), 100*frac(2))
	}
}

// The fleet follows a capacity that halves within 3 s, and one that
// doubles back within 15 s, as one gateway does.
func TestFleetCapacityDropAndRise(t *testing.T) {
	t.Parallel()
	f := &fleetRun{n: 3, weight: split(70, 15, 15), alive: always}
	run := seconds(f.run(Settings{Min: 10}, 800, dropAndRise, 60*time.Second))
	checkFollows(t, run)
}

func dropAndRise(at time.Duration) int {
	if at >= 20*time.Second && at < 40*time.Second {
		return 250
	}
	return 500
}

func checkFollows(t *testing.T, run []second) {
	t.Helper()
	for i, s := range run {
		t.Logf("%2ds: %4d admitted, %3d bad, limit %.0f", i, s.admitted, s.bad, s.limit)
	}
	back := -1
	for i := 20; i < 40; i++ {
		if float64(run[i].admitted) <= 1.05*250 {
			back = i - 20
			break
		}
	}
	if back < 0 || back > 3 {
		t.Errorf("after the drop to 250, under 1.05 × 250 after %d s, want ≤ 3", back)
	}
	up := -1
	for i := 40; i < 60; i++ {
		if float64(run[i].admitted) >= 0.85*500 {
			up = i - 40
			break
		}
	}
	if up < 0 || up > 15 {
		t.Errorf("after the rise to 500, at 0.85 × 500 after %d s, want ≤ 15", up)
	}
}

// An instance that dies frees its share: the others, given its traffic,
// admit the capacity between them within seconds; one that joins takes a
// share of the fleet's limit without the fleet going over it.
func TestFleetInstanceDiesAndJoins(t *testing.T) {
	t.Parallel()
	alive := func(i int, at time.Duration) bool {
		switch i {
		case 1:
			return at < 20*time.Second // dies at 20 s
		case 2:
			return at >= 30*time.Second // joins at 30 s
		}
		return true
	}
	f := &fleetRun{n: 3, weight: split(50, 50, 50), alive: alive}
	run := f.run(Settings{Min: 10}, 800, constant(500), 45*time.Second)
	for i, s := range run {
		t.Logf("%2ds: %4d admitted (%v), %3d bad, limit %.0f", i, s.admitted, s.byInst, s.bad, s.limit)
	}
	for i := 23; i < 45; i++ {
		a := run[i].admitted
		if a > 525 {
			t.Errorf("%ds: %d admitted, over 1.05 × 500", i, a)
		}
		// The second one joins, it starts with a small share of what the
		// others leave: the fleet's sum stays within its limit.
		if a < 425 && i != 30 {
			t.Errorf("%ds: %d admitted, under 0.85 × 500", i, a)
		}
	}
	for i := 31; i < 45; i++ {
		if run[i].byInst[2] == 0 {
			t.Errorf("%ds: the instance that joined admitted nothing", i)
		}
	}
	if b := badShare(seconds(run[15:])); b > 0.015 {
		t.Errorf("%.1f%% of admitted requests failed or were slow, want ≤ 1.5%% (an instance died and one joined)", 100*b)
	}
}

// With the bus out of reach, each instance protects alone with its share
// as its limit: the fleet's sum stays near the capacity (each probing on
// its own, within 1.1 × it, and so for the first seconds back), and back
// on the bus they share one limit again.
func TestFleetBusDown(t *testing.T) {
	t.Parallel()
	down := func(at time.Duration) bool { return at >= 20*time.Second && at < 35*time.Second }
	f := &fleetRun{n: 3, weight: split(70, 15, 15), alive: always, down: down}
	run := f.run(Settings{Min: 10}, 800, constant(500), 50*time.Second)
	for i, s := range run {
		t.Logf("%2ds: %4d admitted (%v), %3d bad, limit %.0f", i, s.admitted, s.byInst, s.bad, s.limit)
	}
	for i := 15; i < 50; i++ {
		bound := 1.05 * 500
		if i >= 20 && i < 40 { // alone, and the first seconds back
			bound = 1.1 * 500
		}
		if a := run[i].admitted; float64(a) > bound {
			t.Errorf("%ds: %d admitted, over %v", i, a, bound)
		}
	}
	if m := medianAdmitted(seconds(run[38:])); m < 425 {
		t.Errorf("back on the bus: median %v a second, want ≥ 425", m)
	}
	if b := badShare(seconds(run[15:])); b > 0.02 {
		t.Errorf("%.1f%% of admitted requests failed or were slow, want ≤ 2%%", 100*b)
	}
}
