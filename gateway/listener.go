package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/framing"
)

// Listener returns ln with the answers net/http makes itself made the
// gateway's, and sets srv up to tell them apart; srv is to serve the
// listener returned, with the gateway as its handler. net/http refuses some
// requests before any handler sees them — headers over
// server.max_header_bytes (431), a malformed request line or header field
// (400), a transfer coding it does not know (501), an HTTP version it does
// not speak (505), an expectation other than 100-continue (417) — and
// answers them in plain text or with an empty body. Through this listener
// they get the gateway's JSON answer instead (an answer.Answer, like
// every answer the gateway makes itself), with a request id: 431
// headers_too_large, the others bad_request with their own status. They
// count in the metrics of no route.
//
// The listener knows such an answer by the state of its connection, not
// by its bytes, which a proxied body or a joined connection may repeat:
// it is a 4xx or 5xx that net/http writes while no request of the
// connection is in the gateway's handler. srv's ConnContext makes the
// connection known to the handler, which marks it as handling a request
// (ServeHTTP); its ConnState clears the mark once the answer is out (the
// connection is idle again). A connection taken over (a switch of
// protocols) keeps its mark for good: StateHijacked is the last state
// net/http gives it. Hooks srv already has run too: the one for
// ConnContext before, the one for ConnState after.
//
// The listener's connections also pass their requests through a
// framing.Conn, which refuses any whose framing is in doubt (see
// docs/framing.md), told by ConnState when a request was answered and when
// a connection switched protocols.
func (g *Gateway) Listener(srv *http.Server, ln net.Listener) net.Listener {
	connContext, connState := srv.ConnContext, srv.ConnState
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if ac, ok := c.(*answeringConn); ok {
			ctx = context.WithValue(ctx, connKey{}, ac)
		}
		return ctx
	}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if ac, ok := c.(*answeringConn); ok {
			switch st {
			case http.StateIdle:
				ac.handled.Store(false)
				ac.framing.Answered()
			case http.StateHijacked:
				ac.framing.Switched()
			}
		}
		if connState != nil {
			connState(c, st)
		}
	}
	maxHead := srv.MaxHeaderBytes
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	return &answeringListener{ln, g, maxHead}
}

type answeringListener struct {
	net.Listener
	g       *Gateway
	maxHead int
}

func (l *answeringListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	fc := framing.NewConn(c, l.maxHead)
	return &answeringConn{Conn: fc, framing: fc, g: l.g}, nil
}

// answeringConn replaces a write of net/http's own error answer with the
// gateway's. net/http writes that answer in one write, status line first,
// and closes the connection after it.
type answeringConn struct {
	net.Conn
	framing *framing.Conn // the Conn's own reads
	g       *Gateway
	// handled is set while a request of the connection is in the
	// gateway's handler and until its answer is out, and for good once
	// the connection is taken over.
	handled atomic.Bool
	// answered is set once net/http wrote one of its own error answers,
	// after which it closes the connection.
	answered atomic.Bool
}

// connKey is the request context's key of the request's answeringConn.
type connKey struct{}

// markHandled marks r's connection as handling a request: what is written
// to it until it goes idle is the handler's answer.
func markHandled(r *http.Request) {
	if ac, ok := r.Context().Value(connKey{}).(*answeringConn); ok {
		ac.handled.Store(true)
	}
}

func (c *answeringConn) Write(p []byte) (int, error) {
	if c.handled.Load() {
		return c.Conn.Write(p)
	}
	if status := errorStatus(p); status != 0 {
		if e := c.framing.Refused(); e != nil {
			// net/http's 400 stands for what the framing refused.
			status = e.Status
			c.g.logRefused(c.RemoteAddr(), e)
		}
		c.answered.Store(true)
		if _, err := c.Conn.Write(c.g.protocolAnswer(status)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// The lingering close of a connection net/http answered with an error.
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 1 << 20
)

// Close closes the connection. After one of net/http's own error answers,
// the client may still be sending what was refused (a head too large, a
// body): closing with it unread would send a reset, which can destroy the
// answer before the client reads it. So the connection is half-closed
// first, and what the client still sends is read and dropped for a short
// time, as nginx's lingering close does.
func (c *answeringConn) Close() error {
	if c.answered.Load() && !c.handled.Load() {
		if c.framing.CloseWrite() == nil {
			// On the wall clock, as every deadline of a connection.
			c.Conn.SetReadDeadline(time.Now().Add(lingerTime))
			io.CopyN(io.Discard, c.Conn, lingerBytes)
		}
	}
	return c.Conn.Close()
}

// CloseWrite lets net/http half-close the connection after a 431, so that
// the client reads the answer before the connection goes.
func (c *answeringConn) CloseWrite() error { return c.framing.CloseWrite() }

// logRefused counts a request refused for its framing and logs it, a few
// lines a second.
func (g *Gateway) logRefused(peer net.Addr, e *framing.Error) {
	g.metrics.framingRefused.WithLabelValues(e.Reason).Inc()
	if g.framingLog.Allow(g.now().Unix()) {
		g.log.Warn("request refused: its framing is in doubt", "reason", e.Reason, "status", e.Status, "peer", peer.String())
	}
}

// errorStatus is the status of p if p begins with the status line of a
// 4xx or 5xx answer, else 0. net/http writes its own errors as HTTP/1.1,
// and the 417 in the request's version.
func errorStatus(p []byte) int {
	if len(p) < 13 || !bytes.HasPrefix(p, []byte("HTTP/1.")) || p[7] != '0' && p[7] != '1' || p[8] != ' ' || p[12] != ' ' {
		return 0
	}
	status, err := strconv.Atoi(string(p[9:12]))
	if err != nil || status < 400 || status > 599 {
		return 0
	}
	return status
}

// protocolAnswer is the whole HTTP answer to a request net/http refused
// with status.
func (g *Gateway) protocolAnswer(status int) []byte {
	gen := g.gen.Load()
	a := gen.headersTooLarge
	if status != http.StatusRequestHeaderFieldsTooLarge {
		a = answer.NewAnswer(status, config.CodeBadRequest, gen.cfg.Message(config.CodeBadRequest))
	}
	rid := g.ids.Next()
	body := a.Body(rid, "")
	h := http.Header{
		"Date":        {g.now().UTC().Format(http.TimeFormat)},
		gen.ridHeader: {rid},
	}
	answer.SetAnswerHeaders(h, len(body))
	resp := &http.Response{
		StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Header: h, Close: true,
		ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body)),
	}
	var b bytes.Buffer
	resp.Write(&b)
	gen.noRoute.count(status)
	return b.Bytes()
}
