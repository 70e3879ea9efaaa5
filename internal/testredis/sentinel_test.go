package testredis

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := StartSentinel(t, 1, 1)
	t.Logf("StartSentinel(1, 1) took %v", time.Since(start))
	if len(s.Addrs()) != 1 || !strings.HasPrefix(s.Addrs()[0], "127.0.0.1:") || strings.HasSuffix(s.Addrs()[0], ":6379") {
		t.Fatalf("Addrs = %v", s.Addrs())
	}
	servers := s.Servers()
	if len(servers) != 2 {
		t.Fatalf("%d servers, want 2", len(servers))
	}
	old := s.Master(t)
	if old != servers[0] {
		t.Fatalf("Master = %s, want the first server %s", old.Addr(), servers[0].Addr())
	}
	sn := s.Sentinels()[0]
	if got, want := sn.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName), "["+strings.Replace(old.Addr(), ":", " ", 1)+"]"; got != want {
		t.Fatalf("GET-MASTER-ADDR-BY-NAME = %s, want %s", got, want)
	}
	old.Do(t, "SET", "before", "1")
	// Acknowledged by the replica, so it must survive the failover.
	if got := old.Do(t, "WAIT", "1", "5000"); got != "1" {
		t.Fatalf("WAIT = %s", got)
	}

	start = time.Now()
	nm := s.Failover(t)
	t.Logf("Failover took %v", time.Since(start))
	if nm == old || nm.Addr() == old.Addr() || nm != servers[1] {
		t.Fatalf("new master %s, old %s", nm.Addr(), old.Addr())
	}
	if s.Master(t) != nm {
		t.Fatalf("Master = %s after Failover, want %s", s.Master(t).Addr(), nm.Addr())
	}
	if _, err := old.DoValue(t, "PING"); err == nil {
		t.Fatal("old master still answers")
	}
	if got := nm.Do(t, "SET", "after", "2"); got != "OK" {
		t.Fatalf("SET on the new master = %q", got)
	}
	if got := nm.Do(t, "GET", "before"); got != "1" {
		t.Fatalf("GET before on the new master = %q", got)
	}

	// The old master comes back as a master, empty, and the sentinel
	// demotes it: it must end up replicating the new master's data.
	start = time.Now()
	old.Restart()
	s.waitFor(t, "old master did not rejoin", func() error {
		return old.replicates(t, nm.port)
	})
	t.Logf("old master rejoined as replica %v after Restart", time.Since(start))
	if got := old.Do(t, "GET", "after"); got != "2" {
		t.Fatalf("GET after on the rejoined old master = %q", got)
	}
	if _, err := old.DoValue(t, "SET", "k", "v"); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("SET on the rejoined old master: err = %v, want READONLY", err)
	}
	// Exactly one failover happened: a sentinel that took the new master
	// for dead as well would have failed back, raising the epoch again.
	state, err := sentinelFields(t, sn, "MASTER")
	if err != nil {
		t.Fatal(err)
	}
	if state[0]["config-epoch"] != "1" {
		t.Fatalf("config-epoch = %s after one failover, want 1", state[0]["config-epoch"])
	}
}

func TestSentinelSwitchover(t *testing.T) {
	t.Parallel()
	// With a password, so that a demoted master must authenticate to the
	// new one (masterauth) and sentinels to both (auth-pass).
	s := StartSentinel(t, 1, 1, WithArgs("--requirepass", "s3cret"))
	old := s.Master(t)
	old.Do(t, "SET", "k", "v")
	// SENTINEL FAILOVER does not wait for the replica to catch up.
	if got := old.Do(t, "WAIT", "1", "5000"); got != "1" {
		t.Fatalf("WAIT = %s", got)
	}

	start := time.Now()
	nm := s.Switchover(t)
	t.Logf("Switchover took %v", time.Since(start))
	if nm == old {
		t.Fatalf("Switchover kept %s as master", old.Addr())
	}
	if err := old.replicates(t, nm.port); err != nil {
		t.Fatal(err)
	}
	if got := nm.Do(t, "SET", "k2", "v2"); got != "OK" {
		t.Fatalf("SET on the new master = %q", got)
	}
	if got := nm.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET k on the new master = %q", got)
	}

	// A restarted server keeps the role the sentinel gave it, because it
	// rewrote the server's config file: the old master is a replica at once.
	old.Restart()
	if err := old.hasRole(t, "slave"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "restarted replica did not resync", func() error {
		return old.replicates(t, nm.port)
	})
	if got := old.Do(t, "GET", "k2"); got != "v2" {
		t.Fatalf("GET k2 on the restarted replica = %q", got)
	}

	// And back: failovers can follow each other.
	if back := s.Switchover(t); back != old {
		t.Fatalf("second Switchover chose %s, want %s", back.Addr(), old.Addr())
	}
}

func TestSentinelThree(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := StartSentinel(t, 2, 3)
	t.Logf("StartSentinel(2, 3) took %v", time.Since(start))
	sentinels := s.Sentinels()
	if len(s.Addrs()) != 3 || len(sentinels) != 3 || len(s.Servers()) != 3 {
		t.Fatalf("Addrs = %v, %d servers", s.Addrs(), len(s.Servers()))
	}
	old := s.Master(t)
	for _, sn := range sentinels {
		peers, err := sentinelFields(t, sn, "SENTINELS")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range peers {
			got = append(got, p["ip"]+":"+p["port"])
		}
		var want []string
		for _, a := range s.Addrs() {
			if a != sn.Addr() {
				want = append(want, a)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("sentinel %s knows sentinels %v, want %v", sn.Addr(), got, want)
		}
		replicas, err := sentinelFields(t, sn, "REPLICAS")
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, r := range replicas {
			got = append(got, r["ip"]+":"+r["port"])
		}
		want = []string{s.Servers()[1].Addr(), s.Servers()[2].Addr()}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("sentinel %s knows replicas %v, want %v", sn.Addr(), got, want)
		}
	}

	start = time.Now()
	nm := s.Failover(t)
	t.Logf("Failover with 3 sentinels took %v", time.Since(start))
	if nm == old {
		t.Fatal("Failover kept the master")
	}
	for _, sn := range sentinels {
		if m, err := s.masterOf(t, sn); err != nil || m != nm {
			t.Fatalf("sentinel %s: master %v, %v; want %s", sn.Addr(), m, err, nm.Addr())
		}
	}
	if got := nm.Do(t, "SET", "k", "v"); got != "OK" {
		t.Fatalf("SET on the new master = %q", got)
	}
	// The remaining replica follows the new master.
	if got := nm.Do(t, "WAIT", "1", "5000"); got != "1" {
		t.Fatalf("WAIT = %s", got)
	}

	// A restarted sentinel keeps what it learnt through its rewritten
	// config file, and gets its shortened periods again.
	sn := sentinels[2]
	sn.Restart()
	if m, err := s.masterOf(t, sn); err != nil || m != nm {
		t.Fatalf("restarted sentinel: master %v, %v; want %s", m, err, nm.Addr())
	}
	if got := sn.Do(t, "SENTINEL", "DEBUG"); !strings.Contains(got, "PUBLISH-PERIOD 200") {
		t.Fatalf("restarted sentinel: SENTINEL DEBUG = %s", got)
	}
}
