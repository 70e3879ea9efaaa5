// Package accesslog writes the gateway's access log (server.access_log):
// one JSON line per request. A
// request puts its line together in a pooled buffer and hands it to a
// bounded queue without waiting; one goroutine writes the queue to the
// file. When the queue is full (a disk that stalls under a flood) the
// line is dropped and counted, rather than the request made to wait for
// the disk: the answer matters more than its log line.
//
// The queue and its writer live as long as the gateway. A reload opens
// the file again, whatever it changed (logrotate renames the file and
// sends SIGHUP), and the writer moves to the new one after writing what
// was queued for the old one, so that no line of a request that spans a
// reload is lost.
package accesslog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/filekind"
	"github.com/floodgate-gw/floodgate/internal/logsample"
)

// queueLen is how many lines wait for the writer before new ones are
// dropped: a few seconds of a flood at the rates one instance answers.
const queueLen = 16384

// fileBuffer is the file writer's buffer; it is flushed whenever the
// queue is empty, so a quiet gateway's lines reach the file at once.
const fileBuffer = 64 << 10

// MaxPath bounds the path a line logs, cleaned or (when it could
// not be cleaned) as the client sent it: enough to tell the request, and
// no more of a flood of long paths on the disk.
const MaxPath = 512

// Log is the access log's queue and the goroutine that writes it, which
// live as long as the gateway; Use points it at a Sink.
type Log struct {
	lines   chan *[]byte
	swaps   chan swap
	stop    chan struct{}
	done    chan struct{}
	dropped atomic.Int64 // since the last flushDropped
	metric  prometheus.Counter
	errLog  *logsample.Sampler
	log     *slog.Logger
	now     func() time.Time
}

type swap struct {
	sink *Sink // nil: off
	done chan struct{}
}

// A Sink is where lines go: a file of ours, or a writer (stdout,
// stderr) that is not ours to close and that others write to as well.
type Sink struct {
	target string
	w      io.Writer
	file   *os.File      // nil: not ours
	buf    *bufio.Writer // nil: each line is written on its own
}

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// New starts a log that counts the lines it drops in metric, and logs to
// log when it cannot write (as often as the clock now lets a line a
// second through). It writes nowhere until Use gives it a Sink.
func New(metric prometheus.Counter, log *slog.Logger, now func() time.Time) *Log {
	a := &Log{
		lines:  make(chan *[]byte, queueLen),
		swaps:  make(chan swap),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		metric: metric,
		errLog: logsample.New(1),
		log:    log,
		now:    now,
	}
	go a.run()
	return a
}

// Open opens the target of cfg's server.access_log: nil for
// off, stdout, stderr, or the file, created 0640 and appended to. A file
// that cannot be opened, or is not a regular file, is a config.Errors at
// the setting's line.
func Open(cfg *config.Config, stdout, stderr io.Writer) (*Sink, error) {
	target := cfg.Server.AccessLog
	switch target {
	case config.AccessLogOff, "":
		return nil, nil
	case config.AccessLogStdout:
		return &Sink{target: target, w: stdout}, nil
	case config.AccessLogStderr:
		return &Sink{target: target, w: stderr}, nil
	}
	// A path that is there already and is not a file is refused by what
	// it is; openAppend checks again what it opened, in case it changed.
	if fi, err := os.Stat(target); err == nil && !fi.Mode().IsRegular() {
		return nil, openError(cfg, notRegularError(target, fi.Mode()))
	}
	f, err := openAppend(target)
	if err != nil {
		return nil, openError(cfg, err)
	}
	bw := bufio.NewWriterSize(f, fileBuffer)
	return &Sink{target: target, w: bw, file: f, buf: bw}, nil
}

func openError(cfg *config.Config, err error) error {
	var nr *notRegular
	if errors.As(err, &nr) {
		return config.Errors{{File: cfg.File, Line: cfg.Line("server.access_log"),
			Msg: fmt.Sprintf("server.access_log: %q is %s; write the path of a regular file", nr.name, nr.kind)}}
	}
	return config.Errors{{File: cfg.File, Line: cfg.Line("server.access_log"),
		Msg: fmt.Sprintf("server.access_log: cannot open: %v", err)}}
}

// notRegular is a path to write to that is not a regular file.
type notRegular struct{ name, kind string }

func (e *notRegular) Error() string { return e.name + " is " + e.kind }

func notRegularError(name string, m fs.FileMode) error {
	return &notRegular{name, filekind.NotRegular(m)}
}

// Use makes the writer write to s from now on, once the lines queued so
// far are written where they were meant to go. It closes the sink it
// replaces.
func (a *Log) Use(s *Sink) {
	done := make(chan struct{})
	select {
	case a.swaps <- swap{sink: s, done: done}:
		<-done
	case <-a.done:
		s.Close()
	}
}

// Close writes what is queued, closes the sink and stops the writer.
func (a *Log) Close() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}

// put hands a line to the writer, or drops it when the queue is full.
func (a *Log) put(b *[]byte) {
	select {
	case a.lines <- b:
	default:
		a.dropped.Add(1)
		a.metric.Inc()
		bufs.Put(b)
	}
}

func (a *Log) run() {
	defer close(a.done)
	var sink *Sink
	for {
		select {
		case b := <-a.lines:
			a.write(sink, b)
			if len(a.lines) == 0 {
				a.flush(sink)
			}
		case sw := <-a.swaps:
			a.drain(sink)
			sink.Close()
			sink = sw.sink
			close(sw.done)
		case <-a.stop:
			a.drain(sink)
			sink.Close()
			return
		}
	}
}

// drain writes the lines queued now, and flushes.
func (a *Log) drain(sink *Sink) {
	for {
		select {
		case b := <-a.lines:
			a.write(sink, b)
		default:
			a.flush(sink)
			return
		}
	}
}

func (a *Log) write(sink *Sink, b *[]byte) {
	if sink != nil {
		if _, err := sink.w.Write(*b); err != nil {
			a.failed(sink, err)
		}
	}
	if cap(*b) <= 4<<10 {
		*b = (*b)[:0]
		bufs.Put(b)
	}
}

func (a *Log) flush(sink *Sink) {
	if sink != nil && sink.buf != nil {
		if err := sink.buf.Flush(); err != nil {
			a.failed(sink, err)
			// A bufio.Writer that failed keeps failing: start over with
			// the same file, losing what it held, so that the lines after
			// a full disk is cleared are written.
			sink.buf.Reset(sink.file)
		}
	}
}

func (a *Log) failed(sink *Sink, err error) {
	if a.errLog.Allow(a.now().Unix()) {
		a.log.Error("cannot write the access log", "file", sink.target, "error", err.Error())
	}
}

// Close closes the sink's file, if it is one of its own.
func (s *Sink) Close() {
	if s != nil && s.file != nil {
		s.file.Close()
	}
}

// TakeDropped returns and clears the count of lines dropped.
func (a *Log) TakeDropped() int64 { return a.dropped.Swap(0) }
