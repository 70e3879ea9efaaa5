package testredis

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStartDo(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	if strings.HasSuffix(srv.Addr(), ":6379") || !strings.HasPrefix(srv.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want a non-default port on 127.0.0.1", srv.Addr())
	}
	if got := srv.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING = %q", got)
	}
	if got := srv.Do(t, "SET", "k", "v", "PX", "60000"); got != "OK" {
		t.Fatalf("SET = %q", got)
	}
	if got := srv.Do(t, "GET", "k"); got != "v" {
		t.Fatalf("GET = %q", got)
	}
	if got := srv.Do(t, "GET", "missing"); got != "(nil)" {
		t.Fatalf("GET missing = %q", got)
	}
	pttl, err := strconv.Atoi(srv.Do(t, "PTTL", "k"))
	if err != nil || pttl <= 0 || pttl > 60000 {
		t.Fatalf("PTTL = %d, %v", pttl, err)
	}
	if got := srv.Do(t, "SCAN", "0", "MATCH", "k*"); got != "[0 [k]]" {
		t.Fatalf("SCAN = %q", got)
	}

	v, err := srv.DoValue(t, "TIME")
	if err != nil {
		t.Fatal(err)
	}
	if arr, ok := v.([]any); !ok || len(arr) != 2 {
		t.Fatalf("TIME = %#v", v)
	}
	v, err = srv.DoValue(t, "INCR", "n")
	if err != nil || v != int64(1) {
		t.Fatalf("INCR = %#v, %v", v, err)
	}
	_, err = srv.DoValue(t, "INCR", "k")
	var re ReplyError
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "ERR") {
		t.Fatalf("INCR on a string: err = %v, want an ERR reply", err)
	}
	// The package's promise that DEBUG is usable in tests.
	if got := srv.Do(t, "DEBUG", "SLEEP", "0"); got != "OK" {
		t.Fatalf("DEBUG SLEEP = %q", got)
	}
}

func TestWithArgsPassword(t *testing.T) {
	t.Parallel()
	srv := Start(t, WithArgs("--requirepass", "s3cret", "--maxmemory", "10mb"))
	if got := srv.Do(t, "CONFIG", "GET", "maxmemory"); got != "[maxmemory 10485760]" {
		t.Fatalf("CONFIG GET maxmemory = %q", got)
	}
	// A client without the password must be refused, proving the argument
	// reached the server and Do authenticated on its own.
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "PING\r\n")
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "-NOAUTH") {
		t.Fatalf("unauthenticated PING got %q, want -NOAUTH", buf[:n])
	}
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	addr := srv.Addr()
	srv.Do(t, "SET", "k", "v")

	// A connection opened before Stop must see the server go away.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	srv.Stop()
	srv.Stop() // idempotent

	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read on a connection to a stopped server succeeded")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("dial to a stopped server succeeded")
	}
	if _, err := srv.DoValue(t, "PING"); err == nil {
		t.Fatal("DoValue on a stopped server succeeded")
	}

	srv.Restart()
	if srv.Addr() != addr {
		t.Fatalf("Addr after Restart = %q, want %q", srv.Addr(), addr)
	}
	if got := srv.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after Restart = %q", got)
	}
	if got := srv.Do(t, "GET", "k"); got != "(nil)" {
		t.Fatalf("GET after Restart = %q, want data gone", got)
	}
	// Restart of a running server replaces it.
	srv.Restart()
	if got := srv.Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after second Restart = %q", got)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 || len(c.Nodes()) != 3 {
		t.Fatalf("Addrs = %v, %d nodes", c.Addrs(), len(c.Nodes()))
	}
	for _, n := range c.Nodes() {
		if info := n.Do(t, "CLUSTER", "INFO"); !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("%s CLUSTER INFO:\n%s", n.Addr(), info)
		}
		masters := 0
		var covered [clusterSlots]bool
		for line := range strings.Lines(n.Do(t, "CLUSTER", "NODES")) {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "master") {
				continue
			}
			masters++
			if !strings.HasPrefix(f[1], "127.0.0.1:") {
				t.Errorf("%s: node address %q, want 127.0.0.1", n.Addr(), f[1])
			}
			for _, r := range f[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 != nil || err2 != nil {
					t.Fatalf("%s: bad slot range %q", n.Addr(), r)
				}
				for s := a; s <= b; s++ {
					covered[s] = true
				}
			}
		}
		if masters != 3 {
			t.Fatalf("%s sees %d masters, want 3", n.Addr(), masters)
		}
		for s, ok := range covered {
			if !ok {
				t.Fatalf("%s: slot %d not covered", n.Addr(), s)
			}
		}
	}
	// Slot ownership follows node order, so tests can predict redirections:
	// "foo" hashes to slot 12182, in the last third.
	if got := c.Nodes()[2].Do(t, "SET", "foo", "bar"); got != "OK" {
		t.Fatalf("SET foo on its owner = %q", got)
	}
	if _, err := c.Nodes()[0].DoValue(t, "GET", "foo"); err == nil || !strings.HasPrefix(err.Error(), "MOVED 12182 ") {
		t.Fatalf("GET foo on a non-owner: err = %v, want MOVED 12182", err)
	}
}

// A cluster with a replica per master fails a killed master, and then a
// paused one, over to its replica, which Serving then names.
func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3, Replicas(1), WithArgs("--cluster-node-timeout", "1000"))
	nodes := c.Nodes()
	if len(nodes) != 6 {
		t.Fatalf("%d nodes, want 6", len(nodes))
	}
	slot := c.KeySlot(t, "foo")
	if slot != 12182 {
		t.Fatalf("KeySlot(foo) = %d, want 12182", slot)
	}
	for i := range 3 {
		if got := c.Serving(t, i*clusterSlots/3); got != nodes[i] {
			t.Fatalf("Serving(%d) = %s, want master %d %s", i*clusterSlots/3, got.Addr(), i, nodes[i].Addr())
		}
		if err := nodes[3+i].replicates(t, nodes[i].port); err != nil {
			t.Fatal(err)
		}
	}

	nodes[2].Kill()
	if _, err := nodes[2].DoValue(t, "PING"); err == nil {
		t.Fatal("a killed node answers PING")
	}
	c.WaitHealthy(t)
	if got := c.Serving(t, slot); got != nodes[5] {
		t.Fatalf("after the kill, slot %d is served by %s, want the replica %s", slot, got.Addr(), nodes[5].Addr())
	}
	if got := nodes[5].Do(t, "SET", "foo", "bar"); got != "OK" {
		t.Fatalf("SET foo on the promoted replica = %q", got)
	}

	nodes[1].Pause()
	c.WaitHealthy(t)
	if got := c.Serving(t, clusterSlots/3); got != nodes[4] {
		t.Fatalf("after the pause, slot %d is served by %s, want the replica %s", clusterSlots/3, got.Addr(), nodes[4].Addr())
	}
	nodes[1].Resume()
	if got := nodes[1].Do(t, "PING"); got != "PONG" {
		t.Fatalf("PING after Resume = %q", got)
	}
}

func TestMissingBinaryFails(t *testing.T) {
	// Not parallel: Setenv changes PATH for the whole process.
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	if !strings.Contains(rec.msg, "redis-server not found") || !strings.Contains(rec.msg, "apt-get install redis-server") {
		t.Fatalf("Fatalf message = %q", rec.msg)
	}
}

// fatalRecorder stands in for the test so Start's failure can be observed
// without failing the real test; Goexit mirrors what t.Fatalf does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestNoGoroutineLeak(t *testing.T) {
	// Not parallel: other tests' servers own goroutines of their own.
	before := runtime.NumGoroutine()
	t.Run("use", func(t *testing.T) {
		srv := Start(t)
		srv.Do(t, "SET", "k", "v")
		srv.Stop()
		srv.Restart()
		srv.Do(t, "GET", "k")
		// Cleanup stops the restarted process.
	})
	deadline := time.Now().Add(2 * time.Second)
	for {
		after := runtime.NumGoroutine()
		if after <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, after, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
