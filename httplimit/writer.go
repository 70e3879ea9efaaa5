package httplimit

import (
	"bufio"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"io"
	"net"
	"net/http"
)

// limitWriter is the ResponseWriter a handler gets when the middleware
// reports a limit: the handler's headers go out as it set them, except the
// rate-limit ones, which are the middleware's, as the gateway's replace any
// of the same name from the upstream. They are put back in the header map
// when the head leaves, at the first WriteHeader, Write, ReadFrom or Flush,
// and after the handler returns, for a response the server ends without the
// handler having written anything.
//
// It holds the values the limit's Reporter keeps none of too (RateLimit,
// for a request that leaves some quota), so that reporting a limit
// through it allocates no more than one string. It keeps the server
// writer's optional interfaces: io.ReaderFrom and http.Flusher, Hijack
// for the handlers that assert http.Hijacker, and Unwrap for
// http.ResponseController, which finds the deadlines and the rest
// through it.
type limitWriter struct {
	http.ResponseWriter
	values    answer.HeaderSet
	formatted answer.Formatted // the values' own, where the Reporter keeps none
	sent      bool             // the head has left, or the connection was hijacked
}

// send puts the middleware's rate-limit headers back, once.
func (w *limitWriter) send() {
	if !w.sent {
		w.sent = true
		w.values.Replace(w.ResponseWriter.Header())
	}
}

func (w *limitWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.send()
	} else {
		// An informational response (103 Early Hints) goes out with the
		// header map as it is, and the final head follows.
		w.values.Replace(w.ResponseWriter.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *limitWriter) Write(b []byte) (int, error) {
	w.send()
	return w.ResponseWriter.Write(b)
}

// ReadFrom keeps the server's own ReadFrom, which sends a file with
// sendfile(2), in reach of io.Copy.
func (w *limitWriter) ReadFrom(r io.Reader) (int64, error) {
	w.send()
	return io.Copy(w.ResponseWriter, r)
}

// FlushError is what http.ResponseController.Flush calls: a writer that
// cannot flush reports so.
func (w *limitWriter) FlushError() error {
	w.send()
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *limitWriter) Flush() { w.FlushError() }

// Hijack hands the connection over; the response head is then the
// handler's to write. A writer that cannot hijack (HTTP/2) reports so.
func (w *limitWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, buf, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		w.sent = true
	}
	return conn, buf, err
}

func (w *limitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
