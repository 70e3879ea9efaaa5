package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	nettextproto "net/textproto"
	"net/url"
	"sync"
	"time"

	"github.com/floodgate-gw/floodgate/internal/h1"
)

// h2Client speaks HTTP/2 to the targets: h2c (prior knowledge, in clear)
// to http:// ones, h2 (TLS, ALPN h2) to https:// ones. Its
// http.Transport, with HTTP/2 alone enabled, multiplexes every request to
// a target over one connection (more when the target's stream limit is
// reached).
//
// The Transport has no bound on the wait for an answer's head that
// covers a gRPC request's grpc-timeout as well as upstream.timeout, nor
// one on a request's whole exchange, which the grpc-timeout is; Do puts
// both on the request's context.
type h2Client struct {
	t       *http.Transport
	timeout time.Duration // until the response head
	// notHTTP2 holds, by host:port, why the last connection to a target
	// failed because it did not speak HTTP/2 (errNotHTTP2), until one
	// does. The Transport may fail the requests that waited for such a
	// connection with an error of its own that does not say why.
	notHTTP2 sync.Map
}

// newH2Client returns the client of protocol h2c (tlsc nil) or h2.
func newH2Client(connectTimeout, timeout time.Duration, tlsc *tls.Config) *h2Client {
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	var p http.Protocols
	t := &http.Transport{
		Protocols: &p,
		// Bodies pass through as they are, as on HTTP/1.1.
		DisableCompression: true,
		// An idle connection closes as the HTTP/1.1 client's do.
		IdleConnTimeout: 90 * time.Second,
		// A connection that stops answering (a target gone without a
		// reset) is found by a ping after 30 s of silence, and closed
		// when the ping goes 15 s unanswered, failing its streams.
		//
		// An answer's stream may hold H2StreamWindow bytes the client has
		// not taken yet, where the Transport's default, 4 MiB, let each
		// client that stops reading pin that much in the gateway. The
		// connection's window stays the Transport's (1 GiB): a stalled
		// stream holds its own window's worth of it and no more, so the
		// other streams on the connection go on.
		HTTP2: &http.HTTP2Config{
			SendPingTimeout:           30 * time.Second,
			PingTimeout:               15 * time.Second,
			MaxReceiveBufferPerStream: H2StreamWindow,
		},
	}
	if tlsc == nil {
		p.SetUnencryptedHTTP2(true)
		hc := &h2Client{t: t, timeout: timeout}
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &h2cConn{Conn: c, addr: addr, client: hc}, nil
		}
		return hc
	}
	p.SetHTTP2(true)
	hc := &h2Client{t: t, timeout: timeout}
	t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		cfg := tlsc.Clone()
		if host, _, err := net.SplitHostPort(addr); err == nil && cfg.ServerName == "" {
			cfg.ServerName = host
		}
		// http/1.1 is offered beside h2 so that a target that speaks
		// only HTTP/1.1 completes the handshake and says so, rather
		// than failing it with an alert that names no protocol.
		cfg.NextProtos = []string{"h2", "http/1.1"}
		c, err := (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
			c.Close()
			if p == "" {
				p = "no protocol"
			}
			err := fmt.Errorf("%w: TLS negotiated %s, not h2 (ALPN)", errNotHTTP2, p)
			hc.notHTTP2.Store(addr, err)
			return nil, err
		}
		hc.notHTTP2.Delete(addr)
		return c, nil
	}
	return hc
}

// H2StreamWindow is how much of an answer's body the gateway takes from
// an HTTP/2 target ahead of the client: the stream's flow-control window.
const H2StreamWindow = 256 << 10

// errNotHTTP2 fails an exchange with a target of protocol h2c or h2 that
// answered in another protocol, HTTP/1.1 mostly.
var errNotHTTP2 = errors.New("the target did not speak HTTP/2")

// h2cConn is a connection to an h2c target. The target's first bytes,
// which HTTP/2 makes a SETTINGS frame, are checked for another protocol's
// answer: an HTTP/1 status line (a 400 or 505 to the HTTP/2 preface), or
// the bare error page some servers send to a request line of a version
// they do not know. The Transport would read them as a frame and fail
// with a framing error ("frame too large") that does not say what
// happened.
type h2cConn struct {
	net.Conn
	addr    string
	client  *h2Client
	checked bool
	ahead   []byte // read while checking, not yet returned
}

func (c *h2cConn) Read(p []byte) (int, error) {
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
	if c.checked {
		return c.Conn.Read(p)
	}
	c.checked = true
	var head [frameHeaderLen]byte
	n, err := io.ReadAtLeast(c.Conn, head[:], len(head))
	if n == 0 {
		return 0, err
	}
	if !settingsHead(head[:n]) {
		got := head[:n]
		if err == nil {
			// More of the answer, for the error to quote its first line.
			more := make([]byte, 64)
			c.Conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			m, _ := io.ReadAtLeast(c.Conn, more, len(more))
			c.Conn.SetReadDeadline(time.Time{})
			got = append(got, more[:m]...)
		}
		line, _, _ := bytes.Cut(got, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		err := fmt.Errorf("%w: it answered the HTTP/2 preface with %q", errNotHTTP2, line[:min(len(line), 64)])
		c.client.notHTTP2.Store(c.addr, err)
		return 0, err
	}
	c.client.notHTTP2.Delete(c.addr)
	c.ahead = append([]byte(nil), head[:n]...)
	m := copy(p, c.ahead)
	c.ahead = c.ahead[m:]
	if len(c.ahead) == 0 {
		return m, err
	}
	return m, nil
}

// frameHeaderLen is the size of an HTTP/2 frame's header.
const frameHeaderLen = 9

// settingsHead reports whether b, a target's first bytes, is the header
// of a SETTINGS frame on stream 0, which an HTTP/2 server's connection
// preface begins with. Fewer bytes than a header, the target's whole
// answer, are not.
func settingsHead(b []byte) bool {
	if len(b) != frameHeaderLen {
		return false
	}
	// length (3 bytes, a multiple of 6 entries of 6 bytes), type 4,
	// flags, stream 0 (31 bits, the top one reserved).
	want := [frameHeaderLen]byte{3: 0x4}
	mask := [frameHeaderLen]byte{3: 0xff, 5: 0x7f, 6: 0xff, 7: 0xff, 8: 0xff}
	for i := range b {
		if b[i]&mask[i] != want[i] {
			return false
		}
	}
	return (int(b[0])<<16|int(b[1])<<8|int(b[2]))%6 == 0
}

// headTimeout fails an exchange whose answer's head did not come in time
// (upstream.timeout, or a gRPC request's grpc-timeout): a net.Error that
// times out, which classify answers 504 (gRPC: DEADLINE_EXCEEDED). grpc
// says it was the grpc-timeout: the client's deadline, not the upstream's
// fault.
type headTimeout struct {
	after time.Duration
	grpc  bool
}

func (e headTimeout) Error() string {
	return fmt.Sprintf("no answer from the upstream within %v", e.after)
}
func (headTimeout) Timeout() bool   { return true }
func (headTimeout) Temporary() bool { return false }

// errGRPCDeadline ends an exchange when a gRPC request's grpc-timeout
// runs out.
var errGRPCDeadline = errors.New("the gRPC request's grpc-timeout ran out")

// Do sends req over HTTP/2. idle bounds nothing here: copyBody bounds the
// silence of bodies it does not own. The answer's head must come within
// the client's timeout, or a gRPC request's grpc-timeout if that is
// sooner; the grpc-timeout then bounds the body too.
func (c *h2Client) Do(req *http.Request, idle time.Duration, interim h1.Interim) (*http.Response, error) {
	head, whole := c.timeout, time.Duration(0)
	if gt, ok := grpcTimeout(req.Header); ok {
		gt = max(gt, time.Nanosecond) // "0n": out already
		whole = gt
		if head <= 0 || gt < head {
			head = gt
		}
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	if interim != nil {
		// As on h1.Client's fallback: called on the Transport's reading
		// goroutine, which may outlive Do.
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h nettextproto.MIMEHeader) error {
				return interim(code, http.Header(h))
			},
		})
	}
	var headTimer *time.Timer
	if head > 0 {
		ht := headTimeout{after: head, grpc: whole > 0 && head == whole}
		headTimer = time.AfterFunc(head, func() { cancel(ht) })
	}
	start := time.Now()
	resp, err := c.t.RoundTrip(req.WithContext(ctx))
	if headTimer != nil && !headTimer.Stop() {
		// The head came as the timer fired: the context is cancelled,
		// and with it the body. The timer's function runs on a goroutine
		// of its own, which may not have cancelled it yet.
		if err == nil {
			resp.Body.Close()
		}
		<-ctx.Done()
		err = context.Cause(ctx)
	}
	if err != nil {
		var ht headTimeout
		switch {
		case errors.As(context.Cause(ctx), &ht):
			err = ht
		case isDial(err), errors.Is(err, errNotHTTP2):
		case c.notHTTP2For(req.URL) != nil:
			err = c.notHTTP2For(req.URL)
		case whole > 0 && time.Since(start) >= whole-whole/10:
			// The upstream was passed the grpc-timeout too, and a
			// grpc-go server resets the stream when it runs out: at
			// the same moment as the gateway's timer, give or take the
			// scheduler, and sometimes first. A failure in the last
			// tenth of the call's time is taken as the deadline's.
			err = headTimeout{after: whole, grpc: true}
		}
		cancel(nil)
		return nil, err
	}
	if resp.StatusCode < 100 {
		resp.Body.Close()
		cancel(nil)
		return nil, fmt.Errorf("upstream answered with status %03d", resp.StatusCode)
	}
	b := &h2Body{ReadCloser: resp.Body, cancel: cancel, ctx: ctx, start: start, whole: whole}
	if whole > 0 {
		b.deadline = time.AfterFunc(whole-time.Since(start), func() { cancel(errGRPCDeadline) })
	}
	resp.Body = b
	return resp, nil
}

// notHTTP2For is why the last connection to u's host failed for not
// speaking HTTP/2, or nil.
func (c *h2Client) notHTTP2For(u *url.URL) error {
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	if v, ok := c.notHTTP2.Load(addr); ok {
		return v.(error)
	}
	return nil
}

// CloseIdle closes the connections no exchange is using.
func (c *h2Client) CloseIdle() { c.t.CloseIdleConnections() }

// h2Body is an answer's body; closing it ends the exchange's context.
type h2Body struct {
	io.ReadCloser
	ctx      context.Context
	cancel   context.CancelCauseFunc
	deadline *time.Timer // the grpc-timeout's; nil: none
	start    time.Time   // when the exchange began, on the wall clock
	whole    time.Duration
	once     sync.Once
}

func (b *h2Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && (errors.Is(context.Cause(b.ctx), errGRPCDeadline) || b.nearDeadline()) {
		// A failure in the last tenth of the call's time is taken as the
		// deadline's, as in Do: the upstream was passed the grpc-timeout
		// and may reset the stream a moment before the gateway's timer.
		err = errGRPCDeadline
	}
	return n, err
}

// nearDeadline reports an exchange with a grpc-timeout that is (all but)
// spent: what goes wrong now may be the client's deadline, which the
// upstream keeps too.
func (b *h2Body) nearDeadline() bool {
	return b.whole > 0 && time.Since(b.start) >= b.whole-b.whole/10
}

func (b *h2Body) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		if b.deadline != nil {
			b.deadline.Stop()
		}
		b.cancel(nil)
	})
	return err
}

// grpcTimeout reads a gRPC request's grpc-timeout: at most 8 digits and a
// unit, H, M, S, m (milli), u (micro) or n (nano). ok is false when there
// is none or it is malformed.
func grpcTimeout(h http.Header) (d time.Duration, ok bool) {
	vv := h["Grpc-Timeout"]
	if len(vv) == 0 {
		return 0, false
	}
	return ParseGRPCTimeout(vv[0])
}

// ParseGRPCTimeout reads a grpc-timeout value, as grpcTimeout does.
func ParseGRPCTimeout(s string) (time.Duration, bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	var unit time.Duration
	switch s[len(s)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	var n int64
	for i := 0; i < len(s)-1; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	// 99999999 hours is past what a Duration holds.
	if maxN := int64(1<<63-1) / int64(unit); n > maxN {
		return time.Duration(1<<63 - 1), true
	}
	return time.Duration(n) * unit, true
}
