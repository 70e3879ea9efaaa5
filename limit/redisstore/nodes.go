package redisstore

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-gw/floodgate/limit"
)

// Failing nodes. A call to a node that does not answer holds its request
// for the whole timeout; while a node fails, the calls that need it must
// instead fail at once with limit.ErrStoreUnavailable, so that the
// caller's on_error policy decides without the wait. limit.Guard does that
// for a whole store, which suits one server but not a cluster: when one
// master fails, the others still answer for their slots, and a guard that
// trips for the whole store would send every decision to on_error.
//
// So the store guards itself, node by node: the one server (Standalone,
// the master of Sentinel), or each master address of a cluster, has a
// nodeGuard with limit.Guard's semantics. After tripFailures consecutive
// calls to the node failed, the calls that need it fail at once for
// tripRest; then one call probes the node, and its success closes the
// guard, its failure rests it again. A timeout is a failure as a refused
// connection is, so a stalled master costs three timeouts, and a probe's
// every tripRest, not one per request. A decision whose slot groups are on
// several nodes fails at once if any of them rests, as it would fail
// after asking: it needs every group's answer.
//
// Which node serves a slot the store learns from CLUSTER SLOTS, every
// slotsRefresh and whenever a guard trips (a failover moves the slots of a
// master to a replica, at another address). The map only picks the guard:
// the call itself goes where rueidis routes it. So a map that lags behind a
// failover costs a probe: the first call to a promoted replica that the map
// still counts against its dead master closes that master's guard again.
const (
	tripFailures = 3
	tripRest     = 250 * time.Millisecond
	slotsRefresh = time.Second
)

// nodeGuard is the failure state of one node.
type nodeGuard struct {
	addr     string
	failures atomic.Int32 // consecutive; read without mu, written under it
	mu       sync.Mutex
	until    int64 // resting until then (Store.guardTime)
	probing  bool
	dropped  bool // no longer in the slot map: counts nothing

	// What the guard did, for tests: calls that failed at the node, and
	// calls it answered without asking.
	failed, refused atomic.Int64
}

// errResting is the cause of the errors of calls a resting guard refuses.
var errResting = errors.New("node failing: not asked until the next probe")

// guardTime is the clock of the guards' rests, in ns: the store's
// monotonic clock, or the tests' own.
func (s *Store) guardTime() int64 {
	if s.guardClock != nil {
		return s.guardClock()
	}
	return s.mono()
}

// While no guard counts a failure (Store.failing is 0), which is nearly
// always, a call needs no guard: it may go, and only if it fails does the
// store work out its key's slot and node, to count the failure. So a
// healthy cluster's decisions pay one atomic load for their guards, not
// the CRC16 of every key (about 130 ns for a typical key).

// enterKey is enter for a call on key: g is nil when no guard counts a
// failure, and leaveKey then finds the guard only if it must.
func (s *Store) enterKey(key string) (g *nodeGuard, ok, probe bool) {
	if s.failing.Load() == 0 {
		return nil, true, false
	}
	g = s.guardOf(key)
	ok, probe = s.enter(g)
	return g, ok, probe
}

// leaveKey is leave for a call on key that enterKey let through with g.
func (s *Store) leaveKey(g *nodeGuard, key string, probe bool, err error) {
	if g == nil {
		if err == nil && s.failing.Load() == 0 {
			return
		}
		g = s.guardOf(key)
	}
	s.leave(g, probe, err)
}

// enter reports whether a call may go to g's node; probe marks the one
// call that tests a resting node.
func (s *Store) enter(g *nodeGuard) (ok, probe bool) {
	if g.failures.Load() < tripFailures {
		return true, false
	}
	now := s.guardTime()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.failures.Load() < tripFailures:
		return true, false
	case g.probing || now < g.until:
		g.refused.Add(1)
		return false, false
	}
	g.probing = true
	return true, true
}

// resting is the error of a call that g refused.
func resting(op string, g *nodeGuard) error {
	return &unavailableError{op: op + " on " + g.addr, cause: errResting}
}

// leave records the outcome of a call that enter let through. Only
// failures that wrap limit.ErrStoreUnavailable count; an answer resets the
// count. A call its caller cancelled (a client that went away, an Envoy
// that gave up on a rate-limit call) says nothing of the node: it is no
// news, or a few cancelled calls would rest a healthy node and refuse
// everyone's.
func (s *Store) leave(g *nodeGuard, probe bool, err error) {
	if errors.Is(err, context.Canceled) {
		g.noNews(probe)
		return
	}
	if err == nil || !errors.Is(err, limit.ErrStoreUnavailable) {
		if probe || g.failures.Load() != 0 {
			g.mu.Lock()
			if g.failures.Load() != 0 {
				g.failures.Store(0)
				s.failing.Add(-1)
			}
			g.probing = g.probing && !probe
			g.mu.Unlock()
		}
		return
	}
	g.failed.Add(1)
	g.mu.Lock()
	if g.dropped {
		g.mu.Unlock()
		return
	}
	n := g.failures.Load()
	if n == 0 {
		s.failing.Add(1)
	}
	if n < tripFailures {
		n++
		g.failures.Store(n)
	}
	if probe {
		g.probing = false
	}
	if n >= tripFailures {
		g.until = s.guardTime() + int64(tripRest)
	}
	g.mu.Unlock()
	if n >= tripFailures && s.mode == Cluster {
		// The node may have failed over: ask where its slots are now.
		select {
		case s.remap <- struct{}{}:
		default:
		}
	}
}

// noNews ends a call that enter let through and that was never made.
func (g *nodeGuard) noNews(probe bool) {
	if probe {
		g.mu.Lock()
		g.probing = false
		g.mu.Unlock()
	}
}

// slotMap is which guard each slot's calls count against.
type slotMap struct {
	guard  [clusterSlots]uint16 // index in guards; 0 for a slot of no known node
	guards []*nodeGuard         // guards[0] is the store's whole
}

const clusterSlots = 16384

// guardOf is the guard of the node that serves key: the store's whole
// but on a cluster whose slots it knows.
func (s *Store) guardOf(key string) *nodeGuard {
	if s.mode != Cluster {
		return &s.whole
	}
	m := s.slots.Load()
	if m == nil {
		return &s.whole
	}
	return m.guards[m.guard[slot(key)]]
}

// watchSlots keeps the slot map of a cluster store.
func (s *Store) watchSlots() {
	defer s.wg.Done()
	t := time.NewTicker(slotsRefresh)
	defer t.Stop()
	for {
		s.mapSlots()
		select {
		case <-s.life.Done():
			return
		case <-t.C:
		case <-s.remap:
		}
	}
}

// mapSlots asks the cluster's nodes, the ones whose guards do not rest
// first, which node serves which slots, until one answers.
func (s *Store) mapSlots() {
	c := s.client.Load()
	if c == nil {
		return
	}
	nodes := c.c.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	old := s.slots.Load()
	rests := func(a string) bool {
		if old != nil {
			for _, g := range old.guards[1:] {
				if g.addr == a {
					return g.failures.Load() >= tripFailures
				}
			}
		}
		return false
	}
	slices.SortStableFunc(addrs, func(a, b string) int {
		switch ra, rb := rests(a), rests(b); {
		case ra == rb:
			return 0
		case rb:
			return -1
		}
		return 1
	})
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(s.life, max(s.timeout, minConnectTimeout))
		n := nodes[a]
		v, err := n.Do(ctx, n.B().ClusterSlots().Build()).ToArray()
		cancel()
		if err == nil {
			if m, ok := s.slotMapOf(old, a, v); ok {
				s.slots.Store(m)
				s.drop(old, m)
			}
			return
		}
	}
}

// slotRange is a range of slots and the address of its master.
type slotRange struct {
	lo, hi int
	addr   string
}

// slotMapOf reads a reply to CLUSTER SLOTS that addr gave, keeping the
// guards of old's nodes. It reports false when nothing changed since the
// last reply, without building a map: a healthy cluster's is read every
// second.
func (s *Store) slotMapOf(old *slotMap, addr string, v []rueidis.RedisMessage) (*slotMap, bool) {
	var ranges []slotRange
	for _, r := range v {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || lo < 0 || hi >= clusterSlots || lo > hi {
			continue
		}
		host, _ := master[0].ToString()
		port, err := master[1].AsInt64()
		if err != nil {
			continue
		}
		if host == "" || host == "?" {
			// The node that answered, which does not know its own address.
			host, _, _ = net.SplitHostPort(addr)
		}
		ranges = append(ranges, slotRange{int(lo), int(hi), net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	if old != nil && slices.Equal(ranges, s.ranges) {
		return nil, false
	}
	s.ranges = ranges
	m := &slotMap{guards: []*nodeGuard{&s.whole}}
	for _, r := range ranges {
		i := slices.IndexFunc(m.guards[1:], func(g *nodeGuard) bool { return g.addr == r.addr }) + 1
		if i == 0 {
			i = len(m.guards)
			g := &nodeGuard{addr: r.addr}
			if old != nil {
				if j := slices.IndexFunc(old.guards[1:], func(g *nodeGuard) bool { return g.addr == r.addr }); j >= 0 {
					g = old.guards[j+1]
				}
			}
			m.guards = append(m.guards, g)
		}
		for sl := r.lo; sl <= r.hi; sl++ {
			m.guard[sl] = uint16(i)
		}
	}
	return m, true
}

// drop ends the guards of old that m no longer has: a master that failed
// over and left the map must not keep Store.failing up for ever.
func (s *Store) drop(old, m *slotMap) {
	if old == nil {
		return
	}
	for _, g := range old.guards[1:] {
		if slices.Contains(m.guards, g) {
			continue
		}
		g.mu.Lock()
		if g.failures.Load() != 0 {
			g.failures.Store(0)
			s.failing.Add(-1)
		}
		g.dropped = true
		g.mu.Unlock()
	}
}

// slot is the Redis Cluster hash slot of key: the CRC16 of its hash tag,
// the part between the first '{' and the first '}' after it when that is
// not empty, or else of the whole key.
func slot(key string) uint16 {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				break
			}
		}
		break
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
	}
	return crc & (clusterSlots - 1)
}

// crcTable is CRC16/XMODEM's (polynomial 0x1021), which Redis Cluster
// hashes keys with.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
