package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/filekind"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// The access log (server.access_log) is one JSON line per request. A
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

// accessQueue is how many lines wait for the writer before new ones are
// dropped: a few seconds of a flood at the rates one instance answers.
const accessQueue = 16384

// accessBuffer is the file writer's buffer; it is flushed whenever the
// queue is empty, so a quiet gateway's lines reach the file at once.
const accessBuffer = 64 << 10

// maxLoggedPath bounds the path a line logs, cleaned or (when it could
// not be cleaned) as the client sent it: enough to tell the request, and
// no more of a flood of long paths on the disk.
const maxLoggedPath = 512

type accessLog struct {
	lines   chan *[]byte
	swaps   chan accessSwap
	stop    chan struct{}
	done    chan struct{}
	dropped atomic.Int64 // since the last flushDropped
	metric  prometheus.Counter
	errLog  *sampler
	log     *slog.Logger
	now     func() time.Time
}

type accessSwap struct {
	sink *accessSink // nil: off
	done chan struct{}
}

// accessSink is where lines go: a file of ours, or a writer (stdout,
// stderr) that is not ours to close and that others write to as well.
type accessSink struct {
	target string
	w      io.Writer
	file   *os.File      // nil: not ours
	buf    *bufio.Writer // nil: each line is written on its own
}

var accessBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

func newAccessLog(metric prometheus.Counter, log *slog.Logger, now func() time.Time) *accessLog {
	a := &accessLog{
		lines:  make(chan *[]byte, accessQueue),
		swaps:  make(chan accessSwap),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		metric: metric,
		errLog: newSampler(1),
		log:    log,
		now:    now,
	}
	go a.run()
	return a
}

// openAccessSink opens the target of cfg's server.access_log: nil for
// off, stdout, stderr, or the file, created 0640 and appended to. A file
// that cannot be opened, or is not a regular file, is a config.Errors at
// the setting's line.
func openAccessSink(cfg *config.Config, stdout, stderr io.Writer) (*accessSink, error) {
	target := cfg.Server.AccessLog
	switch target {
	case config.AccessLogOff, "":
		return nil, nil
	case config.AccessLogStdout:
		return &accessSink{target: target, w: stdout}, nil
	case config.AccessLogStderr:
		return &accessSink{target: target, w: stderr}, nil
	}
	// A path that is there already and is not a file is refused by what
	// it is; openAppend checks again what it opened, in case it changed.
	if fi, err := os.Stat(target); err == nil && !fi.Mode().IsRegular() {
		return nil, accessOpenError(cfg, notRegularError(target, fi.Mode()))
	}
	f, err := openAppend(target)
	if err != nil {
		return nil, accessOpenError(cfg, err)
	}
	bw := bufio.NewWriterSize(f, accessBuffer)
	return &accessSink{target: target, w: bw, file: f, buf: bw}, nil
}

func accessOpenError(cfg *config.Config, err error) error {
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

// use makes the writer write to s from now on, once the lines queued so
// far are written where they were meant to go. It closes the sink it
// replaces.
func (a *accessLog) use(s *accessSink) {
	done := make(chan struct{})
	select {
	case a.swaps <- accessSwap{sink: s, done: done}:
		<-done
	case <-a.done:
		s.close()
	}
}

// close writes what is queued, closes the sink and stops the writer.
func (a *accessLog) close() {
	select {
	case <-a.stop:
	default:
		close(a.stop)
	}
	<-a.done
}

// put hands a line to the writer, or drops it when the queue is full.
func (a *accessLog) put(b *[]byte) {
	select {
	case a.lines <- b:
	default:
		a.dropped.Add(1)
		a.metric.Inc()
		accessBufs.Put(b)
	}
}

func (a *accessLog) run() {
	defer close(a.done)
	var sink *accessSink
	for {
		select {
		case b := <-a.lines:
			a.write(sink, b)
			if len(a.lines) == 0 {
				a.flush(sink)
			}
		case sw := <-a.swaps:
			a.drain(sink)
			sink.close()
			sink = sw.sink
			close(sw.done)
		case <-a.stop:
			a.drain(sink)
			sink.close()
			return
		}
	}
}

// drain writes the lines queued now, and flushes.
func (a *accessLog) drain(sink *accessSink) {
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

func (a *accessLog) write(sink *accessSink, b *[]byte) {
	if sink != nil {
		if _, err := sink.w.Write(*b); err != nil {
			a.failed(sink, err)
		}
	}
	if cap(*b) <= 4<<10 {
		*b = (*b)[:0]
		accessBufs.Put(b)
	}
}

func (a *accessLog) flush(sink *accessSink) {
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

func (a *accessLog) failed(sink *accessSink, err error) {
	if a.errLog.allow(a.now().Unix()) {
		a.log.Error("cannot write the access log", "file", sink.target, "error", err.Error())
	}
}

func (s *accessSink) close() {
	if s != nil && s.file != nil {
		s.file.Close()
	}
}

// takeDropped returns and clears the count of lines dropped.
func (a *accessLog) takeDropped() int64 { return a.dropped.Swap(0) }

// The outcome of a request as the access log says it: what the gateway
// decided before the upstream was asked, if it was.
type accessResult uint8

const (
	resultAdmitted accessResult = iota // went upstream (or would have: the client left first)
	resultLimited                      // a limit rejected it
	resultBreaker                      // the route's open breaker turned it away
	resultNotFound
	resultBadRequest
	resultTooLarge
	resultKeyRequired
	resultLimiterUnavailable
	resultGRPCRefused // a gRPC request the route cannot take (grpc.go)
)

var accessResults = [...]string{
	resultAdmitted:           "admitted",
	resultLimited:            "limited",
	resultBreaker:            "breaker",
	resultNotFound:           "not_found",
	resultBadRequest:         "bad_request",
	resultTooLarge:           "body_too_large",
	resultKeyRequired:        "key_required",
	resultLimiterUnavailable: "limiter_unavailable",
	resultGRPCRefused:        "grpc_refused",
}

// logAccess writes the access log line of x's request, answered with o.
func (g *Gateway) logAccess(w http.ResponseWriter, x *exchange, o *outcome) {
	r, start, path := x.r, x.start, x.path
	took := g.now().Sub(start)
	client := x.client
	if !client.IsValid() {
		client, _ = x.gen.ips.Client(r.RemoteAddr, r.Header["X-Forwarded-For"])
	}
	bp := accessBufs.Get().(*[]byte)
	b := (*bp)[:0]
	b = append(b, `{"time":"`...)
	b = start.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, `","level":"INFO","msg":"access","request_id":`...)
	b = appendJSONString(b, x.rid)
	b = append(b, `,"client_ip":"`...)
	b = appendAddr(b, client)
	b = append(b, `","method":`...)
	b = appendJSONString(b, r.Method)
	b = append(b, `,"protocol":`...)
	b = appendJSONString(b, r.Proto)
	b = append(b, `,"path":`...)
	if len(path) > maxLoggedPath {
		path = path[:maxLoggedPath]
	}
	b = appendJSONString(b, path)
	if x.route != nil {
		b = append(b, `,"route":`...)
		b = appendJSONString(b, x.route.id)
	}
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(o.Status), 10)
	if x.grpc {
		// The upstream's value is logged only if it is a number.
		if gs, err := strconv.Atoi(grpcStatusOf(w.Header())); err == nil && gs >= 0 {
			b = append(b, `,"grpc_status":`...)
			b = strconv.AppendInt(b, int64(gs), 10)
		}
	}
	b = append(b, `,"duration":`...)
	b = strconv.AppendFloat(b, took.Seconds(), 'f', 6, 64)
	if n := o.sent(w); n >= 0 {
		b = append(b, `,"bytes":`...)
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, `,"outcome":"`...)
	b = append(b, accessResults[o.result]...)
	b = append(b, '"')
	if o.limit != "" {
		b = append(b, `,"limit":`...)
		b = appendJSONString(b, o.limit)
	}
	if o.Exchanged() {
		b = append(b, `,"upstream":`...)
		b = appendJSONString(b, o.Target)
		b = append(b, `,"upstream_duration":`...)
		b = strconv.AppendFloat(b, o.Took.Seconds(), 'f', 6, 64)
		if (o.Failed() || o.Err != nil && (o.End != upstream.ClientBody || o.Broken())) && !o.ClientGone() {
			b = append(b, `,"error":"`...)
			b = append(b, o.Kind()...)
			b = append(b, '"')
		}
	} else if o.Err == upstream.ErrNoTarget {
		b = append(b, `,"error":"no_healthy_target"`...)
	}
	b = append(b, "}\n"...)
	*bp = b
	g.access.put(bp)
}

// sent is the number of body bytes the response carried: the upstream's
// body as copied, or the gateway's own answer's length; -1 when it is
// not known (a switch of protocols).
func (o *outcome) sent(w http.ResponseWriter) int64 {
	if n, ok := o.Sent(); ok {
		return n
	}
	if o.Status == http.StatusSwitchingProtocols {
		return -1
	}
	if cl := w.Header()["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil {
			return n
		}
	}
	return -1
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return b
	}
	return a.AppendTo(b)
}

// appendJSONString appends s as a JSON string. Everything in it may come
// from the client: quotes, backslashes and control characters are
// escaped, and bytes that are not UTF-8 become U+FFFD, so that a line
// stays one valid JSON object.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
