package testredis

import (
	"errors"
	"fmt"
	"io"
	"net"
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

const (
	// readyTimeout bounds how long a start or restart may take before the
	// test fails; a local redis-server normally answers within milliseconds,
	// so hitting this means something is genuinely wrong.
	readyTimeout = 10 * time.Second

	// stopGrace is how long a server gets to exit on SIGTERM. It is short
	// because there is nothing to persist; it only matters when the server is
	// blocked (DEBUG SLEEP, a long script) and cannot handle the signal.
	stopGrace = 3 * time.Second

	// startAttempts bounds retries when the chosen port was taken between
	// picking it and redis-server binding it.
	startAttempts = 5

	// clusterBusOffset is fixed by Redis: the cluster bus listens on
	// client port + 10000.
	clusterBusOffset = 10000

	// forbiddenPort is the machine's own Redis; tests must never reach it.
	forbiddenPort = 6379
)

// errPortInUse marks a start failure that a different port may fix.
var errPortInUse = errors.New("address already in use")

// Option configures Start.
type Option func(*options)

type options struct {
	args     []string
	cluster  bool
	replicas int // per master, StartCluster only (Replicas)

	// withConf starts the process from a config file in its directory,
	// initially holding conf. Sentinels need one, and a sentinel-managed
	// server needs one for the CONFIG REWRITE that sentinels send with every
	// role change, so that Restart brings it back in the role it was given.
	withConf bool
	conf     string

	// sentinel runs the process in sentinel mode, with conf as its sentinel
	// configuration; args is ignored.
	sentinel bool

	// init is sent after every launch, for settings that neither the
	// command line nor the config file can carry (SENTINEL DEBUG).
	init []string

	// dropRDB deletes dump.rdb before every launch. A master with disk-based
	// replication writes one for each full sync, and a restarted server
	// would load it, although persistence is off.
	dropRDB bool

	// wrapper runs redis-server under another program (WithWrapper).
	wrapper []string
}

// WithArgs appends extra redis-server command-line arguments, for example
// WithArgs("--requirepass", "secret") or WithArgs("--maxmemory", "1mb").
// They come after the package's own arguments, so they can override them.
// If they include --requirepass, Do, DoValue and the readiness check
// authenticate with that password.
func WithArgs(extra ...string) Option {
	return func(o *options) { o.args = append(o.args, extra...) }
}

// WithWrapper runs redis-server under another program, which is given
// redis-server's path and arguments after its own: for example
// WithWrapper("valgrind", "--tool=callgrind") to count the instructions
// the server executes. Pid is then the wrapper's process, which for
// valgrind is the server's.
func WithWrapper(cmd ...string) Option {
	return func(o *options) { o.wrapper = cmd }
}

// Server is one redis-server process owned by a test.
type Server struct {
	tb       testing.TB
	bin      string
	kind     string // "redis-server" or "sentinel", for messages
	dir      string
	logPath  string
	port     int
	argv     []string
	password string
	init     []string
	dropRDB  bool
	wrapper  []string

	mu     sync.Mutex
	proc   *process // nil while stopped
	paused bool     // stopped with SIGSTOP (Pause)
	ready  bool     // the server answered at least once, so its log is worth showing
}

// process is one incarnation of a Server; Restart creates a new one.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has reaped the process
}

// Start runs a standalone redis-server on a free 127.0.0.1 port, waits until
// it answers PING, and stops it when the test finishes. The test fails
// (it is not skipped) if redis-server is not installed or does not come up.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return start(tb, o)
}

func start(tb testing.TB, o options) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("testredis: redis-server not found on PATH (%v); these tests need a real Redis >= 7.0: make deps installs it (on Debian or Ubuntu: apt-get install redis-server)", err)
	}
	// TempDir must be created before Cleanup is registered: cleanups run
	// last-in first-out, so the server is gone before its directory is removed.
	dir := tb.TempDir()
	s := &Server{
		tb:       tb,
		bin:      bin,
		kind:     "redis-server",
		dir:      dir,
		logPath:  filepath.Join(dir, "redis.log"),
		password: passwordFrom(o.args),
		init:     o.init,
		dropRDB:  o.dropRDB,
		wrapper:  o.wrapper,
	}
	if o.sentinel {
		s.kind = "sentinel"
		s.logPath = filepath.Join(dir, "sentinel.log")
		s.password = ""
	}
	if o.withConf || o.sentinel {
		// Written once: later launches must see what the process rewrote.
		if err := os.WriteFile(confPath(dir, o), []byte(o.conf), 0o644); err != nil {
			tb.Fatalf("testredis: %v", err)
		}
	}
	tb.Cleanup(s.cleanup)

	var lastErr error
	for range startAttempts {
		port, err := freePort(o.cluster)
		if err != nil {
			tb.Fatalf("testredis: %v", err)
		}
		s.port = port
		s.argv = serverArgs(dir, port, o)
		lastErr = s.launch(time.Now().Add(readyTimeout))
		if lastErr == nil {
			return s
		}
		if !errors.Is(lastErr, errPortInUse) {
			break
		}
	}
	tb.Fatalf("testredis: %v\n--- %s log (%s) ---\n%s", lastErr, s.kind, s.logPath, s.logTail())
	return nil
}

func confPath(dir string, o options) string {
	if o.sentinel {
		return filepath.Join(dir, "sentinel.conf")
	}
	return filepath.Join(dir, "redis.conf")
}

func serverArgs(dir string, port int, o options) []string {
	p := strconv.Itoa(port)
	if o.sentinel {
		// The config file must come first; the rest is appended to it.
		return []string{confPath(dir, o), "--sentinel", "--port", p, "--bind", "127.0.0.1", "--dir", dir}
	}
	var args []string
	if o.withConf {
		args = append(args, confPath(dir, o))
	}
	args = append(args,
		"--port", p,
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--enable-debug-command", "yes",
	)
	if o.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
			"--cluster-node-timeout", "5000",
			// Without an announced IP the first node only learns its own
			// address from gossip, and until then reports an empty host in
			// CLUSTER SLOTS/SHARDS, which confuses cluster clients.
			"--cluster-announce-ip", "127.0.0.1",
		)
	}
	return append(args, o.args...)
}

// passwordFrom finds --requirepass so the package's own connections can
// authenticate; other ACL setups are not understood.
func passwordFrom(args []string) string {
	pw := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			pw = args[i+1]
		}
	}
	return pw
}

// freePort asks the kernel for an unused port. The port is released before
// redis-server binds it, so another process can grab it in between; launch
// detects that and start retries with a new port.
func freePort(cluster bool) (int, error) {
	var lastErr error
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			lastErr = err
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := port != forbiddenPort
		if ok && cluster {
			// Check the bus port while still holding the client port, so
			// the kernel cannot hand us the same pair again.
			bus := port + clusterBusOffset
			ok = bus <= 65535 && bus != forbiddenPort
			if ok {
				bl, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(bus))
				if ok = err == nil; ok {
					bl.Close()
				}
			}
		}
		l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port found on 127.0.0.1 (last error: %v)", lastErr)
}

// launch starts one incarnation and waits for it. It must be called with
// s.mu held or before s is shared.
func (s *Server) launch(deadline time.Time) error {
	if s.dropRDB {
		if err := os.Remove(filepath.Join(s.dir, "dump.rdb")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// Remember where this incarnation's output starts, so a bind error from a
	// previous attempt is not mistaken for a new one.
	offset, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return err
	}
	cmd := exec.Command(s.bin, s.argv...)
	if len(s.wrapper) > 0 {
		cmd = exec.Command(s.wrapper[0], append(append(s.wrapper[1:len(s.wrapper):len(s.wrapper)], s.bin), s.argv...)...)
	}
	cmd.Dir = s.dir
	// An *os.File is handed to the child as its fd; any other io.Writer
	// would make os/exec run a copying goroutine per stream.
	cmd.Stdout = logf
	cmd.Stderr = logf
	setProcAttr(cmd)
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	err = s.waitReady(p, offset, deadline)
	if err == nil && len(s.init) > 0 {
		err = s.sendInit()
	}
	if err != nil {
		p.stop()
		return err
	}
	s.proc = p
	s.ready = true
	return nil
}

func (s *Server) sendInit() error {
	c, err := s.dial(readyTimeout)
	if err != nil {
		return err
	}
	defer c.close()
	v, err := c.do(s.init...)
	if err == nil {
		if e, ok := v.(ReplyError); ok {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.Addr(), strings.Join(s.init, " "), err)
	}
	return nil
}

func (s *Server) waitReady(p *process, logOffset int64, deadline time.Time) error {
	for {
		lastErr := s.probe(p.cmd.Process.Pid)
		if lastErr == nil {
			return nil
		}
		select {
		case <-p.done:
			if strings.Contains(s.logFrom(logOffset), "Address already in use") {
				return fmt.Errorf("redis-server could not bind port %d (or its cluster bus port): %w", s.port, errPortInUse)
			}
			return fmt.Errorf("%s on port %d exited during startup: %v", s.kind, s.port, p.cmd.ProcessState)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s on %s did not answer PING within %v (last error: %v)", s.kind, s.Addr(), readyTimeout, lastErr)
		}
	}
}

// probe checks that the server answers and that it is our process: if
// another test's server grabbed the port first, it would answer PING just
// as well, while ours is about to die of a bind error.
func (s *Server) probe(pid int) error {
	c, err := s.dial(time.Second)
	if err != nil {
		return err
	}
	defer c.close()
	pong, err := c.do("PING")
	if err != nil {
		return err
	}
	if pong != "PONG" {
		return fmt.Errorf("PING replied %q", pong)
	}
	info, err := c.do("INFO", "server")
	if err != nil {
		return err
	}
	text, _ := info.(string)
	want := "process_id:" + strconv.Itoa(pid) + "\r\n"
	if !strings.Contains(text, want) {
		return fmt.Errorf("port %d is answered by a different process than pid %d", s.port, pid)
	}
	return nil
}

// Addr returns the server's "127.0.0.1:PORT" address. It stays the same
// across Stop and Restart.
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Pid returns the running server's process id, or 0 while it is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Stop terminates the server (SIGTERM, then SIGKILL if it does not exit
// within a few seconds) and waits until it is reaped. Clients see a dead
// Redis afterwards: connections are closed and new ones are refused. Stop is
// idempotent and safe to call concurrently.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop()
		s.proc = nil
	}
	s.paused = false
}

// Kill ends the server with SIGKILL, as a crash would, and waits until it
// is reaped: its connections are reset and new ones refused, with nothing
// said to the other nodes of a cluster or to sentinels. Restart brings it
// back.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.cmd.Process.Kill()
		<-s.proc.done
		s.proc = nil
	}
	s.paused = false
}

// Pause stops the server with SIGSTOP: its connections stay open and
// accept, but nothing is answered, as from a host that stalls, until
// Resume. A paused server is not asked by the Cluster's helpers, and Do
// on it waits for a minute before failing.
func (s *Server) Pause() {
	s.signal(syscall.SIGSTOP, true)
}

// Resume continues a server that Pause stopped (SIGCONT).
func (s *Server) Resume() {
	s.signal(syscall.SIGCONT, false)
}

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.tb.Fatalf("testredis: %s is not running", s.Addr())
		return
	}
	if err := s.proc.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("testredis: %s: %v", s.Addr(), err)
	}
	s.paused = paused
}

// answers reports whether the server runs and is not paused.
func (s *Server) answers() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.paused
}

// Restart stops the server if it is running and starts it again on the same
// port, waiting until it answers PING. Data is not preserved (persistence is
// off), but a cluster node keeps its node ID and slots through its nodes.conf,
// and a server of StartSentinel the role its sentinels last gave it.
// Failures are reported to the testing.TB passed to Start.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		s.proc.stop()
		s.proc = nil
	}
	s.paused = false
	// The port cannot be changed, so an in-use port is retried until the
	// deadline rather than swapped for another one.
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.launch(deadline)
		if err == nil {
			return
		}
		if !errors.Is(err, errPortInUse) || time.Now().After(deadline) {
			s.tb.Fatalf("testredis: restart: %v\n--- %s log (%s) ---\n%s", err, s.kind, s.logPath, s.logTail())
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) cleanup() {
	s.Stop()
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	// A failed test is often explained by the server's view of events; a
	// failed start already printed the log in its own message.
	if ready && s.tb.Failed() {
		s.tb.Logf("testredis: last lines of %s log for %s:\n%s", s.kind, s.Addr(), s.logTail())
	}
}

func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// stop is idempotent because Wait, not the signal, is what closes done.
func (p *process) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	// A paused server handles the SIGTERM once it runs again.
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

const logTailBytes = 4 << 10

func (s *Server) logTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(st.Size()-logTailBytes, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if err != nil {
		return fmt.Sprintf("(reading log: %v)", err)
	}
	if off > 0 {
		// Drop the partial first line.
		if i := strings.IndexByte(string(b), '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}

func (s *Server) logFrom(offset int64) string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
	return string(b)
}
