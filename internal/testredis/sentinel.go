package testredis

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MasterName is the name under which StartSentinel's sentinels monitor the
// master; clients ask for it with SENTINEL GET-MASTER-ADDR-BY-NAME.
const MasterName = "fgmaster"

// DownAfter is the sentinels' down-after-milliseconds: a master that does
// not answer them for this long is taken for dead and failed over. A test
// that stalls the master (DEBUG SLEEP, CLIENT PAUSE) for longer than this
// therefore triggers a failover.
const DownAfter = time.Second

const (
	// sentinelTimeout bounds start-up and every failover. A failover takes
	// two to four seconds; the slack is for an election that ends without a
	// leader, which Sentinel retries only after twice failoverTimeout.
	sentinelTimeout = 20 * time.Second

	// failoverTimeout is the sentinels' failover-timeout. It also bounds how
	// long the elected sentinel waits to see its replica promoted, which it
	// notices by INFO sent once a second, so it must stay well above that.
	failoverTimeout = 3 * time.Second
)

// sentinelDebug shortens Sentinel's internal periods, which are tuned for
// production: INFO every 10 s (how sentinels find replicas and notice role
// changes), hellos every 2 s (how they find each other; four of them is
// also how long they let a restarted old master claim to be master before
// demoting it), asking peers whether the master is down every second, and a
// 30 s standstill after a timer hiccup (TILT) that would outlast the test.
//
// PING-PERIOD is halved, not more. It also throttles reconnection: after a
// failover a sentinel links to the new master only one ping period after
// its last attempt to reach the dead one, yet counts DownAfter from the
// switch, so a ping period close to DownAfter makes sentinels take the new
// master for dead too and fail back and forth. And during a failover replica
// INFO, fetched once a second, is only fresh enough to promote from if
// younger than five ping periods.
var sentinelDebug = []string{
	"SENTINEL", "DEBUG",
	"INFO-PERIOD", "500",
	"PING-PERIOD", "500",
	"PUBLISH-PERIOD", "200",
	"ASK-PERIOD", "200",
	"TILT-PERIOD", "3000",
}

// Sentinel is a master, its replicas and the sentinels that monitor them,
// owned by a test.
type Sentinel struct {
	servers   []*Server // master first, then replicas, in start order
	sentinels []*Server
}

// StartSentinel starts a master redis-server, replicas replicas of it and
// sentinels sentinel processes that monitor it as MasterName, and waits
// until the replicas are in sync and every sentinel knows the master, all
// replicas and all other sentinels. The quorum is a majority of the
// sentinels, so a failover works while a majority runs. Options apply to the
// master and replicas, not to the sentinels; with --requirepass, replicas and
// sentinels authenticate to the servers with it. Everything is stopped when
// the test finishes.
//
// The servers are started from config files, which the sentinels rewrite
// with every role change, so a restarted server comes back in the role they
// gave it last, as in a real deployment. A server that was down while the
// sentinels changed its role (a crashed master) comes back as a master,
// empty, and is turned into a replica of the current master within about
// two seconds. With -short (make quick) the test is skipped.
func StartSentinel(tb testing.TB, replicas, sentinels int, opts ...Option) *Sentinel {
	tb.Helper()
	if testing.Short() {
		tb.Skip("testredis: Redis Sentinel takes seconds to start and to fail over; -short leaves it to make check")
	}
	if replicas < 0 || sentinels < 1 {
		tb.Fatalf("testredis: StartSentinel: need replicas >= 0 and sentinels >= 1, got %d and %d", replicas, sentinels)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	password := passwordFrom(o.args)
	o.withConf = true
	o.dropRDB = true
	o.args = append([]string{
		// Announced explicitly so that what sentinels report is reachable
		// from this machine whatever address a server would derive.
		"--replica-announce-ip", "127.0.0.1",
		// Diskless sync, the default, has the master wait 5 s for more
		// replicas before each full sync, and stream writes to a synced
		// replica only after its first REPLCONF ACK, up to a second later,
		// although the replica already reports master_link_status:up, so
		// a write right after start-up or a failover could be lost in the
		// next failover. Through disk, both delays are gone. The RDB files
		// are deleted once used (and by dropRDB if the server stopped
		// first), or a restarted server would load them.
		"--repl-diskless-sync", "no",
		"--rdb-del-sync-files", "yes",
		// Stop would otherwise make a master wait for its replicas to
		// acknowledge the last writes, which they do once a second; the
		// writes themselves are still flushed to them on the way out.
		"--shutdown-timeout", "0",
	}, o.args...)
	if password != "" {
		// Every server may become a replica, not only the current ones.
		o.args = append(o.args, "--masterauth", password)
	}

	s := &Sentinel{}
	master := start(tb, o)
	s.servers = append(s.servers, master)
	ro := o
	ro.conf = fmt.Sprintf("replicaof 127.0.0.1 %d\n", master.port)
	for range replicas {
		s.servers = append(s.servers, start(tb, ro))
	}
	// Sentinels are started only once the replicas are in sync: the master
	// lists its replicas in INFO only then, and that INFO is how a sentinel
	// finds them.
	s.waitFor(tb, "replicas did not sync", func() error {
		for _, r := range s.servers[1:] {
			if err := r.replicates(tb, master.port); err != nil {
				return err
			}
		}
		return nil
	})

	quorum := sentinels/2 + 1
	var conf strings.Builder
	fmt.Fprintf(&conf, "sentinel monitor %s 127.0.0.1 %d %d\n", MasterName, master.port, quorum)
	fmt.Fprintf(&conf, "sentinel down-after-milliseconds %s %d\n", MasterName, DownAfter.Milliseconds())
	fmt.Fprintf(&conf, "sentinel failover-timeout %s %d\n", MasterName, failoverTimeout.Milliseconds())
	fmt.Fprintf(&conf, "sentinel parallel-syncs %s 1\n", MasterName)
	fmt.Fprintf(&conf, "sentinel announce-ip 127.0.0.1\n")
	if password != "" {
		fmt.Fprintf(&conf, "sentinel auth-pass %s %q\n", MasterName, password)
	}
	so := options{sentinel: true, conf: conf.String(), init: sentinelDebug}
	for range sentinels {
		s.sentinels = append(s.sentinels, start(tb, so))
	}
	s.waitFor(tb, "sentinels did not come up", func() error {
		return s.settled(tb, master)
	})
	return s
}

// Addrs returns the "127.0.0.1:PORT" address of every sentinel, in start
// order.
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, n := range s.sentinels {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Sentinels returns the sentinel processes, in start order, so a test can
// stop or restart one; Do and DoValue send them SENTINEL commands.
func (s *Sentinel) Sentinels() []*Server {
	return append([]*Server(nil), s.sentinels...)
}

// Servers returns the master and the replicas as started: the first one was
// the master at start, whichever is master now.
func (s *Sentinel) Servers() []*Server {
	return append([]*Server(nil), s.servers...)
}

// Master returns the server that the first running sentinel reports as
// master now. During a failover sentinels may briefly disagree; after
// StartSentinel, Failover and Switchover they agree.
func (s *Sentinel) Master(tb testing.TB) *Server {
	tb.Helper()
	for _, sn := range s.sentinels {
		if !sn.running() {
			continue
		}
		m, err := s.masterOf(tb, sn)
		if err != nil {
			tb.Fatalf("testredis: %v", err)
		}
		return m
	}
	tb.Fatalf("testredis: no sentinel is running")
	return nil
}

// Failover stops the master, as if it crashed, and waits until the
// sentinels have promoted a replica: every running sentinel reports it as
// master, it reports role:master, and the other running replicas replicate
// from it. It returns the new master. The old master stays stopped; after
// Restart it comes back empty and the sentinels make it a replica of the new
// master. It takes two to three seconds with one sentinel, three to four
// with three (their vote adds up to a second).
//
// If the sentinels have not yet seen a healthy replica of the master (a
// restarted old master not demoted yet), Failover first waits for one, so
// failovers can follow each other; it fails the test if no replica runs.
func (s *Sentinel) Failover(tb testing.TB) *Server {
	tb.Helper()
	old := s.beforeFailover(tb)
	old.Stop()
	return s.afterFailover(tb, old)
}

// Switchover makes the sentinels promote a replica while the master keeps
// running (SENTINEL FAILOVER, no agreement or down detection needed), and
// waits until every running sentinel reports the new master, it reports
// role:master, and all other running servers, the old master included,
// replicate from it. It returns the new master. When the sentinels demote
// the old master they close its client connections, which is how clients
// connected to it learn of the change; until then, about a second after
// the promotion, it still accepts writes.
func (s *Sentinel) Switchover(tb testing.TB) *Server {
	tb.Helper()
	old := s.beforeFailover(tb)
	var sent bool
	for _, sn := range s.sentinels {
		if sn.running() {
			sn.Do(tb, "SENTINEL", "FAILOVER", MasterName)
			sent = true
			break
		}
	}
	if !sent {
		tb.Fatalf("testredis: Switchover: no sentinel is running")
	}
	return s.afterFailover(tb, old)
}

// beforeFailover returns the current master once the sentinels see a
// replica of it they could promote.
func (s *Sentinel) beforeFailover(tb testing.TB) *Server {
	tb.Helper()
	m := s.Master(tb)
	if !slices.ContainsFunc(s.servers, func(srv *Server) bool { return srv != m && srv.running() }) {
		tb.Fatalf("testredis: no running replica of %s to fail over to", m.Addr())
	}
	s.waitFor(tb, "no replica became ready to take over", func() error {
		// Asked each time: the sentinels may be failing over on their own,
		// after a Restart of the master, for instance.
		var err error
		if m, err = s.masterOf(tb, s.firstRunning()); err != nil {
			return err
		}
		if err := s.settled(tb, m); err != nil {
			return err
		}
		for _, sn := range s.sentinels {
			if !sn.running() {
				continue
			}
			if err := healthyReplica(tb, sn, m.port); err != nil {
				return err
			}
		}
		return nil
	})
	return m
}

func (s *Sentinel) afterFailover(tb testing.TB, old *Server) *Server {
	tb.Helper()
	var m *Server
	s.waitFor(tb, "failover did not complete", func() error {
		var err error
		if m, err = s.masterOf(tb, s.firstRunning()); err != nil {
			return err
		}
		if m == old {
			return fmt.Errorf("sentinels still report %s as master", old.Addr())
		}
		// A stopped old master is skipped, a running one must follow.
		return s.settled(tb, m)
	})
	return m
}

// settled reports why the group is not yet in a steady state around master,
// or nil: master reports role:master, every other running server replicates
// from it, and every running sentinel agrees on master, has finished any
// failover, and knows the other servers and sentinels.
func (s *Sentinel) settled(tb testing.TB, master *Server) error {
	if err := master.hasRole(tb, "master"); err != nil {
		return err
	}
	for _, srv := range s.servers {
		if srv == master || !srv.running() {
			continue
		}
		if err := srv.replicates(tb, master.port); err != nil {
			return err
		}
	}
	for _, sn := range s.sentinels {
		if !sn.running() {
			continue
		}
		m, err := s.masterOf(tb, sn)
		if err != nil {
			return err
		}
		if m != master {
			return fmt.Errorf("sentinel %s reports master %s, not %s", sn.Addr(), m.Addr(), master.Addr())
		}
		state, err := sentinelFields(tb, sn, "MASTER")
		if err != nil {
			return err
		}
		st := state[0]
		// A sentinel links to a new master up to a ping period after
		// switching to it; its answers to clients do not depend on that.
		if flags := strings.TrimSuffix(st["flags"], ",disconnected"); flags != "master" {
			return fmt.Errorf("sentinel %s: master %s has flags %q", sn.Addr(), master.Addr(), st["flags"])
		}
		if want := strconv.Itoa(len(s.servers) - 1); st["num-slaves"] != want {
			return fmt.Errorf("sentinel %s knows %s of %s replicas", sn.Addr(), st["num-slaves"], want)
		}
		if want := strconv.Itoa(len(s.sentinels) - 1); st["num-other-sentinels"] != want {
			return fmt.Errorf("sentinel %s knows %s of %s other sentinels", sn.Addr(), st["num-other-sentinels"], want)
		}
	}
	return nil
}

// healthyReplica reports whether sentinel sn sees a replica of the master on
// masterPort that it could promote, or why not.
func healthyReplica(tb testing.TB, sn *Server, masterPort int) error {
	replicas, err := sentinelFields(tb, sn, "REPLICAS")
	if err != nil {
		return err
	}
	for _, r := range replicas {
		if r["flags"] == "slave" && r["role-reported"] == "slave" &&
			r["master-link-status"] == "ok" && r["master-port"] == strconv.Itoa(masterPort) {
			return nil
		}
	}
	return fmt.Errorf("sentinel %s sees no healthy replica of 127.0.0.1:%d: %v", sn.Addr(), masterPort, replicas)
}

// masterOf maps the master address that sentinel sn reports to its server.
func (s *Sentinel) masterOf(tb testing.TB, sn *Server) (*Server, error) {
	if sn == nil {
		return nil, fmt.Errorf("no sentinel is running")
	}
	v, err := sn.DoValue(tb, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName)
	if err != nil {
		return nil, fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME: %w", sn.Addr(), err)
	}
	arr, _ := v.([]any)
	if len(arr) != 2 {
		return nil, fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME replied %s", sn.Addr(), formatReply(v))
	}
	host, _ := arr[0].(string)
	port, _ := arr[1].(string)
	addr := net.JoinHostPort(host, port)
	for _, srv := range s.servers {
		if srv.Addr() == addr {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("sentinel %s reports master %s, which is none of the servers", sn.Addr(), addr)
}

func (s *Sentinel) firstRunning() *Server {
	for _, sn := range s.sentinels {
		if sn.running() {
			return sn
		}
	}
	return nil
}

// sentinelFields sends SENTINEL <sub> MasterName and returns its reply as
// field maps: one for MASTER, one per instance for REPLICAS and SENTINELS.
func sentinelFields(tb testing.TB, sn *Server, sub string) ([]map[string]string, error) {
	v, err := sn.DoValue(tb, "SENTINEL", sub, MasterName)
	if err != nil {
		return nil, fmt.Errorf("sentinel %s: SENTINEL %s: %w", sn.Addr(), sub, err)
	}
	arr, _ := v.([]any)
	if sub == "MASTER" {
		arr = []any{arr}
	}
	out := make([]map[string]string, 0, len(arr))
	for _, e := range arr {
		kv, _ := e.([]any)
		m := make(map[string]string, len(kv)/2)
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			v, _ := kv[i+1].(string)
			m[k] = v
		}
		out = append(out, m)
	}
	return out, nil
}

// hasRole reports whether s reports the given role in INFO replication.
func (s *Server) hasRole(tb testing.TB, role string) error {
	info, err := s.info(tb, "replication")
	if err != nil {
		return err
	}
	if got := info["role"]; got != role {
		return fmt.Errorf("%s reports role:%s, want %s", s.Addr(), got, role)
	}
	return nil
}

// replicates reports whether s is an in-sync replica of the master on
// masterPort, or why not.
func (s *Server) replicates(tb testing.TB, masterPort int) error {
	info, err := s.info(tb, "replication")
	if err != nil {
		return err
	}
	if info["role"] != "slave" || info["master_port"] != strconv.Itoa(masterPort) || info["master_link_status"] != "up" {
		return fmt.Errorf("%s is not an in-sync replica of 127.0.0.1:%d: role:%s master_port:%s master_link_status:%s",
			s.Addr(), masterPort, info["role"], info["master_port"], info["master_link_status"])
	}
	return nil
}

func (s *Server) info(tb testing.TB, section string) (map[string]string, error) {
	v, err := s.DoValue(tb, "INFO", section)
	if err != nil {
		return nil, fmt.Errorf("%s: INFO %s: %w", s.Addr(), section, err)
	}
	text, _ := v.(string)
	m := make(map[string]string)
	for line := range strings.Lines(text) {
		if k, val, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":"); ok {
			m[k] = val
		}
	}
	return m, nil
}

// waitFor polls ready until it returns nil, and fails the test with its last
// error and every process's log if that takes longer than sentinelTimeout.
func (s *Sentinel) waitFor(tb testing.TB, what string, ready func() error) {
	tb.Helper()
	deadline := time.Now().Add(sentinelTimeout)
	for {
		err := ready()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, n := range append(s.Servers(), s.sentinels...) {
				fmt.Fprintf(&logs, "--- %s %s ---\n%s\n", n.kind, n.Addr(), n.logTail())
			}
			tb.Fatalf("testredis: %s within %v: %v\n%s", what, sentinelTimeout, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
