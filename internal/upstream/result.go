package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/h1"
)

// End is how an exchange ended. The values after Done are the ways it
// went wrong; the zero value is an exchange that never began.
type End uint8

const (
	// NotSent: the request went nowhere; the gateway answered it itself
	// (a limit, the breaker, a malformed request).
	NotSent End = iota
	// NoTarget: every target of the route was out of rotation, and none
	// was asked (ErrNoTarget).
	NoTarget
	// Done: the upstream answered and the answer reached the client
	// whole, or the two switched protocols.
	Done
	// Failed: the upstream failed: it refused or reset the connection,
	// broke its answer off, or spoke another protocol.
	Failed
	// TimedOut: the upstream was silent: no head within upstream.timeout,
	// or its body idle for upstream.idle_timeout.
	TimedOut
	// Deadline: a gRPC call's grpc-timeout ran out, which is the client's
	// deadline and says nothing of the upstream.
	Deadline
	// ClientBody: the client's request body failed: too long, silent for
	// server.body_timeout, cut short or broken in its framing.
	ClientBody
	// ClientGone: the client went away, or took nothing of the answer
	// for server.send_timeout (ErrSendTimeout).
	ClientGone
	// Unjoined: the gateway could not take the client's connection over
	// after the upstream agreed to switch protocols.
	Unjoined
)

// StatusClientClosed marks, in metrics and logs, a request the client
// gave up on (nginx's 499).
const StatusClientClosed = 499

// Result is what the breaker, the metrics and the logs learn of one
// exchange.
type Result struct {
	// Status is the upstream's, or the gateway's answer when the exchange
	// failed before a head went to the client.
	Status int
	Err    error // why the exchange failed
	End    End
	// Head says the answer's head went to the client: the upstream's, or
	// one of the gateway's own.
	Head bool
	// Took is how long the upstream took to answer with its head, or to
	// fail; Target is the target asked last, as scheme://host ("" none).
	Took   time.Duration
	Target string
	// Bytes counts the body copied to the client (all of it, unless the
	// exchange broke off).
	Bytes int64
	// BodyRead is when the client's request body was read to its end, if
	// it was before the answer's head: the time to the head after it is
	// the upstream's, the time before it the client's upload.
	BodyRead time.Time
	// GRPCFailed is the HTTP equivalent of the upstream's grpc-status
	// when it says the upstream failed (grpcFailure); 0 otherwise.
	GRPCFailed int
	// Join, after a switch of protocols, joins the client's connection
	// to the upstream's until either closes.
	Join func()
}

// Exchanged reports a request that went upstream.
func (r *Result) Exchanged() bool { return r.End >= Done }

// Failed reports an exchange the upstream failed: the breaker and passive
// ejection count it against the target.
func (r *Result) Failed() bool { return r.End == Failed || r.End == TimedOut }

// Broken reports an answer that broke off after its head went to the
// client.
func (r *Result) Broken() bool { return r.Head && r.End > Done }

// Cancelled reports an exchange that says nothing about the upstream: it
// never went there, the client went away first or stopped reading, the
// client's body failed, or the call's own deadline ran out. An answer of
// 499 says the client went away too, whoever sent it.
func (r *Result) Cancelled() bool {
	if r.Status == StatusClientClosed {
		return true
	}
	switch r.End {
	case Done, Failed, TimedOut, Unjoined:
		return false
	}
	return true
}

// ClientGone reports an exchange the client went away from (it reset
// the stream, closed the connection, cancelled its call): the status
// logged, 499, says it all.
func (r *Result) ClientGone() bool {
	return r.Status == StatusClientClosed && !r.Failed() && !errors.Is(r.Err, ErrSendTimeout)
}

// Sent is the number of body bytes the answer carried, as far as the
// exchange knows: what was copied of the upstream's body; -1 after a
// switch of protocols, and when no body was copied (ok is false then).
func (r *Result) Sent() (n int64, ok bool) {
	if !r.Exchanged() || !r.Head {
		return -1, false
	}
	if r.Status == http.StatusSwitchingProtocols {
		return -1, true
	}
	return r.Bytes, true
}

// Kind names how an exchange failed, for the logs: a few words a query
// can count by, beside the error's own text.
func (r *Result) Kind() string {
	err := r.Err
	switch {
	case err == nil:
		return "status"
	case r.End == Deadline:
		return "grpc_deadline"
	case r.End == ClientBody && r.Broken():
		// The client's request stream failed under the answer: the code
		// its answer would have had before the head.
		switch classifyBody(err, Result{}).Status {
		case http.StatusRequestTimeout:
			return config.CodeRequestTimeout
		case http.StatusRequestEntityTooLarge:
			return "body_too_large"
		}
		return "bad_request"
	case errors.Is(err, ErrSendTimeout):
		return "send_timeout"
	case r.Broken() && r.End == TimedOut:
		return "body_idle"
	case r.Broken():
		return "body_broken"
	case r.End == TimedOut:
		return "timeout"
	case errors.Is(err, ErrNoTarget):
		return "no_healthy_target"
	case errors.Is(err, errNotHTTP2):
		return "not_http2"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection_reset"
	case isTLS(err):
		return "tls"
	case isDial(err):
		return "dial"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	}
	return "protocol"
}

// isTLS says err is a TLS handshake's failure: the target's certificate
// did not verify, or the target refused the gateway's (an alert).
func isTLS(err error) bool {
	var ve *tls.CertificateVerificationError
	var re tls.RecordHeaderError
	var op *net.OpError
	return errors.As(err, &ve) || errors.As(err, &re) ||
		errors.As(err, &op) && op.Op == "remote error" // an alert the target sent
}

// classify turns a transport error into the gateway's answer.
func classify(ctx context.Context, err error) Result {
	if ctx.Err() != nil {
		return Result{Status: StatusClientClosed, End: ClientGone}
	}
	// The client's body broke off or was too long: the client's fault,
	// nothing the breaker should learn about the upstream.
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return Result{Status: http.StatusRequestEntityTooLarge, End: ClientBody}
	}
	if errors.Is(err, h1.ErrRequestBody) || errors.Is(err, h1.ErrInvalidRequest) {
		// A request the upstream client cannot write (a method or field
		// that HTTP/1.1 has no room for) never reached the upstream.
		return Result{Status: http.StatusBadRequest, End: ClientBody}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() && !isDial(err) {
		return Result{Status: http.StatusGatewayTimeout, End: TimedOut}
	}
	return Result{Status: http.StatusBadGateway, End: Failed}
}

// classifyBody is the result of an exchange that failed because the
// client's request body did with err; r is the result as the upstream
// client's error tells it. A body cut short by the end of the client's
// stream (a half-close, or a connection closed mid-body) or broken by its
// chunked framing gets 400; one whose connection failed under it (a
// reset) leaves a client that reads nothing more.
func classifyBody(err error, r Result) Result {
	var mbe *http.MaxBytesError
	var ne *net.OpError
	switch {
	case errors.As(err, &mbe):
		return Result{Status: http.StatusRequestEntityTooLarge, End: ClientBody}
	case errors.Is(err, os.ErrDeadlineExceeded):
		// server.body_timeout: the client fell silent mid-body.
		return Result{Status: http.StatusRequestTimeout, End: ClientBody}
	case errors.As(err, &ne):
		return r
	}
	return Result{Status: http.StatusBadRequest, End: ClientBody}
}

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
