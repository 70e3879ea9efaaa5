package testredis

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds cluster formation and WaitHealthy. Redis itself
// holds a fresh master in cluster_state:fail for about two seconds after
// start, and a failover takes the cluster's node timeout (five seconds)
// and an election, so neither can be much faster than that.
const clusterTimeout = 30 * time.Second

const clusterSlots = 16384

// Cluster is a Redis Cluster owned by a test: masters, and as many
// replicas of each as Replicas asked for.
type Cluster struct {
	nodes    []*Server // the masters in slot order, then their replicas
	masters  int
	replicas int
}

// Replicas gives each master of StartCluster n replicas, so that the
// cluster fails a dead or stalled master over to one of them (after the
// cluster's node timeout, five seconds). Other functions ignore it.
func Replicas(n int) Option {
	return func(o *options) { o.replicas = n }
}

// StartCluster starts masters cluster-enabled redis-servers, splits the 16384
// hash slots evenly between them in node order, joins them, starts the
// replicas that Replicas asks for and attaches them to their masters, and
// waits until every node reports cluster_state:ok and sees all masters
// healthy and every replica in sync. Options apply to every node. The nodes
// are stopped when the test finishes. With -short (make quick) the test is
// skipped: a cluster takes seconds to start, and make check runs it.
func StartCluster(tb testing.TB, masters int, opts ...Option) *Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("testredis: a Redis Cluster takes seconds to start; -short leaves it to make check")
	}
	if masters < 1 || masters > clusterSlots {
		tb.Fatalf("testredis: StartCluster: masters must be in [1, %d], got %d", clusterSlots, masters)
	}
	o := options{cluster: true}
	for _, opt := range opts {
		opt(&o)
	}
	if o.replicas < 0 {
		tb.Fatalf("testredis: StartCluster: %d replicas", o.replicas)
	}
	c := &Cluster{masters: masters, replicas: o.replicas}
	for range masters * (1 + o.replicas) {
		c.nodes = append(c.nodes, start(tb, o))
	}

	for i, n := range c.nodes[:masters] {
		// Distinct epochs up front, as redis-cli --cluster create does, so
		// the nodes need not resolve epoch collisions before agreeing.
		n.Do(tb, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		n.Do(tb, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi))
	}
	// Meeting one node is enough; gossip introduces the rest to each other.
	for _, n := range c.nodes[1:] {
		c.nodes[0].Do(tb, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.port))
	}
	// A replica can only follow a master it has heard of.
	for i, r := range c.nodes[masters:] {
		m := c.nodes[i/o.replicas]
		id := m.Do(tb, "CLUSTER", "MYID")
		c.waitFor(tb, "replica "+r.Addr()+" to follow "+m.Addr(), func() error {
			_, err := r.DoValue(tb, "CLUSTER", "REPLICATE", id)
			return err
		})
	}
	c.waitFor(tb, "cluster to form", func() error {
		for _, n := range c.nodes {
			if err := n.clusterReady(tb, c); err != nil {
				return err
			}
		}
		for i, r := range c.nodes[masters:] {
			if err := r.replicates(tb, c.nodes[i/o.replicas].port); err != nil {
				return err
			}
		}
		return nil
	})
	return c
}

// waitFor polls ready until it returns nil, and fails the test with its last
// error and every node's log if that takes longer than clusterTimeout.
func (c *Cluster) waitFor(tb testing.TB, what string, ready func() error) {
	tb.Helper()
	deadline := time.Now().Add(clusterTimeout)
	for {
		err := ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, n := range c.nodes {
				fmt.Fprintf(&logs, "--- redis-server %s ---\n%s\n", n.Addr(), n.logTail())
			}
			tb.Fatalf("testredis: waiting for %s, %v passed: %v\n%s", what, clusterTimeout, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterReady reports why s does not yet see c as it was started, all
// nodes healthy, or nil.
func (s *Server) clusterReady(tb testing.TB, c *Cluster) error {
	info, err := s.DoValue(tb, "CLUSTER", "INFO")
	if err != nil {
		return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr(), err)
	}
	text, _ := info.(string)
	for _, want := range []string{
		"cluster_state:ok",
		"cluster_slots_ok:" + strconv.Itoa(clusterSlots),
		"cluster_known_nodes:" + strconv.Itoa(len(c.nodes)),
	} {
		if !strings.Contains(text, want+"\r\n") {
			return fmt.Errorf("%s: CLUSTER INFO lacks %s", s.Addr(), want)
		}
	}
	nodes, err := s.DoValue(tb, "CLUSTER", "NODES")
	if err != nil {
		return fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr(), err)
	}
	text, _ = nodes.(string)
	masters, replicas := 0, 0
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := strings.Split(f[2], ",")
		if slices.ContainsFunc(flags, unhealthyFlag) {
			continue
		}
		switch {
		case slices.Contains(flags, "master"):
			masters++
		case slices.Contains(flags, "slave"):
			replicas++
		}
	}
	if masters != c.masters || replicas != c.masters*c.replicas {
		return fmt.Errorf("%s sees %d of %d masters and %d of %d replicas healthy:\n%s",
			s.Addr(), masters, c.masters, replicas, c.masters*c.replicas, text)
	}
	return nil
}

func unhealthyFlag(flag string) bool {
	switch flag {
	case "fail", "fail?", "handshake", "noaddr":
		return true
	}
	return false
}

// Addrs returns the "127.0.0.1:PORT" address of every node, in node order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the cluster's nodes: the masters as started, node i
// owning the i-th of the evenly split slot ranges, then the replicas, those
// of master 0 first. Each can be stopped, killed, paused or restarted
// individually; after a failover, Serving says which node serves a slot.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// live returns the nodes that run and are not paused: those that answer.
func (c *Cluster) live() []*Server {
	var live []*Server
	for _, n := range c.nodes {
		if n.answers() {
			live = append(live, n)
		}
	}
	return live
}

// KeySlot returns the hash slot of key, as a live node computes it.
func (c *Cluster) KeySlot(tb testing.TB, key string) int {
	tb.Helper()
	live := c.live()
	if len(live) == 0 {
		tb.Fatalf("testredis: KeySlot: no node answers")
	}
	slot, err := strconv.Atoi(live[0].Do(tb, "CLUSTER", "KEYSLOT", key))
	if err != nil {
		tb.Fatalf("testredis: CLUSTER KEYSLOT %s: %v", key, err)
	}
	return slot
}

// Serving returns the node that serves slot as the first live node sees
// the cluster; after a failover, once WaitHealthy returned, all agree.
func (c *Cluster) Serving(tb testing.TB, slot int) *Server {
	tb.Helper()
	live := c.live()
	if len(live) == 0 {
		tb.Fatalf("testredis: Serving: no node answers")
	}
	port, err := c.servingPort(tb, live[0], slot)
	if err != nil {
		tb.Fatalf("testredis: %v", err)
	}
	for _, n := range c.nodes {
		if n.port == port {
			return n
		}
	}
	tb.Fatalf("testredis: %s says port %d serves slot %d, which is none of the nodes", live[0].Addr(), port, slot)
	return nil
}

// servingPort is the port of the master that n says serves slot.
func (c *Cluster) servingPort(tb testing.TB, n *Server, slot int) (int, error) {
	v, err := n.DoValue(tb, "CLUSTER", "SLOTS")
	if err != nil {
		return 0, fmt.Errorf("%s: CLUSTER SLOTS: %w", n.Addr(), err)
	}
	ranges, _ := v.([]any)
	for _, r := range ranges {
		f, _ := r.([]any)
		if len(f) < 3 {
			continue
		}
		lo, _ := f[0].(int64)
		hi, _ := f[1].(int64)
		master, _ := f[2].([]any)
		if int64(slot) < lo || int64(slot) > hi || len(master) < 2 {
			continue
		}
		port, _ := master[1].(int64)
		return int(port), nil
	}
	return 0, fmt.Errorf("%s: no node serves slot %d", n.Addr(), slot)
}

// WaitHealthy waits until every live node (running and not paused)
// reports cluster_state:ok with every slot served, and all of them name
// for every slot the same live master: after a master died or stalled,
// until a replica of it took over. It fails the test after thirty seconds.
func (c *Cluster) WaitHealthy(tb testing.TB) {
	tb.Helper()
	c.waitFor(tb, "a healthy cluster", func() error {
		live := c.live()
		if len(live) == 0 {
			return fmt.Errorf("no node runs")
		}
		ports := map[int]bool{}
		for _, n := range live {
			ports[n.port] = true
		}
		for _, n := range live {
			info, err := n.DoValue(tb, "CLUSTER", "INFO")
			if err != nil {
				return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr(), err)
			}
			text, _ := info.(string)
			if !strings.Contains(text, "cluster_state:ok\r\n") || !strings.Contains(text, "cluster_slots_ok:"+strconv.Itoa(clusterSlots)+"\r\n") {
				return fmt.Errorf("%s: CLUSTER INFO:\n%s", n.Addr(), text)
			}
		}
		for i := range c.masters {
			slot := i * clusterSlots / c.masters
			want := -1
			for _, n := range live {
				port, err := c.servingPort(tb, n, slot)
				if err != nil {
					return err
				}
				if !ports[port] {
					return fmt.Errorf("%s says port %d serves slot %d, which does not answer", n.Addr(), port, slot)
				}
				if want >= 0 && port != want {
					return fmt.Errorf("nodes disagree on slot %d: port %d and %d", slot, want, port)
				}
				want = port
			}
		}
		return nil
	})
}
