package gateway

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"time"
)

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
