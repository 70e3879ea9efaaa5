package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/httplimit"
)

// Listener returns ln with the answers net/http makes itself made the
// gateway's. net/http refuses some requests before any handler sees them
// — headers over server.max_header_bytes (431), a malformed request line
// or header field (400), a transfer coding it does not know (501), an
// HTTP version it does not speak (505) — and answers them in plain text.
// Through this listener they get the JSON answer of SPEC §4.2 instead,
// with a request id: 431 headers_too_large, the others bad_request with
// their own status. They count in the metrics of no route.
func (g *Gateway) Listener(ln net.Listener) net.Listener { return &answeringListener{ln, g} }

type answeringListener struct {
	net.Listener
	g *Gateway
}

func (l *answeringListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &answeringConn{Conn: c, g: l.g}, nil
}

// answeringConn replaces a write of net/http's own error answer with the
// gateway's. net/http writes that answer in one write straight to the
// connection, a status line followed by exactly plainErrorHead; an answer
// of a handler's never has that head (net/http sorts the fields, so
// Connection comes before Content-Type, and adds Date and
// Content-Length).
type answeringConn struct {
	net.Conn
	g *Gateway
}

// plainErrorHead is what follows the status line of net/http's own error
// answers (net/http/server.go, errorHeaders).
var plainErrorHead = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

func (c *answeringConn) Write(p []byte) (int, error) {
	if status := plainErrorStatus(p); status != 0 {
		if _, err := c.Conn.Write(c.g.protocolAnswer(status)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CloseWrite lets net/http half-close the connection after a 431, so that
// the client reads the answer before the connection goes.
func (c *answeringConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// plainErrorStatus is the status of p if p is net/http's own error answer,
// else 0.
func plainErrorStatus(p []byte) int {
	const prefix = "HTTP/1.1 "
	if len(p) < len(prefix)+4 || p[len(prefix)] < '4' || p[len(prefix)] > '5' || string(p[:len(prefix)]) != prefix {
		return 0
	}
	line := bytes.IndexByte(p, '\r')
	if line < 0 || !bytes.HasPrefix(p[line:], plainErrorHead) {
		return 0
	}
	status, err := strconv.Atoi(string(p[len(prefix) : len(prefix)+3]))
	if err != nil {
		return 0
	}
	return status
}

// protocolAnswer is the whole HTTP answer to a request net/http refused
// with status.
func (g *Gateway) protocolAnswer(status int) []byte {
	rt := g.rt.Load()
	a := rt.headersTooLarge
	if status != http.StatusRequestHeaderFieldsTooLarge {
		a = httplimit.NewAnswer(status, config.CodeBadRequest, rt.cfg.Message(config.CodeBadRequest))
	}
	rid := g.ids.Next()
	body := a.Body(rid, "")
	h := http.Header{
		"Content-Type":   {"application/json"},
		"Cache-Control":  {"no-store"},
		"Content-Length": {strconv.Itoa(len(body))},
		rt.ridHeader:     {rid},
	}
	resp := &http.Response{
		StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Header: h, Close: true,
		ContentLength: int64(len(body)), Body: io.NopCloser(bytes.NewReader(body)),
	}
	var b bytes.Buffer
	resp.Write(&b)
	rt.noRoute.count(status)
	return b.Bytes()
}
