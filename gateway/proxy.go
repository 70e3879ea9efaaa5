package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/h1"
)

// upstream is a route's targets and the client that reaches them.
type upstream struct {
	targets     []*url.URL
	names       []string       // of the targets, for the logs: targetNames
	state       []*targetState // per target: health, ejection, requests in flight (health.go)
	least       bool           // balance least_request (over one target too, for the in_flight of the routes' view)
	ejection    config.Eject
	health      config.Health
	next        atomic.Uint64
	client      upstreamClient
	protocol    config.Protocol
	http2       bool        // upstream.protocol h2c or h2
	tls         *tls.Config // of the https targets (upstreamTLS), for the health checks too
	tlsID       string
	stripPrefix string
	ridHeader   string        // canonical: the request id's, which the gateway sets
	idle        time.Duration // longest silence while a response body streams
	send        time.Duration // longest a write of the body to the client may stall (server.send_timeout)
	upgrades    *upgrades     // the gateway's joined connections
	now         func() time.Time
}

// upstreamOptions configure the http.Transport a route's client falls back to.
type upstreamOptions struct {
	connectTimeout time.Duration
	timeout        time.Duration // until the response headers
	tls            *tls.Config   // of https targets
}

func newTransport(o upstreamOptions) *http.Transport {
	d := &net.Dialer{Timeout: o.connectTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:           d.DialContext,
		TLSClientConfig:       o.tls,
		ResponseHeaderTimeout: o.timeout,
		// A gateway holds one connection per concurrent request to each
		// target; the default of two idle connections per host would close
		// and redial under any real load.
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		// Bodies pass through as they are: the client negotiated the
		// encoding with the upstream, not with us.
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
	}
}

// outcome is what the breaker and the metrics learn of one exchange.
type outcome struct {
	status  int   // the upstream's status, or the gateway's answer when it failed
	err     error // why the exchange failed
	failed  bool  // connection error or timeout
	timeout bool
	written bool // the response head went to the client
	aborted bool // the body broke off after the head was sent
	client  bool // the client's request body failed: too long, or cut short
	// exchanged is set when the request went upstream; took is how long
	// the upstream took to answer with its head (or to fail).
	exchanged bool
	took      time.Duration
	// copied is set once the upstream's body was copied to the client,
	// bytes of it (all of it, unless aborted).
	copied bool
	bytes  int64
	// deadline says a gRPC call's grpc-timeout ran out: the client's
	// deadline, which says nothing of the upstream.
	deadline bool
	// ended says a gRPC call whose answer broke off was ended with a
	// status in the trailers (endGRPC): the handler need not abort.
	ended bool
	// grpcFailed is the HTTP equivalent of the upstream's grpc-status
	// when it says the upstream failed (grpcFailure); 0 otherwise.
	grpcFailed int
	// result and limit are what the access log says of the request: what
	// the gateway decided, and the limit that rejected it.
	result accessResult
	limit  string
	// target is the upstream the exchange went to (the last one tried),
	// as scheme://host; "" when it went nowhere.
	target string
	// join, after a switch of protocols, joins the client's connection
	// to the upstream's until either closes; joined is how long it ran.
	join   func()
	joined time.Duration
}

// cancelled reports an exchange that says nothing about the upstream: it
// never went there (a limit refused it), the client went away first, or
// the client's body failed.
func (o outcome) cancelled() bool {
	return !o.exchanged || o.status == statusClientClosed || o.client || o.aborted && !o.failed || o.deadline
}

// clientGone reports an exchange the client went away from (it reset
// the stream, closed the connection, cancelled its call): the status
// logged, 499, says it all.
func (o *outcome) clientGone() bool {
	return o.status == statusClientClosed && !o.failed && !errors.Is(o.err, errSendTimeout)
}

// Hop-by-hop headers, removed in both directions (RFC 9110 §7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders removes the hop-by-hop fields of h: the standard ones
// and those its Connection fields name, but for the fields keep names
// (canonical), which the gateway set itself.
func removeHopHeaders(h http.Header, keep ...string) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto(sf); sf != "" && !slices.Contains(keep, sf) {
				delete(h, sf)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// maxInterim bounds the informational answers of one exchange. Once
// they are passed on, http.Transport reads them without a bound of its
// own, and an upstream that sent them without end would hold the handler
// until the upstream timeout, the client reading each.
const maxInterim = 16

var (
	errTooManyInterim = fmt.Errorf("the upstream sent more than %d informational answers", maxInterim)
	errInterimLate    = errors.New("an informational answer after the exchange ended")
)

// interimRelay passes an exchange's informational answers on to the
// client. On the fallback's path they come on http.Transport's reading
// goroutine, which goes on after Do returned with an error (a timeout, a
// client gone) until it finds the connection closed; the handler then
// writes its own answer to the same ResponseWriter, whose header map and
// connection a late relay would share. So the relay holds mu while it
// writes, and end, called as soon as Do returns, makes the ones after it
// do nothing.
type interimRelay struct {
	w    http.ResponseWriter
	mu   sync.Mutex
	done bool
	n    int
}

func (ir *interimRelay) pass(code int, uh http.Header) error {
	ir.mu.Lock()
	defer ir.mu.Unlock()
	if ir.done {
		// Stops the Transport reading more of what nobody will see.
		return errInterimLate
	}
	// 100 Continue counts too: it is not passed on, but the Transport
	// reads any number of it just the same.
	if ir.n++; ir.n > maxInterim {
		return errTooManyInterim // the exchange fails: 502
	}
	relayInterim(ir.w, code, uh)
	return nil
}

// end waits for a relay under way to finish and makes the later ones do
// nothing.
func (ir *interimRelay) end() {
	ir.mu.Lock()
	ir.done = true
	ir.mu.Unlock()
}

// relayInterim sends an upstream's informational answer to the client,
// without its hop-by-hop fields and without the rate-limit fields, which
// are the gateway's alone. net/http writes a 1xx with the response's header
// map as it is then and leaves the map as it was, so the map holds the
// answer's fields only for the write. The gateway's own fields set by then
// (the request id) replace the upstream's of the same name, as they do on
// the final answer; the others wait for the final answer.
func relayInterim(w http.ResponseWriter, code int, uh http.Header) {
	if code == http.StatusContinue {
		return
	}
	removeHopHeaders(uh)
	answer.RemoveHeaders(uh)
	h := w.Header()
	kept := maps.Clone(h)
	for k := range uh {
		if vv, own := kept[k]; own {
			uh[k] = vv
		}
	}
	clear(h)
	maps.Copy(h, uh)
	w.WriteHeader(code)
	clear(h)
	maps.Copy(h, kept)
}

func textproto(s string) string {
	return http.CanonicalHeaderKey(strings.TrimSpace(s))
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// forward sends r to the next target with the cleaned path and copies the
// answer to w. head adds the gateway's own response headers after the
// upstream's, so that they replace any of the same name; answered, if not
// nil, is told the outcome as far as the head once it is sent, before the
// body is copied.
//
// The incoming request is reused as the outgoing one: the server is done
// with its URL and headers, and a copy (as httputil.ReverseProxy makes)
// costs a dozen allocations per request.
func (u *upstream) forward(w http.ResponseWriter, r *http.Request, path string, head func(http.Header), answered func(outcome)) outcome {
	out := r
	out.URL.Opaque = ""
	out.RequestURI = ""
	out.Close = false
	if out.ContentLength == 0 {
		out.Body = nil // a retry of a bodiless request must not find a spent body
	}
	// Whichever client path sends the body, a body the client broke (a
	// malformed chunk, a length it did not keep to) is the client's
	// fault: 400, and nothing the breaker learns of the upstream.
	var body *watchedBody
	if out.Body != nil && out.Body != http.NoBody {
		body = &watchedBody{ReadCloser: out.Body, length: r.ContentLength}
		out.Body = body
	}
	upgrade := upgradeType(out.Header)
	// A client's Connection field may name the fields the gateway set on
	// the request, to strip them from it: an upstream would then see the
	// gateway's own address as the client's, and no request id.
	trailers := hasToken(out.Header["Te"], "trailers")
	removeHopHeaders(out.Header, "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", u.ridHeader, "Traceparent", "Tracestate")
	if trailers {
		out.Header["Te"] = []string{"trailers"}
	}
	if upgrade != "" {
		// A protocol switch (WebSocket, say) is asked for hop by hop;
		// the upstream is asked for the same.
		out.Header["Connection"] = []string{"Upgrade"}
		out.Header["Upgrade"] = []string{upgrade}
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = nil // do not let the client add Go's
	}

	start := u.now()
	// A target that refuses the connection has seen nothing of the
	// request, so a request without a body (whose body cannot have been
	// spent) tries the next one; with a body it is answered 502.
	tries := 1
	if out.Body == nil {
		tries = len(u.targets)
	}
	// Informational answers (103 Early Hints) go on to the client as they
	// come; not to an HTTP/1.0 client, which cannot take them, and not 100
	// Continue, which the gateway's server sends itself when the handler
	// first reads a body that was asked for with Expect. Nor to a client
	// that asked for that 100: on http.Transport's path its body is first
	// read on the Transport's writing goroutine, and net/http writes the
	// 100 there, out of step with a relay on the reading goroutine.
	var interim h1.Interim
	var relay *interimRelay
	if r.ProtoAtLeast(1, 1) && (body == nil || !hasToken(r.Header["Expect"], "100-continue")) {
		relay = &interimRelay{w: w}
		interim = relay.pass
	}
	var resp *http.Response
	var err error
	var i int
	for try := 1; ; try++ {
		j, ok := u.pick()
		if !ok {
			if try == 1 {
				return outcome{status: http.StatusBadGateway, err: errNoTarget}
			}
			break // the last try's dial error stands
		}
		i = j
		target := u.targets[i]
		out.URL.Scheme, out.URL.Host, out.Host = target.Scheme, target.Host, target.Host
		out.URL.Path, out.URL.RawPath = UpstreamPath(target, u.stripPrefix, path)
		u.acquire(i)
		resp, err = u.client.Do(out, u.idle, interim)
		if err == nil || !isDial(err) {
			break
		}
		u.release(i)
		u.eject(i)
		if try >= tries || r.Context().Err() != nil {
			break
		}
	}
	if err == nil || !isDial(err) {
		// In flight until the body is copied.
		defer u.release(i)
	}
	// From here on the handler alone writes to w.
	if relay != nil {
		relay.end()
	}
	if err != nil {
		o := classify(r.Context(), err)
		if body != nil && !o.client {
			// A body that broke off fails the exchange, whichever way the
			// upstream client says so: as its own error, or as the
			// request's context, which net/http's server cancels when the
			// client's side of the connection ends.
			if berr := body.err(); berr != nil {
				o = classifyBody(berr, o)
			}
		}
		if ht := (headTimeout{}); o.timeout && errors.As(err, &ht) && ht.grpc {
			// The call's grpc-timeout ran out before the answer's head:
			// the client's deadline, not the upstream's failure.
			o.failed, o.deadline = false, true
		}
		if o.failed && !isDial(err) {
			u.failed(i)
		}
		if o.status == statusClientClosed && answer.IsGRPC(r) {
			clientCancelled(w.Header(), false)
		}
		o.err, o.exchanged, o.took, o.target = err, true, u.now().Sub(start), u.names[i]
		return o
	}
	took := u.now().Sub(start)
	// A gRPC call is judged by its grpc-status, which a trailers-only
	// answer has in its head and any other in its trailers: the target
	// learns of it once the body is copied (trailers).
	grpc := answer.IsGRPC(r)
	var grpcFailed int
	later := false // the grpc-status is in the trailers
	if grpc {
		if v := resp.Header["Grpc-Status"]; len(v) > 0 {
			grpcFailed = grpcFailure(v[0], resp)
		} else {
			later = resp.StatusCode == http.StatusOK
		}
	}
	if !later {
		u.answered(i, cmp.Or(grpcFailed, resp.StatusCode))
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		o := u.switchProtocols(w, resp, upgrade, head, took)
		o.target = u.names[i]
		return o
	}
	defer resp.Body.Close()

	removeHopHeaders(resp.Header)
	h := w.Header()
	copyHeader(h, resp.Header)
	if _, ok := h["Content-Type"]; !ok {
		// net/http would guess one from the body's first bytes: the
		// client must get the upstream's representation as it is.
		h["Content-Type"] = nil
	}
	if len(resp.Trailer) > 0 {
		keys := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		h["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	if body != nil && r.ProtoMajor == 1 && body.unread(r.ContentLength) {
		// The upstream answered before it took the body, and net/http
		// will close the connection rather than read the rest. It says
		// so in the head only when the head goes out after the handler
		// returned; a client told nothing may send its next request on
		// a connection about to close.
		closeAfterAnswer(w)
	}
	head(h)
	w.WriteHeader(resp.StatusCode)
	o := outcome{status: resp.StatusCode, written: true, exchanged: true, took: took, target: u.names[i], grpcFailed: grpcFailed}
	if answered != nil {
		answered(o)
	}
	if resp.ContentLength == -1 {
		// A body of unknown length may be a stream whose first bytes
		// are far off (server-sent events, long polling): the client
		// gets the head now, as it would from the upstream.
		_ = http.NewResponseController(w).Flush()
	}

	n, err := u.copyBody(w, resp, r.ProtoMajor == 1)
	o.copied, o.bytes = true, n
	if err != nil {
		// The status is sent, so the client can only learn that the body
		// broke off by the connection closing: the caller aborts the
		// handler. An upstream that broke off or fell silent is a failure
		// for the breaker; a client that went away is not.
		//
		// A gRPC client reads a status, though, which the trailers can
		// still carry: UNAVAILABLE for an upstream that broke off, and
		// DEADLINE_EXCEEDED when the call's grpc-timeout ran out, which
		// is the client's deadline and no failure of the upstream's.
		o.aborted = true
		var c outcome
		if body != nil {
			if berr := body.err(); berr != nil {
				c = classifyBody(berr, c)
			}
		}
		if errors.Is(err, errSendTimeout) {
			// The client's doing: it stopped reading.
			o.status, o.err = statusClientClosed, err
		} else if c.client && r.Context().Err() == nil {
			// The client's request stream failed under the answer (it fell
			// silent past server.body_timeout, went over
			// server.max_body_bytes), and the upstream's stream with it:
			// the client's fault, whatever error the upstream's side
			// reports.
			o.client, o.err = true, body.err()
			if grpc {
				endGRPCClient(h, c.status)
				o.ended = true
			}
		} else if r.Context().Err() == nil {
			o.failed, o.err = true, err
			o.timeout = errors.Is(err, h1.ErrIdle)
			if grpc {
				endGRPC(h, err)
				o.ended = true
				if errors.Is(err, errGRPCDeadline) {
					o.failed, o.deadline = false, true
				}
			}
		} else if grpc {
			// The client cancelled the call (or its deadline did): the
			// HTTP status sent, 200, says nothing of how it went.
			o.status = statusClientClosed
			clientCancelled(h, true)
		}
		if later && o.failed {
			u.answered(i, http.StatusServiceUnavailable) // the status the client got
		}
		return o
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	if later {
		if v := resp.Trailer["Grpc-Status"]; len(v) > 0 {
			o.grpcFailed = grpcFailure(v[0], resp)
		}
		u.answered(i, cmp.Or(o.grpcFailed, resp.StatusCode))
	}
	return o
}

// targetNames are how logs name targets: scheme://host, without a
// target's path or any userinfo.
func targetNames(ts []*url.URL) []string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Scheme + "://" + t.Host
	}
	return names
}

// copyHeader copies the upstream's response headers to the client's, but
// not over a header the gateway set before the upstream answered (the
// request id): the gateway's own values win, as its rate-limit headers do.
func copyHeader(h, up http.Header) {
	for k, vv := range up {
		if _, own := h[k]; !own {
			h[k] = vv
		}
	}
}

// upgradeType is the protocol a request asks to switch to ("Connection:
// upgrade" and "Upgrade: websocket", say), or "".
func upgradeType(h http.Header) string {
	if !hasToken(h["Connection"], "upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// switchProtocols answers a 101 from the upstream: the client's
// connection is taken from the server and the 101 goes to it with the
// gateway's headers. It owns resp.Body, the upstream's connection. The
// outcome's join then joins the two connections until either side closes;
// the handler runs it after reporting the switch to the breaker, and
// holds a concurrency limit's lease meanwhile. An upgraded connection has
// no idle bound (its protocol has its own: WebSocket pings); the server's
// graceful shutdown does not wait for it, and the gateway's Close ends it.
func (u *upstream) switchProtocols(w http.ResponseWriter, resp *http.Response, asked string, head func(http.Header), took time.Duration) outcome {
	o := outcome{status: http.StatusSwitchingProtocols, exchanged: true, took: took}
	back, ok := resp.Body.(io.ReadWriteCloser)
	if got := upgradeType(resp.Header); asked == "" || !ok || !strings.EqualFold(got, asked) {
		resp.Body.Close()
		o.status, o.failed = http.StatusBadGateway, true
		o.err = fmt.Errorf("the upstream switched to %q; the client asked for %q", got, asked)
		return o
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		back.Close()
		o.status, o.err = http.StatusInternalServerError, err
		return o
	}
	o.written = true
	// The server's read and write deadlines were for one request.
	conn.SetDeadline(time.Time{})
	h := w.Header()
	delete(h, "Connection") // the close set for any other answer
	copyHeader(h, resp.Header)
	head(h)
	resp.Header, resp.Body = h, nil
	if err = resp.Write(brw); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		conn.Close()
		back.Close()
		o.aborted = true
		return o
	}
	o.join = func() {
		// Each direction ends when its source does; the first to end
		// closes both connections, which ends the other. So does the
		// gateway's Close.
		var once sync.Once
		stop := func() { once.Do(func() { conn.Close(); back.Close() }) }
		defer stop()
		j := &joined{stop: stop}
		if !u.upgrades.add(j) {
			return
		}
		defer u.upgrades.remove(j)
		done := make(chan struct{}, 2)
		pipe := func(dst io.Writer, src io.Reader) {
			io.Copy(dst, src)
			stop()
			done <- struct{}{}
		}
		go pipe(back, brw.Reader) // brw holds what the client sent after its request
		go pipe(conn, back)
		<-done
		<-done
	}
	return o
}

// copyBody streams the body, flushing as it goes when the upstream did not
// say how long it is (a stream, server-sent events), and closes the body
// when the upstream stays silent longer than idle. A write to the client
// that makes no progress for u.send (server.send_timeout) ends the
// exchange with errSendTimeout; http1 says how: on HTTP/1 the
// connection's write deadline, set before each write (cheap: no
// allocation), on HTTP/2 a timer that resets the stream, armed around
// each write (http2's SetWriteDeadline goes through the connection's
// serve loop, too dear for every write).
func (u *upstream) copyBody(w http.ResponseWriter, resp *http.Response, http1 bool) (written int64, err error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	flush := resp.ContentLength == -1
	var idle atomic.Bool
	var timer *time.Timer
	if !h1.Owns(resp) && u.idle > 0 {
		// http.Transport's bodies have no deadline of their own.
		timer = time.AfterFunc(u.idle, func() {
			idle.Store(true)
			resp.Body.Close()
		})
		defer timer.Stop()
	}
	rc := http.NewResponseController(w)
	var send sendBound
	if u.send > 0 && hasWriteDeadline(w) {
		send = sendBound{w: w, d: u.send, http1: http1}
	}
	for {
		// The idle clock runs while the gateway waits for the upstream,
		// not while a slow client takes what it sent: that is the
		// client's pace, and the upstream is not silent.
		if timer != nil {
			timer.Reset(u.idle)
		}
		n, rerr := resp.Body.Read(buf)
		if timer != nil {
			timer.Stop()
		}
		if n > 0 {
			send.start(rc)
			m, werr := w.Write(buf[:n])
			if werr == nil && flush {
				werr = rc.Flush()
			}
			written += int64(m)
			if send.stop() || werr != nil && send.http1 && errors.Is(werr, os.ErrDeadlineExceeded) {
				return written, errSendTimeout
			}
			if werr != nil {
				return written, werr
			}
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			if idle.Load() {
				return written, h1.ErrIdle
			}
			return written, rerr
		}
	}
}

// errSendTimeout is the end of an exchange whose client took nothing of
// the response for server.send_timeout.
var errSendTimeout = errors.New("the client took nothing of the response for server.send_timeout")

// sendBound bounds each write of a response body to the client; the zero
// value bounds nothing.
type sendBound struct {
	w     http.ResponseWriter
	d     time.Duration
	http1 bool
	timer *time.Timer   // HTTP/2: resets the stream when a write overstays
	fired chan struct{} // closed once the timer has reset the stream
}

// start bounds the write about to be made; rc is w's (kept out of s,
// which the timer's Stop makes escape, so that it stays on the stack).
func (s *sendBound) start(rc *http.ResponseController) {
	switch {
	case s.d <= 0:
	case s.http1:
		// net/http clears it once the response is done, after it has
		// written what it still buffers: that too is bounded.
		_ = rc.SetWriteDeadline(time.Now().Add(s.d))
	case s.timer == nil:
		fired, w := make(chan struct{}), s.w
		s.fired = fired
		s.timer = time.AfterFunc(s.d, func() {
			// A deadline in the past resets the stream at once, which
			// ends the write that waits for the client's window.
			_ = http.NewResponseController(w).SetWriteDeadline(time.Unix(1, 0))
			close(fired)
		})
	default:
		s.timer.Reset(s.d)
	}
}

// stop ends the bound of the write just made, and reports whether it
// ran out. A timer that fired is waited for: the response writer must
// not be touched once the handler has returned.
func (s *sendBound) stop() bool {
	if s.timer == nil || s.timer.Stop() {
		return false
	}
	<-s.fired
	return true
}

// hasWriteDeadline reports whether w, or a writer it wraps, takes a write
// deadline: http.ResponseController's answer that it does not is an
// allocated error, too dear to learn with each write.
func hasWriteDeadline(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case interface{ SetWriteDeadline(time.Time) error }:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// classify turns a transport error into the gateway's answer.
func classify(ctx context.Context, err error) outcome {
	if ctx.Err() != nil {
		return outcome{status: statusClientClosed}
	}
	// The client's body broke off or was too long: the client's fault,
	// nothing the breaker should learn about the upstream.
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return outcome{status: http.StatusRequestEntityTooLarge, client: true}
	}
	if errors.Is(err, h1.ErrRequestBody) || errors.Is(err, h1.ErrInvalidRequest) {
		// A request the upstream client cannot write (a method or field
		// that HTTP/1.1 has no room for) never reached the upstream.
		return outcome{status: http.StatusBadRequest, client: true}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !isDial(err) {
		return outcome{status: http.StatusGatewayTimeout, failed: true, timeout: true}
	}
	return outcome{status: http.StatusBadGateway, failed: true}
}

// watchedBody keeps the first error other than io.EOF that reading the
// client's request body met. The upstream client may read the body on a
// goroutine of its own that outlives its answer, hence the atomics. An
// error after the upstream client closed the body is not the client's:
// an HTTP/2 Transport closes it when the connection fails, under the read
// its writer has under way.
type watchedBody struct {
	io.ReadCloser
	length int64 // the request's Content-Length; -1: unknown
	failed atomic.Pointer[error]
	closed atomic.Bool
	read   atomic.Int64 // bytes read so far
	eof    atomic.Bool
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	read := b.read.Add(int64(n))
	if errors.Is(err, http.ErrBodyReadAfterClose) && b.length >= 0 && read == b.length {
		// net/http's HTTP/1 server closes a request body once it has
		// read it to its end, when the handler first writes its answer.
		// http.Transport reads a body of known length once more after
		// its last byte, to look for bytes past the length; that read
		// can come after the answer's head (a busy machine), and the
		// closed body is at its end: it is read whole, not broken. Taken
		// for an error, it would fail the request's write, and the
		// Transport would close the upstream connection under the answer
		// it is copying.
		err = io.EOF
	}
	if err == io.EOF {
		b.eof.Store(true)
	} else if err != nil && !b.closed.Load() {
		b.failed.CompareAndSwap(nil, &err)
	}
	return n, err
}

// maxUnreadKept is how much of a request body an HTTP/1.1 connection may
// have left unread after its answer and still be kept alive: net/http's
// server reads and discards up to 256 KiB of it after the handler.
const maxUnreadKept = 256 << 10

// unread reports whether more of a body of length n (-1: unknown) than
// net/http discards after the handler is still to come.
func (b *watchedBody) unread(n int64) bool {
	if b.eof.Load() {
		return false
	}
	return n < 0 || n-b.read.Load() > maxUnreadKept
}

// closeAfterAnswer has net/http's HTTP/1.1 server close the connection
// after the answer about to be written, say so in its head (Connection:
// close) and close it gently: its side first, then, after a moment in
// which what the client still sends is read, the whole (so that the
// client's unread data does not reset the connection under the answer).
// net/http does so for a body over a MaxBytesReader's limit, which a
// reader of one byte with a limit of none is at once.
func closeAfterAnswer(w http.ResponseWriter) {
	var b [1]byte
	_, _ = http.MaxBytesReader(w, io.NopCloser(strings.NewReader(" ")), 0).Read(b[:])
}

func (b *watchedBody) Close() error {
	b.closed.Store(true)
	return b.ReadCloser.Close()
}

// err is the first error reading the body met, or nil.
func (b *watchedBody) err() error {
	if e := b.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// classifyBody is the outcome of an exchange that failed because the
// client's request body did with err; o is the outcome as the upstream
// client's error tells it. A body cut short by the end of the client's
// stream (a half-close, or a connection closed mid-body) or broken by its
// chunked framing gets 400; one whose connection failed under it (a
// reset) leaves a client that reads nothing more.
func classifyBody(err error, o outcome) outcome {
	var mbe *http.MaxBytesError
	var ne *net.OpError
	switch {
	case errors.As(err, &mbe):
		return outcome{status: http.StatusRequestEntityTooLarge, client: true}
	case errors.Is(err, os.ErrDeadlineExceeded):
		// server.body_timeout: the client fell silent mid-body.
		return outcome{status: http.StatusRequestTimeout, client: true}
	case errors.As(err, &ne):
		return o
	}
	return outcome{status: http.StatusBadRequest, client: true}
}

// slowBody bounds each wait for more of a request body
// (server.body_timeout) with the connection's read deadline. Once the body
// ends, the deadline goes: the next request's head has one of its own, and
// one left here would end net/http's background read of the connection,
// and with it the request, while a long answer streams. After a failure it
// stays, past: closing a body net/http's server has not read to its end
// reads on, to reuse the connection, and must not wait on a silent client.
//
// http.Transport may read the body on its writing goroutine after the
// handler has returned (an upstream that answered before reading it all),
// when the ResponseWriter is no longer the handler's to use: an HTTP/2
// one's SetReadDeadline then dereferences the stream it has let go of,
// and an HTTP/1 connection's deadline is its next request's. So end,
// called before the handler returns, makes the reads after it leave the
// deadline alone.
type slowBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	mu      sync.Mutex
	done    bool // the body ended, or the handler is done with it
}

func (b *slowBody) Read(p []byte) (int, error) {
	// A connection's deadline is on the wall clock, whatever the
	// gateway's clock (Options.Now) says.
	if !b.deadline(time.Now().Add(b.timeout), false) {
		return b.ReadCloser.Read(p)
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		switch {
		case err == io.EOF, errors.Is(err, http.ErrBodyReadAfterClose):
			// Read whole; or closed by the upstream client, whose writer
			// may check for bytes past the length as the round trip ends
			// and closes the body: the client's connection is sound.
			b.deadline(time.Time{}, true)
		default:
			// The client's body broke: no more is read from it.
			b.deadline(time.Now(), true)
		}
	}
	return n, err
}

// deadline sets the connection's read deadline to t, the last time if
// last, and reports whether it did: not once the body is done.
func (b *slowBody) deadline(t time.Time, last bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return false
	}
	b.rc.SetReadDeadline(t)
	b.done = last
	return true
}

// end makes the reads from now on leave the connection's deadline as it
// is; the handler calls it before it returns.
func (b *slowBody) end() {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

// statusClientClosed marks, in metrics and logs, a request the client gave up on (nginx's 499).
const statusClientClosed = 499

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func hasToken(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// UpstreamPath is the path the gateway sends to target for a request whose
// cleaned (escaped) path is path: strip removed at a segment boundary, then
// appended to the target's own path. It returns the path in both of the
// forms a url.URL holds: decoded, and escaped as it goes on the wire.
// `floodgate events replay` uses it too, so a replayed request goes where
// the original would have.
func UpstreamPath(target *url.URL, strip, path string) (decoded, escaped string) {
	if strip = strings.TrimSuffix(strip, "/"); strip != "" {
		if rest, ok := strings.CutPrefix(path, strip); ok {
			switch {
			case rest == "":
				path = "/"
			case rest[0] == '/':
				path = rest
			}
		}
	}
	escaped = path
	if base := strings.TrimSuffix(target.EscapedPath(), "/"); base != "" {
		escaped = base + path
		if path == "/" {
			escaped = base
		}
	}
	decoded = escaped
	if d, err := url.PathUnescape(escaped); err == nil {
		decoded = d
	}
	return decoded, escaped
}
