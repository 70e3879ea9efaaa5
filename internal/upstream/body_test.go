package upstream

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// closedAtEnd is a request body of n bytes that net/http's server has
// closed: reads past what it held fail with http.ErrBodyReadAfterClose.
type closedAtEnd struct{ r *strings.Reader }

func (c closedAtEnd) Read(p []byte) (int, error) {
	if c.r.Len() == 0 {
		return 0, http.ErrBodyReadAfterClose
	}
	return c.r.Read(p)
}

func (closedAtEnd) Close() error { return nil }

// A body that net/http closed once it had read it to its declared end
// (it does so when the handler first writes its answer) reads as ended,
// not as broken, to the upstream client's last read after its length:
// otherwise http.Transport fails the request's write and closes the
// upstream connection under the answer it copies. A body closed before
// its end is broken.
func TestBodyClosedAtItsEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		held   int   // bytes the body yields before it is closed
		length int64 // its Content-Length
		want   error
	}{
		{"read whole", 5, 5, io.EOF},
		{"cut short", 3, 5, http.ErrBodyReadAfterClose},
		{"length unknown", 5, -1, http.ErrBodyReadAfterClose},
	} {
		b := &watchedBody{ReadCloser: closedAtEnd{strings.NewReader(strings.Repeat("x", tc.held))}, length: tc.length}
		n, err := io.ReadFull(b, make([]byte, tc.held))
		if n != tc.held || err != nil {
			t.Fatalf("%s: read %d (%v), want the %d bytes held", tc.name, n, err, tc.held)
		}
		if _, err := b.Read(make([]byte, 1)); err != tc.want {
			t.Errorf("%s: the read past them: %v, want %v", tc.name, err, tc.want)
		}
		if got := b.err(); (got != nil) != (tc.want != io.EOF) {
			t.Errorf("%s: the body's error %v", tc.name, got)
		}
	}
}
