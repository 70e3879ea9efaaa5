// Package edge serves the gateway's listeners: HTTP/1.1 in clear and over
// TLS, HTTP/2 over TLS (by ALPN) and, when asked, HTTP/2 in clear with
// prior knowledge (h2c).
//
// Every HTTP/1.1 connection, in clear or over TLS, reaches one
// http.Server through the listener the gateway wraps (gateway.Listener),
// so that its framing checks see the plaintext; net/http does no TLS of
// its own. The TLS handshake is done here, each in its own goroutine
// with a deadline, and what it negotiated picks the protocol: "h2" goes
// to the HTTP/2 server, anything else to the HTTP/1.1 one. HTTP/2 is
// framed by its own binary protocol and does not pass the HTTP/1.1
// framing checks; net/http's own HTTP/2 server serves it, with its limits
// on streams, frames and headers, and its defence against streams reset
// as soon as opened (CVE-2023-44487).
package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Options are what a Server serves and how.
type Options struct {
	// HTTP is the HTTP/1.1 server, set up but not serving.
	HTTP *http.Server

	// Listener wraps the listener that HTTP serves (gateway.Listener);
	// nil: none.
	Listener func(srv *http.Server, ln net.Listener) net.Listener

	// HTTP2 is the HTTP/2 server, set up but not serving: its handler,
	// its HTTP2 limits, its MaxHeaderBytes for the header list. Its
	// Protocols are set here.
	HTTP2 *http.Server

	// HandshakeTimeout bounds a TLS handshake, and the wait for the
	// first bytes of a connection on a listener that speaks h2c.
	HandshakeTimeout time.Duration

	// Log gets what fails on a connection before it has a request.
	Log *slog.Logger

	// HandshakeFailed, if not nil, is told of each TLS handshake that
	// failed or ran out of time.
	HandshakeFailed func()
}

// A Server serves one HTTP/1.1 server and one HTTP/2 server on any
// number of listeners.
type Server struct {
	srv     *http.Server
	h2      *http.Server
	timeout time.Duration
	log     *slog.Logger
	failed  func()     // Options.HandshakeFailed, never nil
	queue   *connQueue // of srv
	queue2  *connQueue // of h2
	serving chan error // what srv.Serve and h2.Serve return

	baseCtx context.Context
	cancel  context.CancelFunc

	mu       sync.Mutex
	closing  bool
	lns      map[net.Listener]struct{}
	pending  map[net.Conn]struct{} // in handshake, or being sniffed
	tlsState sync.Map              // connection key -> *tls.ConnectionState, until net/http takes the connection
}

// New sets up a Server and starts its HTTP/1.1 and HTTP/2 servers, which
// serve the connections the listeners hand them.
func New(o Options) *Server {
	s := &Server{
		srv:     o.HTTP,
		h2:      o.HTTP2,
		timeout: o.HandshakeTimeout,
		log:     o.Log,
		failed:  o.HandshakeFailed,
		serving: make(chan error, 2),
		lns:     map[net.Listener]struct{}{},
		pending: map[net.Conn]struct{}{},
	}
	if s.timeout <= 0 {
		s.timeout = 10 * time.Second
	}
	if s.failed == nil {
		s.failed = func() {}
	}
	s.baseCtx, s.cancel = context.WithCancel(context.Background())
	s.queue, s.queue2 = newConnQueue(), newConnQueue()

	srv := s.srv
	handler := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// net/http sets r.TLS only for a connection that is a
		// *tls.Conn; over TLS, the HTTP/1.1 server reads a wrapped one.
		if r.TLS == nil {
			if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
				r.TLS = st
			}
		}
		handler.ServeHTTP(w, r)
	})
	connContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if st, ok := s.tlsState.LoadAndDelete(connID(c)); ok {
			ctx = context.WithValue(ctx, tlsStateKey{}, st)
		}
		return ctx
	}
	// The HTTP/2 server is handed connections past their TLS handshake,
	// which it does not repeat, and, in clear, connections that begin
	// with the preface.
	var p http.Protocols
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	s.h2.Protocols = &p

	var ln net.Listener = s.queue
	if o.Listener != nil {
		ln = o.Listener(srv, ln)
	}
	go func() { s.serving <- srv.Serve(ln) }()
	go func() { s.serving <- s.h2.Serve(s.queue2) }()
	return s
}

type tlsStateKey struct{}

// connID names a connection among the open ones: its two ends.
func connID(c net.Conn) string { return c.LocalAddr().String() + " " + c.RemoteAddr().String() }

// ServeClear serves HTTP/1.1 on ln and, with h2c, HTTP/2 with prior
// knowledge, until the Server shuts down (http.ErrServerClosed) or ln
// fails.
func (s *Server) ServeClear(ln net.Listener, h2c bool) error {
	return s.serve(ln, func(c net.Conn) {
		if !h2c {
			s.toHTTP1(c, nil)
			return
		}
		go s.sniff(c)
	})
}

// ServeTLS serves HTTPS on ln with the config cfg: HTTP/2 to clients
// that ask for it by ALPN, HTTP/1.1 to the others.
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	return s.serve(ln, func(c net.Conn) { go s.handshake(c, cfg) })
}

func (s *Server) serve(ln net.Listener, handle func(net.Conn)) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				// Out of file descriptors, or the like: wait, as
				// net/http does, rather than spin.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accepting a connection failed; retrying", "error", err.Error(), "in", backoff.String())
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		handle(c)
	}
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// track adds c to set while the Server is open; false, with c closed,
// once it shuts down.
func (s *Server) track(set map[net.Conn]struct{}, c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		c.Close()
		return false
	}
	set[c] = struct{}{}
	return true
}

func (s *Server) untrack(set map[net.Conn]struct{}, c net.Conn) {
	s.mu.Lock()
	delete(set, c)
	s.mu.Unlock()
}

// handshake does the TLS handshake of c and hands the connection to the
// server of the protocol it negotiated.
func (s *Server) handshake(c net.Conn, cfg *tls.Config) {
	if !s.track(s.pending, c) {
		return
	}
	tc := tls.Server(c, cfg)
	c.SetDeadline(time.Now().Add(s.timeout))
	err := tc.HandshakeContext(s.baseCtx)
	s.untrack(s.pending, c)
	if err != nil {
		// A scanner, a client that does not trust the certificate, one
		// without the client certificate asked for: its own error to
		// read, and no request of it was lost.
		s.log.Debug("TLS handshake failed", "peer", c.RemoteAddr().String(), "error", err.Error())
		s.failed()
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	if st.NegotiatedProtocol == "h2" {
		s.toHTTP2(tc)
		return
	}
	s.toHTTP1(tc, &st)
}

// sniff reads the first bytes of c: the HTTP/2 client preface goes to
// the HTTP/2 server, anything else to the HTTP/1.1 one.
func (s *Server) sniff(c net.Conn) {
	if !s.track(s.pending, c) {
		return
	}
	c.SetReadDeadline(time.Now().Add(s.timeout))
	pc, isH2 := sniffPreface(c)
	s.untrack(s.pending, c)
	c.SetReadDeadline(time.Time{})
	if isH2 {
		s.toHTTP2(pc)
		return
	}
	// What could not be read (a deadline, a reset) the HTTP/1.1 server
	// meets again and answers as it answers any such connection.
	s.toHTTP1(pc, nil)
}

// toHTTP1 hands c to the HTTP/1.1 server, with the TLS state its
// requests carry.
func (s *Server) toHTTP1(c net.Conn, st *tls.ConnectionState) {
	var id string
	if st != nil {
		id = connID(c)
		s.tlsState.Store(id, st)
	}
	if !s.queue.push(c) {
		if st != nil {
			s.tlsState.Delete(id)
		}
		c.Close()
	}
}

// toHTTP2 hands c, past its TLS handshake if any, to the HTTP/2 server.
func (s *Server) toHTTP2(c net.Conn) {
	if !s.queue2.push(c) {
		c.Close()
	}
}

// stop refuses new connections: it closes the listeners and the
// connections that have no request yet.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.pending {
		c.Close()
	}
}

// Shutdown stops accepting and waits, until ctx ends, for the requests
// in flight: HTTP/1.1 connections close once idle, HTTP/2 ones get a
// GOAWAY and close once their streams end. It returns ctx's error if
// some are still open then; Close closes them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	h2err := make(chan error, 1)
	go func() { h2err <- s.h2.Shutdown(ctx) }()
	err := s.srv.Shutdown(ctx)
	return errors.Join(err, <-h2err)
}

// Close closes every listener and connection at once.
func (s *Server) Close() error {
	s.stop()
	s.cancel()
	return errors.Join(s.srv.Close(), s.h2.Close())
}

// Err is what the HTTP servers' Serve returned: http.ErrServerClosed
// after Shutdown or Close.
func (s *Server) Err() <-chan error { return s.serving }
