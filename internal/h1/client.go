// Package h1 is an HTTP/1.1 client for a program that waits for each
// answer in the goroutine that asked: a gateway's handler, a load
// generator's request.
package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// A Client sends requests over HTTP/1.1.
//
// The common exchange — a plain-http request without a body or with a
// small one of known length — goes over the client's own keep-alive
// connections: the caller's goroutine writes the request and reads the
// answer on the connection itself. http.Transport hands every exchange to
// two goroutines per connection (a writer and a reader) and back over
// channels; behind a gateway that is a quarter of the proxy's CPU for
// nothing, since the handler has nothing else to do while it waits.
// Everything else — bodies of unknown or large size (an upstream may answer
// before it has read one, and only a concurrent writer sees that answer),
// https, upgrades — goes to the fallback, an http.Transport, which handles
// those cases well.
type Client struct {
	dialer    net.Dialer
	timeout   time.Duration // for the response head; 0: none
	idleLimit time.Duration // longest an idle connection is kept
	maxIdle   int           // idle connections kept per target
	fallback  http.RoundTripper

	mu     sync.Mutex
	idle   map[string][]*upconn // by host:port, most recently used last
	pruned time.Time            // when prune last ran
}

// upconn is one keep-alive connection to an upstream.
type upconn struct {
	net.Conn
	addr   string // as dialled: the key of the idle pool
	br     *bufio.Reader
	bw     *bufio.Writer
	peek   peeker
	reused bool
	idleAt time.Time
	// budget bounds what the response head may read from the connection;
	// negative while a body is read.
	budget int
	// idle, while a body is read, bounds each wait for the upstream; 0:
	// none.
	idle time.Duration
	// wrote is set once a byte of the request is on its way, werr once
	// the connection refuses a write: a request none of which was written
	// never reached the upstream.
	wrote bool
	werr  bool
	// head keeps what the heads' reads returned: net/http drops a
	// Connection field that says close, and with it the names of the
	// other hop-by-hop fields it lists. It holds all of them, up to the
	// heads' budget (maxResponseHead): a record cut shorter than the heads
	// would lose the field of a head past its end, and the fields it names
	// would reach the caller as end-to-end ones.
	head []byte
	// shut closes the connection: made once, for each exchange's
	// context.AfterFunc, rather than a closure per exchange.
	shut func()
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
	} else if c.idle > 0 {
		// The bound is on the upstream's silence, so its clock starts when
		// the client waits for the upstream, here, and not at the caller's
		// last read: a caller slow to pass the data on (a gateway writing
		// to a slow client) would use it up meanwhile, and the next read
		// would fail at once with data waiting.
		c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
	n, err := c.Conn.Read(p)
	if c.budget >= 0 {
		c.budget -= n
		c.head = append(c.head, p[:n]...)
	}
	return n, err
}

func (c *upconn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.wrote = true
	}
	if err != nil {
		c.werr = true
	}
	return n, err
}

// Options configure a Client.
type Options struct {
	// ConnectTimeout bounds a dial; 0: none.
	ConnectTimeout time.Duration
	// HeaderTimeout bounds the wait for an answer's head after the request
	// is written; 0: none.
	HeaderTimeout time.Duration
	// MaxIdlePerHost is how many idle connections are kept per host:port;
	// 0 means 4096, enough for one per concurrent request of a busy
	// gateway.
	MaxIdlePerHost int
	// Fallback sends what the client does not (see Client); nil means a
	// clone of http.DefaultTransport.
	Fallback http.RoundTripper
}

// New returns a Client.
func New(o Options) *Client {
	if o.MaxIdlePerHost == 0 {
		o.MaxIdlePerHost = 4096
	}
	if o.Fallback == nil {
		o.Fallback = http.DefaultTransport.(*http.Transport).Clone()
	}
	return &Client{
		dialer:    net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second},
		timeout:   o.HeaderTimeout,
		idleLimit: idleLimit,
		maxIdle:   o.MaxIdlePerHost,
		fallback:  o.Fallback,
		idle:      map[string][]*upconn{},
	}
}

// idleLimit is how long an idle connection is kept: most servers close
// theirs sooner (nginx after 75 s, Go's after its IdleTimeout, Node's after
// 5 s), and one closed by the server is found out only when it is next
// used (peeked at first) or pruned.
const idleLimit = 60 * time.Second

// ErrIdle fails the read of a body whose upstream fell silent for longer
// than the idle bound given to Do.
var ErrIdle = errors.New("response body idle for too long")

// ErrRequestBody fails a request whose body could not be read: the
// caller's side broke off, not the server's.
var ErrRequestBody = errors.New("reading the request body")

// MaxInlineBody is the largest request body the client sends itself; the
// body is read whole before the request is written, so that the request
// goes in one write and can be sent again.
const MaxInlineBody = 16 << 10

// Do sends req and returns the answer. The caller reads the body to its
// end or closes it. idle bounds the upstream's silence while the body is
// read (0: no bound): each wait for more of it, not the time the caller
// takes between two reads; a body whose upstream falls silent longer fails
// with ErrIdle. interim, if not nil, is given each informational (1xx)
// answer but 101 as it arrives, before the final one; an error it returns
// fails the exchange. So does an answer with a status under 100. A request
// with a body of unknown length or over MaxInlineBody bytes, to https, or
// asking for an upgrade goes to the fallback. A request that cannot be
// written as HTTP/1.1 (checkRequest) fails with ErrInvalidRequest on
// either path, before anything is sent.
func (cl *Client) Do(req *http.Request, idle time.Duration, interim Interim) (*http.Response, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	if req.URL.Scheme != "http" || req.Header["Upgrade"] != nil ||
		req.Body != nil && req.Body != http.NoBody && (req.ContentLength <= 0 || req.ContentLength > MaxInlineBody) {
		if interim != nil {
			// The Transport calls Got1xxResponse on its own reading
			// goroutine, and reads the answers that follow until one is
			// final, whatever their number; an error from it ends the
			// exchange, and RoundTrip returns that error (wrapped).
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
					return interim(code, http.Header(h))
				},
			}))
		}
		resp, err := cl.fallback.RoundTrip(req)
		if err == nil && resp.StatusCode < 100 {
			resp.Body.Close()
			return nil, badStatus(resp.StatusCode)
		}
		return resp, err
	}
	if req.Body != nil && req.Body != http.NoBody {
		b, err := readBody(req)
		if err != nil {
			return nil, err
		}
		defer putBody(b)
		req.Body = nil
		req.GetBody = nil
		defer func() { req.Body = nil }()
		body := bytes.NewReader(b.buf)
		restore := func() {
			body.Reset(b.buf)
			req.Body = io.NopCloser(body)
		}
		restore()
		return cl.send(req, idle, restore, interim)
	}
	return cl.send(req, idle, nil, interim)
}

// ErrInvalidRequest fails a request that cannot be written as HTTP/1.1
// as it is: a method that is not a token, a field name that is not one,
// a field value with a control byte. Request.Write would write the
// method as it is into the request line, where a space in it moves the
// target the upstream reads, and a NUL in a value as it is.
var ErrInvalidRequest = errors.New("invalid request")

// checkRequest refuses what http.Transport refuses before it writes a
// request, so that both of the client's paths refuse the same: a method
// ("" is GET) or a field name that is not an RFC 9110 token, a field
// value with a control byte other than a tab (CR, LF, NUL). Request.Write
// checks Host itself.
func checkRequest(req *http.Request) error {
	if req.Method != "" && !httpguts.ValidHeaderFieldName(req.Method) {
		// A method is a token, as a field name is.
		return fmt.Errorf("%w: method %q", ErrInvalidRequest, req.Method)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("%w: field name %q", ErrInvalidRequest, k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("%w: the value of field %s", ErrInvalidRequest, k)
			}
		}
	}
	return nil
}

// Interim is told of an informational answer (103 Early Hints, say). It
// may be called on another goroutine than Do's, and, on the fallback's
// path, after Do has returned with an error (a timeout): the fallback's
// reading goroutine goes on until it finds the connection closed. An
// error it returns ends the exchange, which fails with that error: an
// upstream may send any number of informational answers, and only the
// caller knows how many it will pass on.
type Interim func(code int, h http.Header) error

// badStatus fails an answer whose status is under 100, outside every class
// of RFC 9110 §15. net/http reads "099" as 99, which is neither
// informational nor final, and which its server refuses to write (the
// handler's WriteHeader panics).
func badStatus(code int) error {
	return fmt.Errorf("upstream answered with status %03d", code)
}

// send sends req, whose body (if any) rewind sets again before a second
// attempt.
func (cl *Client) send(req *http.Request, idle time.Duration, rewind func(), interim Interim) (*http.Response, error) {
	addr := req.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "80")
	}
	for first := true; ; first = false {
		if !first && rewind != nil {
			rewind()
		}
		c, err := cl.conn(req.Context(), addr)
		if err != nil {
			if cerr := ctxErr(req.Context()); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		resp, err := cl.exchange(c, req, idle, interim)
		if err == nil {
			return resp, nil
		}
		c.Close()
		// A reused connection the upstream closed as the request went out
		// (after the peek before use) fails before any byte of the answer.
		// As http.Transport does, the request is sent again on another
		// connection when none of it was written, so that the upstream
		// cannot have seen it, or when it is safe to repeat, since the
		// upstream may have seen all or part of it. Its body, if any, is
		// held whole in memory and goes again as it went.
		if !c.reused || req.Context().Err() != nil || !errors.Is(err, errNothingRead) ||
			!errors.Is(err, errNothingWritten) && !replayable(req) {
			return nil, unwrapNothingRead(err)
		}
	}
}

// errNothingRead marks an exchange that failed before the upstream sent
// anything, errNothingWritten one that failed before any byte of the
// request went out.
var (
	errNothingRead    = errors.New("upstream closed the connection before answering")
	errNothingWritten = errors.New("connection failed before the request was written")
)

type nothingRead struct {
	err     error
	written bool // some of the request went out
}

func (e nothingRead) Error() string { return e.err.Error() }
func (e nothingRead) Unwrap() []error {
	if e.written {
		return []error{e.err, errNothingRead}
	}
	return []error{e.err, errNothingRead, errNothingWritten}
}

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

// ctxErr is ctx's error, or DeadlineExceeded once its deadline has
// passed: a dial or a read bounded by that deadline can fail a moment
// before the context's own timer marks it done, and the failure is the
// deadline's, not the server's.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

func (cl *Client) exchange(c *upconn, req *http.Request, idle time.Duration, interim Interim) (*http.Response, error) {
	ctx := req.Context()
	// A client that goes away closes the upstream connection, which ends
	// whatever read or write is waiting on it.
	stop := context.AfterFunc(ctx, c.shut)
	fail := func(err error) (*http.Response, error) {
		stop()
		if cerr := ctxErr(ctx); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}

	c.wrote, c.werr, c.idle = false, false, 0
	err := writeRequest(c.bw, req)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		if !c.werr {
			// The request's own fault (an invalid Host, say): another
			// connection would fare no better.
			return fail(err)
		}
		return fail(nothingRead{err, c.wrote})
	}
	// Always set: a reused connection may carry its last body's deadline.
	var deadline time.Time
	if cl.timeout > 0 {
		deadline = time.Now().Add(cl.timeout)
	}
	c.SetReadDeadline(deadline)
	c.budget, c.head = maxResponseHead, c.head[:0]
	if _, err := c.br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) {
			return fail(nothingRead{err, true})
		}
		return fail(err)
	}
	var resp *http.Response
	for skip := 0; ; skip++ {
		r, err := readResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		if r.StatusCode < 100 {
			return fail(badStatus(r.StatusCode))
		}
		if r.Close && r.ProtoAtLeast(1, 1) && r.Header["Connection"] == nil {
			// ReadResponse removed "Connection: close", from an interim
			// answer as from a final one; put back the field as sent,
			// for the caller to find every hop-by-hop field it names.
			r.Header["Connection"] = connectionField(c.head, skip)
		}
		// 1xx answers (100 Continue, 103 Early Hints) are interim: the
		// final answer follows on the same connection. 101 needs an
		// upgrade, which this path never asks for.
		if r.StatusCode >= 200 {
			resp = r
			break
		}
		if r.StatusCode == http.StatusSwitchingProtocols {
			return fail(fmt.Errorf("upstream switched protocols without an upgrade request"))
		}
		if interim != nil {
			if err := interim(r.StatusCode, r.Header); err != nil {
				return fail(err)
			}
		}
	}
	if cap(c.head) > 4<<10 {
		c.head = nil // a large head's record is not kept with the connection
	}
	// Each read of the body from the connection sets its own deadline
	// (upconn.Read); without one, the head's is lifted.
	c.budget, c.idle = -1, idle
	if idle == 0 && cl.timeout > 0 {
		c.SetReadDeadline(time.Time{})
	}
	resp.Body = &upbody{body: resp.Body, c: c, cl: cl, stop: stop,
		reuse: !resp.Close && !req.Close}
	return resp, nil
}

// connectionField returns the values of the Connection fields of the
// head after the first skip ones in rec, the bytes of an exchange's heads
// as they arrived, read as ReadResponse reads them. rec holds every head
// whole; should it find no field all the same, it says just "close".
func connectionField(rec []byte, skip int) []string {
	var vals []string
	inField := false // the last field line was a Connection field's
	for {
		i := bytes.IndexByte(rec, '\n')
		if i < 0 {
			break
		}
		var line []byte
		line, rec = bytes.TrimSuffix(rec[:i], []byte{'\r'}), rec[i+1:]
		if len(line) == 0 {
			if skip == 0 {
				break // the head's end
			}
			skip--
			continue
		}
		if skip > 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			// A line folded onto the field above (obs-fold, RFC 9112
			// §5.2) goes on with its value; ReadResponse joins the two
			// with a space.
			if inField {
				if v := bytes.TrimSpace(line); len(v) > 0 {
					vals[len(vals)-1] += " " + string(v)
				}
			}
			continue
		}
		name, v, ok := bytes.Cut(line, []byte{':'})
		inField = ok && bytes.EqualFold(name, []byte("Connection"))
		if inField {
			vals = append(vals, string(bytes.TrimSpace(v)))
		}
	}
	if vals == nil {
		vals = []string{"close"}
	}
	return vals
}

// Owns reports whether resp came over the client's own connections, whose
// bodies enforce the idle bound given to Do; the fallback's do not.
func Owns(resp *http.Response) bool {
	_, ok := resp.Body.(*upbody)
	return ok
}

// upbody is an answer's body; at its end the connection goes back to the
// pool.
type upbody struct {
	body  io.ReadCloser
	c     *upconn
	cl    *Client
	stop  func() bool
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
			err = ErrIdle
		}
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
func (cl *Client) conn(ctx context.Context, addr string) (*upconn, error) {
	now := time.Now()
	for {
		cl.mu.Lock()
		cs := cl.idle[addr]
		if len(cs) == 0 {
			cl.mu.Unlock()
			break
		}
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		cl.idle[addr] = cs[:len(cs)-1]
		cl.mu.Unlock()
		// The server may have closed the connection while it sat idle
		// (Node closes its idle ones after 5 s, Go's and nginx's after
		// their keep-alive timeouts; any server on a restart), and a
		// request that is not safe to send twice could not be sent again
		// on another. Or it sent something unasked, which would be read as
		// the answer to the next request. One non-blocking peek tells,
		// however short the time idle: a server that closes right after
		// its answer does so within microseconds, and the peek (one system
		// call) is cheap next to the exchange. An unasked answer that
		// arrives after the peek is one that no HTTP/1.1 client can tell
		// from the answer to its request.
		if now.Sub(c.idleAt) < cl.idleLimit && c.peek.alive() {
			return c, nil
		}
		c.Close()
	}
	nc, err := cl.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &upconn{Conn: nc, addr: addr, budget: -1}
	c.shut = func() { c.Close() }
	c.peek.init(nc)
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(c, 4<<10)
	return c, nil
}

func (cl *Client) put(c *upconn) {
	if c.br.Buffered() > 0 {
		// The upstream sent more than its answer: the connection is out of step.
		c.Close()
		return
	}
	c.reused = true
	c.idleAt = time.Now()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c.idleAt.Sub(cl.pruned) >= time.Second {
		cl.prune(c.idleAt)
	}
	if len(cl.idle[c.addr]) >= cl.maxIdle {
		c.Close()
		return
	}
	cl.idle[c.addr] = append(cl.idle[c.addr], c)
}

// prune closes the connections idle for longer than idleLimit. The most
// recently used are taken first, so after a burst the connections it
// opened would otherwise sit at the bottom of the pool, each holding a
// socket the upstream has long closed. Each pool is in the order its
// connections went idle, oldest first.
func (cl *Client) prune(now time.Time) {
	cl.pruned = now
	for addr, cs := range cl.idle {
		n := 0
		for n < len(cs) && now.Sub(cs[n].idleAt) >= cl.idleLimit {
			cs[n].Close()
			cs[n] = nil
			n++
		}
		if n == len(cs) {
			delete(cl.idle, addr)
		} else if n > 0 {
			cl.idle[addr] = append(cs[:0], cs[n:]...)
		}
	}
}

// CloseIdle closes the idle connections; the client stays usable.
func (cl *Client) CloseIdle() {
	cl.mu.Lock()
	idle := cl.idle
	cl.idle = map[string][]*upconn{}
	cl.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.Close()
		}
	}
	if f, ok := cl.fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

type bodyBuf struct{ buf []byte }

var bodyBufs = sync.Pool{New: func() any { return &bodyBuf{buf: make([]byte, 0, MaxInlineBody)} }}

// readBody reads a request body of known length, at most MaxInlineBody.
func readBody(req *http.Request) (*bodyBuf, error) {
	b := bodyBufs.Get().(*bodyBuf)
	b.buf = b.buf[:req.ContentLength]
	_, err := io.ReadFull(req.Body, b.buf)
	req.Body.Close()
	if err != nil {
		putBody(b)
		return nil, fmt.Errorf("%w: %w", ErrRequestBody, err)
	}
	return b, nil
}

func putBody(b *bodyBuf) { bodyBufs.Put(b) }
