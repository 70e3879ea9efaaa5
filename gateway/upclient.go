package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

// client sends requests to upstreams over HTTP/1.1.
//
// The common exchange — a plain-http request without a body — goes over
// the client's own keep-alive connections: the handler's goroutine writes
// the request and reads the answer on the connection itself. http.Transport
// hands every exchange to two goroutines per connection (a writer and a
// reader) and back over channels; behind a gateway that is a quarter of
// the proxy's CPU for nothing, since the handler has nothing else to do
// while it waits. Everything else — request bodies (an upstream may answer
// before it has read one, and only a concurrent writer sees that answer),
// https targets, upgrades — goes through http.Transport, which handles
// those cases well.
type client struct {
	dialer    net.Dialer
	timeout   time.Duration // for the response head; 0: none
	idleLimit time.Duration // longest an idle connection is kept
	maxIdle   int           // idle connections kept per target
	fallback  *http.Transport

	mu   sync.Mutex
	idle map[string][]*upconn // by host:port, most recently used last
}

// upconn is one keep-alive connection to an upstream.
type upconn struct {
	net.Conn
	addr   string // as dialled: the key of the idle pool
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool
	idleAt time.Time
	// budget bounds what the response head may read from the connection;
	// negative while a body is read.
	budget int
}

// maxResponseHead bounds an upstream's status line and headers, as
// http.Transport's MaxResponseHeaderBytes does.
const maxResponseHead = 1 << 20

var errHeadTooLarge = errors.New("upstream response headers exceed 1 MiB")

func (c *upconn) Read(p []byte) (int, error) {
	if c.budget >= 0 {
		if c.budget == 0 {
			return 0, errHeadTooLarge
		}
		p = p[:min(len(p), c.budget)]
	}
	n, err := c.Conn.Read(p)
	if c.budget >= 0 {
		c.budget -= n
	}
	return n, err
}

func newClient(o upstreamOptions) *client {
	return &client{
		dialer:    net.Dialer{Timeout: o.connectTimeout, KeepAlive: 30 * time.Second},
		timeout:   o.timeout,
		idleLimit: 90 * time.Second,
		maxIdle:   4096,
		fallback:  newTransport(o),
		idle:      map[string][]*upconn{},
	}
}

// do sends req and returns the upstream's answer. The caller reads the
// body to its end or closes it. idle bounds the silence between two reads
// of the body (0: no bound); a body that falls silent longer fails with
// errIdle.
func (cl *client) do(req *http.Request, idle time.Duration) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Body != nil || req.Header["Upgrade"] != nil {
		return cl.fallback.RoundTrip(req)
	}
	addr := req.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "80")
	}
	for {
		c, err := cl.conn(req.Context(), addr)
		if err != nil {
			return nil, err
		}
		resp, err := cl.exchange(c, req, idle)
		if err == nil {
			return resp, nil
		}
		c.Close()
		// A reused connection the upstream closed while it sat idle fails
		// before any byte of the answer; the request never reached the
		// application, so it is sent again on another connection, as
		// http.Transport does for requests that are safe to repeat.
		if !c.reused || !errors.Is(err, errNothingRead) || req.Context().Err() != nil || !replayable(req) {
			return nil, unwrapNothingRead(err)
		}
	}
}

// errNothingRead marks an exchange that failed before the upstream sent
// anything.
var errNothingRead = errors.New("upstream closed the connection before answering")

type nothingRead struct{ err error }

func (e nothingRead) Error() string   { return e.err.Error() }
func (e nothingRead) Unwrap() []error { return []error{e.err, errNothingRead} }

func unwrapNothingRead(err error) error {
	if nr, ok := err.(nothingRead); ok {
		return nr.err
	}
	return err
}

// replayable reports a request that may be sent twice (RFC 9110 §9.2.2),
// as http.Transport judges it.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header["Idempotency-Key"] != nil || req.Header["X-Idempotency-Key"] != nil
}

func (cl *client) exchange(c *upconn, req *http.Request, idle time.Duration) (*http.Response, error) {
	ctx := req.Context()
	// A client that goes away closes the upstream connection, which ends
	// whatever read or write is waiting on it.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}

	if err := req.Write(c.bw); err != nil {
		return fail(nothingRead{err})
	}
	if err := c.bw.Flush(); err != nil {
		return fail(nothingRead{err})
	}
	// Always set: a reused connection may carry its last body's deadline.
	var deadline time.Time
	if cl.timeout > 0 {
		deadline = time.Now().Add(cl.timeout)
	}
	c.SetReadDeadline(deadline)
	c.budget = maxResponseHead
	if _, err := c.br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
			return fail(nothingRead{err})
		}
		return fail(err)
	}
	var resp *http.Response
	for {
		r, err := http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		// 1xx answers (100 Continue, 103 Early Hints) are interim: the
		// final answer follows on the same connection. 101 needs an
		// upgrade, which this path never asks for.
		if r.StatusCode >= 200 || r.StatusCode < 100 {
			resp = r
			break
		}
		if r.StatusCode == http.StatusSwitchingProtocols {
			return fail(fmt.Errorf("upstream switched protocols without an upgrade request"))
		}
	}
	c.budget = -1
	deadline = time.Time{}
	if idle > 0 {
		deadline = time.Now().Add(idle)
	}
	c.SetReadDeadline(deadline)
	resp.Body = &upbody{body: resp.Body, c: c, cl: cl, stop: stop, idle: idle,
		reuse: !resp.Close && !req.Close}
	return resp, nil
}

// upbody is an answer's body; at its end the connection goes back to the
// pool.
type upbody struct {
	body  io.ReadCloser
	c     *upconn
	cl    *client
	stop  func() bool
	idle  time.Duration
	reuse bool
	done  bool
}

func (b *upbody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF:
		b.finish(b.reuse)
	case err != nil:
		b.finish(false)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = errIdle
		}
	case b.idle > 0:
		b.c.SetReadDeadline(time.Now().Add(b.idle))
	}
	return n, err
}

// Close ends the exchange; a body not read to its end leaves the
// connection in the middle of an answer, so the connection is closed.
func (b *upbody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *upbody) finish(reuse bool) {
	b.done = true
	// stop fails when the client went away and the connection is closed
	// already.
	if b.stop() && reuse {
		b.cl.put(b.c)
		return
	}
	b.c.Close()
}

// conn returns an idle connection to addr or dials one.
func (cl *client) conn(ctx context.Context, addr string) (*upconn, error) {
	now := time.Now()
	cl.mu.Lock()
	for cs := cl.idle[addr]; len(cs) > 0; cs = cl.idle[addr] {
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		cl.idle[addr] = cs[:len(cs)-1]
		if now.Sub(c.idleAt) < cl.idleLimit {
			cl.mu.Unlock()
			return c, nil
		}
		c.Close()
	}
	cl.mu.Unlock()
	nc, err := cl.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &upconn{Conn: nc, addr: addr}
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(nc, 4<<10)
	return c, nil
}

func (cl *client) put(c *upconn) {
	if c.br.Buffered() > 0 {
		// The upstream sent more than its answer: the connection is out of step.
		c.Close()
		return
	}
	c.reused = true
	c.idleAt = time.Now()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if len(cl.idle[c.addr]) >= cl.maxIdle {
		c.Close()
		return
	}
	cl.idle[c.addr] = append(cl.idle[c.addr], c)
}

// closeIdle closes the idle connections; the client stays usable.
func (cl *client) closeIdle() {
	cl.mu.Lock()
	idle := cl.idle
	cl.idle = map[string][]*upconn{}
	cl.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.Close()
		}
	}
	cl.fallback.CloseIdleConnections()
}
