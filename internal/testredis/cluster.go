package testredis

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clusterTimeout bounds cluster formation. Redis itself holds a fresh master
// in cluster_state:fail for about two seconds after start, so formation
// cannot be much faster than that.
const clusterTimeout = 20 * time.Second

const clusterSlots = 16384

// Cluster is a Redis Cluster of masters only, owned by a test.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts masters cluster-enabled redis-servers, splits the 16384
// hash slots evenly between them in node order, joins them, and waits until
// every node reports cluster_state:ok and sees all masters. Options apply to
// every node. The nodes are stopped when the test finishes.
func StartCluster(tb testing.TB, masters int, opts ...Option) *Cluster {
	tb.Helper()
	if masters < 1 || masters > clusterSlots {
		tb.Fatalf("testredis: StartCluster: masters must be in [1, %d], got %d", clusterSlots, masters)
	}
	o := options{cluster: true}
	for _, opt := range opts {
		opt(&o)
	}
	c := &Cluster{}
	for range masters {
		c.nodes = append(c.nodes, start(tb, o))
	}

	for i, n := range c.nodes {
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

	deadline := time.Now().Add(clusterTimeout)
	for {
		var notReady error
		for _, n := range c.nodes {
			if notReady = n.clusterReady(tb, masters); notReady != nil {
				break
			}
		}
		if notReady == nil {
			return c
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, n := range c.nodes {
				fmt.Fprintf(&logs, "--- redis-server %s ---\n%s\n", n.Addr(), n.logTail())
			}
			tb.Fatalf("testredis: cluster did not form within %v: %v\n%s", clusterTimeout, notReady, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterReady reports why s does not yet see a healthy cluster of the given
// number of masters, or nil.
func (s *Server) clusterReady(tb testing.TB, masters int) error {
	info, err := s.DoValue(tb, "CLUSTER", "INFO")
	if err != nil {
		return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr(), err)
	}
	text, _ := info.(string)
	for _, want := range []string{
		"cluster_state:ok",
		"cluster_slots_ok:" + strconv.Itoa(clusterSlots),
		"cluster_known_nodes:" + strconv.Itoa(masters),
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
	healthy := 0
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		flags := strings.Split(f[2], ",")
		if slices.Contains(flags, "master") && !slices.ContainsFunc(flags, unhealthyFlag) {
			healthy++
		}
	}
	if healthy != masters {
		return fmt.Errorf("%s sees %d of %d masters healthy:\n%s", s.Addr(), healthy, masters, text)
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

// Nodes returns the cluster's nodes in order; node i owns the i-th of the
// evenly split slot ranges. Each can be stopped or restarted individually.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}
