package upstream

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/h1"
)

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

// MaxInterim bounds the informational answers of one exchange. Once
// they are passed on, http.Transport reads them without a bound of its
// own, and an upstream that sent them without end would hold the handler
// until the upstream timeout, the client reading each.
const MaxInterim = 16

var (
	errTooManyInterim = fmt.Errorf("the upstream sent more than %d informational answers", MaxInterim)
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
	if ir.n++; ir.n > MaxInterim {
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

// Forward sends r to the next target with the cleaned path and copies
// the answer to w. head adds the gateway's own response headers after the
// upstream's, so that they replace any of the same name; answered, if not
// nil, is told the result as far as the head once it is sent, before the
// body is copied.
//
// The incoming request is reused as the outgoing one: the server is done
// with its URL and headers, and a copy (as httputil.ReverseProxy makes)
// costs a dozen allocations per request.
func (u *Upstream) Forward(w http.ResponseWriter, r *http.Request, path string, head func(http.Header), answered func(Result)) Result {
	body, upgrade := u.prepare(r)
	start := u.now()
	resp, i, err := u.roundTrip(w, r, path, body)
	if i < 0 {
		return Result{Status: http.StatusBadGateway, Err: ErrNoTarget, End: NoTarget}
	}
	if err == nil || !isDial(err) {
		// In flight until the body is copied.
		defer u.release(i)
	}
	if err != nil {
		res := u.unanswered(w, r, body, err, i)
		res.Took, res.Target = u.now().Sub(start), u.names[i]
		return res
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
		res := u.switchProtocols(w, resp, upgrade, head, took)
		res.Target = u.names[i]
		return res
	}
	defer resp.Body.Close()

	h := u.writeHead(w, r, resp, body, head)
	res := Result{Status: resp.StatusCode, End: Done, Head: true, Took: took, Target: u.names[i], GRPCFailed: grpcFailed}
	if body != nil && body.eof.Load() {
		res.BodyRead = time.Unix(0, body.eofAt.Load())
	}
	if answered != nil {
		answered(res)
	}
	if resp.ContentLength == -1 {
		// A body of unknown length may be a stream whose first bytes
		// are far off (server-sent events, long polling): the client
		// gets the head now, as it would from the upstream.
		_ = http.NewResponseController(w).Flush()
	}

	n, err := u.copyBody(w, resp, r.ProtoMajor == 1)
	res.Bytes = n
	if err != nil {
		brokeOff(&res, r, h, body, err)
		if later && res.Failed() {
			u.answered(i, http.StatusServiceUnavailable) // the status the client got
		}
		return res
	}
	for k, vv := range resp.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	if later {
		if v := resp.Trailer["Grpc-Status"]; len(v) > 0 {
			res.GRPCFailed = grpcFailure(v[0], resp)
		}
		u.answered(i, cmp.Or(res.GRPCFailed, resp.StatusCode))
	}
	return res
}

// prepare makes the client's request the upstream's: its body watched for
// the client's faults, the hop-by-hop fields gone but those the gateway
// set. It returns the watched body (nil: none) and the protocol the
// client asks to switch to ("": none).
func (u *Upstream) prepare(r *http.Request) (*watchedBody, string) {
	r.URL.Opaque = ""
	r.RequestURI = ""
	r.Close = false
	if r.ContentLength == 0 {
		r.Body = nil // a retry of a bodiless request must not find a spent body
	}
	// Whichever client path sends the body, a body the client broke (a
	// malformed chunk, a length it did not keep to) is the client's
	// fault: 400, and nothing the breaker learns of the upstream.
	var body *watchedBody
	if r.Body != nil && r.Body != http.NoBody {
		body = &watchedBody{ReadCloser: r.Body, length: r.ContentLength}
		r.Body = body
	}
	upgrade := upgradeType(r.Header)
	// A client's Connection field may name the fields the gateway set on
	// the request, to strip them from it: an upstream would then see the
	// gateway's own address as the client's, and no request id.
	trailers := HasToken(r.Header["Te"], "trailers")
	removeHopHeaders(r.Header, "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", u.ridHeader, "Traceparent", "Tracestate")
	if trailers {
		r.Header["Te"] = []string{"trailers"}
	}
	if upgrade != "" {
		// A protocol switch (WebSocket, say) is asked for hop by hop;
		// the upstream is asked for the same.
		r.Header["Connection"] = []string{"Upgrade"}
		r.Header["Upgrade"] = []string{upgrade}
	}
	if _, ok := r.Header["User-Agent"]; !ok {
		r.Header["User-Agent"] = nil // do not let the client add Go's
	}
	return body, upgrade
}

// roundTrip sends r to a target, and to the next ones while a bodiless request
// finds its target refusing connections. It returns the answer, the
// index of the target that gave it (or failed last; -1 when no target is
// in rotation) and the error of the last try.
func (u *Upstream) roundTrip(w http.ResponseWriter, r *http.Request, path string, body *watchedBody) (*http.Response, int, error) {
	// A target that refuses the connection has seen nothing of the
	// request, so a request without a body (whose body cannot have been
	// spent) tries the next one; with a body it is answered 502.
	tries := 1
	if r.Body == nil {
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
	if r.ProtoAtLeast(1, 1) && (body == nil || !HasToken(r.Header["Expect"], "100-continue")) {
		relay = &interimRelay{w: w}
		interim = relay.pass
	}
	if relay != nil {
		// From then on the handler alone writes to w.
		defer relay.end()
	}
	var resp *http.Response
	var err error
	i := -1
	for try := 1; ; try++ {
		j, ok := u.pick()
		if !ok {
			if try == 1 {
				return nil, -1, nil
			}
			break // the last try's dial error stands
		}
		i = j
		target := u.targets[i]
		r.URL.Scheme, r.URL.Host, r.Host = target.Scheme, target.Host, target.Host
		r.URL.Path, r.URL.RawPath = Path(target, u.stripPrefix, path)
		u.acquire(i)
		resp, err = u.client.Do(r, u.idle, interim)
		if err == nil || !isDial(err) {
			break
		}
		u.release(i)
		u.eject(i)
		if try >= tries || r.Context().Err() != nil {
			break
		}
	}
	return resp, i, err
}

// unanswered is the result of an exchange with target i that got no
// answer, with err.
func (u *Upstream) unanswered(w http.ResponseWriter, r *http.Request, body *watchedBody, err error, i int) Result {
	res := classify(r.Context(), err)
	if body != nil && res.End != ClientBody {
		// A body that broke off fails the exchange, whichever way the
		// upstream client says so: as its own error, or as the
		// request's context, which net/http's server cancels when the
		// client's side of the connection ends.
		if berr := body.err(); berr != nil {
			res = classifyBody(berr, res)
		}
	}
	if ht := (headTimeout{}); res.End == TimedOut && errors.As(err, &ht) && ht.grpc {
		// The call's grpc-timeout ran out before the answer's head:
		// the client's deadline, not the upstream's failure.
		res.End = Deadline
	}
	if res.Failed() && !isDial(err) {
		u.failed(i)
	}
	if res.Status == StatusClientClosed && answer.IsGRPC(r) {
		clientCancelled(w.Header(), false)
	}
	res.Err = err
	return res
}

// writeHead sends the upstream's answer's head to the client, with the
// gateway's own fields (head), and returns the client's header map.
func (u *Upstream) writeHead(w http.ResponseWriter, r *http.Request, resp *http.Response, body *watchedBody, head func(http.Header)) http.Header {
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
	return h
}

// brokeOff records in res how the copy of the answer's body to the
// client broke off with err, after the head was sent (h is the client's
// header map, whose trailers a gRPC call's status still goes in).
//
// The status is sent, so the client can only learn that the body broke
// off by the connection closing: the caller aborts the handler. An
// upstream that broke off or fell silent is a failure for the breaker; a
// client that went away is not.
//
// A gRPC client reads a status, though, which the trailers can still
// carry: UNAVAILABLE for an upstream that broke off, and DEADLINE_EXCEEDED
// when the call's grpc-timeout ran out, which is the client's deadline and
// no failure of the upstream's.
func brokeOff(res *Result, r *http.Request, h http.Header, body *watchedBody, err error) {
	grpc := answer.IsGRPC(r)
	var c Result
	if body != nil {
		if berr := body.err(); berr != nil {
			c = classifyBody(berr, c)
		}
	}
	switch {
	case errors.Is(err, ErrSendTimeout):
		// The client's doing: it stopped reading.
		res.Status, res.Err, res.End = StatusClientClosed, err, ClientGone
	case c.End == ClientBody && r.Context().Err() == nil:
		// The client's request stream failed under the answer (it fell
		// silent past server.body_timeout, went over
		// server.max_body_bytes), and the upstream's stream with it:
		// the client's fault, whatever error the upstream's side
		// reports.
		res.End, res.Err = ClientBody, body.err()
		if grpc {
			endGRPCClient(h, c.Status)
		}
	case r.Context().Err() == nil:
		res.End, res.Err = Failed, err
		if errors.Is(err, h1.ErrIdle) {
			res.End = TimedOut
		}
		if grpc {
			endGRPC(h, err)
			if errors.Is(err, errGRPCDeadline) {
				res.End = Deadline
			}
		}
	default:
		res.End = ClientGone
		if grpc {
			// The client cancelled the call (or its deadline did): the
			// HTTP status sent, 200, says nothing of how it went.
			res.Status = StatusClientClosed
			clientCancelled(h, true)
		}
	}
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
	if !HasToken(h["Connection"], "upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

// switchProtocols answers a 101 from the upstream: the client's
// connection is taken from the server and the 101 goes to it with the
// gateway's headers. It owns resp.Body, the upstream's connection. The
// result's Join then joins the two connections until either side closes;
// the handler runs it after reporting the switch to the breaker, and
// holds a concurrency limit's lease meanwhile. An upgraded connection has
// no idle bound (its protocol has its own: WebSocket pings); the server's
// graceful shutdown does not wait for it, and the gateway's Close ends it.
func (u *Upstream) switchProtocols(w http.ResponseWriter, resp *http.Response, asked string, head func(http.Header), took time.Duration) Result {
	o := Result{Status: http.StatusSwitchingProtocols, End: Done, Took: took}
	back, ok := resp.Body.(io.ReadWriteCloser)
	if got := upgradeType(resp.Header); asked == "" || !ok || !strings.EqualFold(got, asked) {
		resp.Body.Close()
		o.Status, o.End = http.StatusBadGateway, Failed
		o.Err = fmt.Errorf("the upstream switched to %q; the client asked for %q", got, asked)
		return o
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		back.Close()
		o.Status, o.Err, o.End = http.StatusInternalServerError, err, Unjoined
		return o
	}
	o.Head = true
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
		o.End = ClientGone // the client's connection failed
		return o
	}
	o.Join = func() {
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
// exchange with ErrSendTimeout; http1 says how: on HTTP/1 the
// connection's write deadline, set before each write (cheap: no
// allocation), on HTTP/2 a timer that resets the stream, armed around
// each write (http2's SetWriteDeadline goes through the connection's
// serve loop, too dear for every write).
func (u *Upstream) copyBody(w http.ResponseWriter, resp *http.Response, http1 bool) (written int64, err error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	flush := resp.ContentLength == -1
	var idle *atomic.Bool // nil: the body bounds its own waits
	var timer *time.Timer
	if !h1.Owns(resp) && u.idle > 0 {
		// http.Transport's bodies have no deadline of their own.
		idle = new(atomic.Bool)
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
				return written, ErrSendTimeout
			}
			if werr != nil {
				return written, werr
			}
		}
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			if idle != nil && idle.Load() {
				return written, h1.ErrIdle
			}
			return written, rerr
		}
	}
}

// ErrSendTimeout is the end of an exchange whose client took nothing of
// the response for server.send_timeout.
var ErrSendTimeout = errors.New("the client took nothing of the response for server.send_timeout")

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
	eofAt  atomic.Int64 // Unix ns it was read to its end
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
		b.eofAt.Store(time.Now().UnixNano())
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
