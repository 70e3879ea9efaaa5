package edge

import (
	"bytes"
	"net"
	"sync"
)

// preface is what an HTTP/2 client sends first (RFC 9113 §3.4).
const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniffPreface reads from c as long as what came may be the HTTP/2
// preface, and no further: an HTTP/1.1 request that is shorter than the
// preface is not waited on. The connection returned reads again what was
// read.
func sniffPreface(c net.Conn) (net.Conn, bool) {
	buf := make([]byte, len(preface))
	n := 0
	for n < len(preface) {
		m, err := c.Read(buf[n:])
		n += m
		if !bytes.HasPrefix([]byte(preface), buf[:n]) || err != nil {
			return &sniffedConn{Conn: c, buf: buf[:n]}, false
		}
	}
	return &sniffedConn{Conn: c, buf: buf[:n]}, true
}

// A sniffedConn reads what was sniffed of its connection first.
type sniffedConn struct {
	net.Conn
	buf []byte
}

func (c *sniffedConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the connection when it can, which net/http does
// after some answers.
func (c *sniffedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// A connQueue is the listener the HTTP/1.1 server serves: the
// connections the Server's own listeners hand it, in turn.
type connQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue() *connQueue {
	return &connQueue{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// push hands c to the server; false once the queue is closed.
func (q *connQueue) push(c net.Conn) bool {
	select {
	case <-q.done:
		return false
	default:
	}
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

// Addr is no address: the connections come from several listeners.
func (q *connQueue) Addr() net.Addr { return queueAddr{} }

type queueAddr struct{}

func (queueAddr) Network() string { return "edge" }
func (queueAddr) String() string  { return "edge" }
