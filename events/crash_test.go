package events

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The crash test runs a recorder in a child process (this test binary,
// re-executed with crashEnv set) and kills it with SIGKILL while it
// records: no Close, no flush, no deferred function, exactly as a crash
// or an OOM kill would leave the spool.
const (
	crashEnv      = "FLOODGATE_EVENTS_CRASH_CHILD"
	crashRedisEnv = "FLOODGATE_EVENTS_CRASH_REDIS"
	// crashSmallEnv makes the child's spool small and sends every batch
	// through it, so that it fills, drains and has its delivered segments
	// deleted by the writer again and again while it is killed.
	crashSmallEnv = "FLOODGATE_EVENTS_CRASH_SMALL"
	smallSpool    = 4000
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir, os.Getenv(crashRedisEnv), os.Getenv(crashSmallEnv) != "")
		return
	}
	os.Exit(m.Run())
}

// crashWorkers is how many goroutines of the child record at once, as a
// gateway's requests do: each waits for its event to be durable, and the
// recorder commits what they queued meanwhile in one batch, so the child
// records thousands a second even where an fsync takes milliseconds (a
// busy machine). Worker w records events w, w+crashWorkers, … in order.
const crashWorkers = 16

// crashStall is how long the child may take to acknowledge the events the
// test waits for before it is taken for stuck: 2 to 6 s with both cores
// busy, a few hundred milliseconds on an idle machine.
const crashStall = time.Minute

// crashChild records test events forever, printing "ack I ID" for every
// one Record acknowledged, until it is killed.
func crashChild(spoolDir, redisAddr string, small bool) {
	c := baseSink(SinkRedis)
	c.SpoolDir = spoolDir
	c.Redis.Addrs = []string{redisAddr}
	o := Options{}
	if small {
		c.SpoolMaxBytes = smallSpool
		o.directTimeout = time.Nanosecond
	}
	r, err := NewRecorder(c, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "NewRecorder:", err)
		os.Exit(1)
	}
	var out sync.Mutex
	for w := range crashWorkers {
		go func() {
			for i := w; ; i += crashWorkers {
				e := testEvent(i)
				if r.Record(context.Background(), e) {
					// Unbuffered, one write a line: what the parent reads
					// was acknowledged.
					out.Lock()
					fmt.Fprintf(os.Stdout, "ack %d %s\n", i, e.ID)
					out.Unlock()
				}
				if i > 1_000_000 {
					time.Sleep(time.Hour)
				}
			}
		}()
	}
	select {}
}

// TestCrashRecovery kills a recording process and starts a new recorder on
// its spool: every event the dead one acknowledged is delivered exactly as
// recorded, in order. The dead one delivered as it went, or (sink down)
// left everything in the spool, or (a small spool) freed the space of what
// it had delivered each time the spool filled.
func TestCrashRecovery(t *testing.T) {
	t.Run("sink up", func(t *testing.T) { t.Parallel(); testCrashRecovery(t, true, false) })
	t.Run("sink down", func(t *testing.T) { t.Parallel(); testCrashRecovery(t, false, false) })
	t.Run("small spool", func(t *testing.T) { t.Parallel(); testCrashRecovery(t, true, true) })
}

func testCrashRecovery(t *testing.T, sinkUp, small bool) {
	srv := startRedis(t)
	spool := t.TempDir()
	childRedis := srv.Addr()
	if !sinkUp {
		childRedis = deadAddr(t)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+spool, crashRedisEnv+"="+childRedis)
	if small {
		cmd.Env = append(cmd.Env, crashSmallEnv+"=1")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr logBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	// Lines are read whole: a line without its newline was cut by the
	// kill (it cannot be, a pipe write this small is atomic, but a test
	// must not count on that to pass). want holds each worker's events
	// in the order it recorded them, which the sink must keep.
	var want []stored
	var byWorker [crashWorkers][]stored
	out := bufio.NewReader(stdout)
	readAck := func() bool {
		line, err := out.ReadString('\n')
		if err != nil {
			return false
		}
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "ack" {
			t.Fatalf("child printed %q", line)
		}
		i, _ := strconv.Atoi(f[1])
		e := testEvent(i)
		e.ID = f[2]
		st := stored{id: e.ID, data: encoded(t, e)}
		want = append(want, st)
		byWorker[i%crashWorkers] = append(byWorker[i%crashWorkers], st)
		return true
	}
	// A child that stops acknowledging would leave readAck waiting for a
	// line forever: after crashStall it is killed, and the count below
	// fails.
	stalled := time.AfterFunc(crashStall, func() { cmd.Process.Kill() })
	for len(want) < 2000 && readAck() {
	}
	stalled.Stop()
	// Kill it in the middle of recording and delivering.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
	// Acknowledgements printed before the kill but not yet read; the pipe
	// ends when the child is gone. Only then Wait, which closes the pipe.
	for readAck() {
	}
	killed = true
	cmd.Wait()
	if len(want) < 2000 {
		t.Fatalf("the child acknowledged only %d events of the 2000 wanted within %v; stderr:\n%s", len(want), crashStall, stderr.String())
	}
	before := len(redisStream(t, srv.Addr(), "fg:events"))
	if small {
		// Under a segment's size, the spool starts a new segment only
		// when the writer frees a delivered one: it must have, many times.
		segs, _ := filepath.Glob(filepath.Join(spool, "*"+segSuffix))
		var last uint64
		for _, seg := range segs {
			idx, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(seg), segSuffix), 16, 64)
			last = max(last, idx)
		}
		if last < 10 {
			t.Errorf("the spool is at segment %d; the writer should have freed delivered segments many times", last)
		}
	}

	c := baseSink(SinkRedis)
	c.SpoolDir = spool
	r := newTestRecorder(t, withRedis(c, srv.Addr()), Options{})
	read := func() []stored { return redisStream(t, srv.Addr(), c.Redis.Stream) }
	waitFor(t, "every acknowledged event delivered", func() bool { return len(read()) >= len(want) })
	waitFor(t, "an empty spool", func() bool { return r.spooledGauge() == 0 })
	got := read()
	var dups int
	for _, w := range byWorker {
		dups = checkDelivered(t, got, w)
	}
	t.Logf("child acknowledged %d; %d were delivered before the kill; %d in the stream now, %d duplicates",
		len(want), before, len(got), dups)
	// The forwarder persists its position after every batch, so only the
	// batch in flight at the kill can come twice.
	if dups > maxBatch {
		t.Errorf("%d duplicates; at most one batch (%d) should be resent", dups, maxBatch)
	}
}
