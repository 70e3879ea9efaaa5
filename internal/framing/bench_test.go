package framing

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// loopConn reads req over and over: a client pipelining the same request.
type loopConn struct {
	net.Conn
	req []byte
	off int
}

func (c *loopConn) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.req[c.off:])
		n += k
		c.off = (c.off + k) % len(c.req)
	}
	return n, nil
}

// What the guard adds to net/http's reading of a request: a browser's GET
// and a chunked POST, read and their bodies drained, through a Conn and
// straight from the connection.
func BenchmarkReadRequest(b *testing.B) {
	reqs := map[string]string{
		"get": "GET /api/activities/lucky-meal/receive?src=app HTTP/1.1\r\nHost: api.example.com\r\n" +
			"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36\r\n" +
			"Accept: application/json\r\nAccept-Encoding: gzip, deflate, br\r\nAccept-Language: en-US,en;q=0.9\r\n" +
			"Authorization: Bearer eyJhbGciOiJFUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJ1c2VyLTQyIn0.c2lnbmF0dXJl\r\n" +
			"Cookie: session=0123456789abcdef; theme=dark\r\nX-Request-Id: 7f3a9c2e1b\r\n\r\n",
		"chunked": "POST /api/orders HTTP/1.1\r\nHost: api.example.com\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n1a\r\n{\"sku\":\"meal-1\",\"qty\":1}\r\n\r\n0\r\n\r\n",
	}
	for _, name := range []string{"get", "chunked"} {
		for _, guarded := range []bool{false, true} {
			label := name + "/plain"
			if guarded {
				label = name + "/guarded"
			}
			b.Run(label, func(b *testing.B) {
				var c net.Conn = &loopConn{req: []byte(reqs[name])}
				if guarded {
					c = NewConn(c, 0)
				}
				br := bufio.NewReader(c)
				b.SetBytes(int64(len(reqs[name])))
				b.ReportAllocs()
				for b.Loop() {
					r, err := http.ReadRequest(br)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, r.Body)
				}
			})
		}
	}
}

// oneConn reads req once per Read: a keep-alive client sending its next
// request after the answer to the last.
type oneConn struct {
	net.Conn
	req []byte
}

func (c *oneConn) Read(p []byte) (int, error) { return copy(p, c.req), nil }

// A request read through a Conn whose buffer empties after each one (the
// usual keep-alive client) takes the pool's buffer and gives it back
// without an allocation.
func TestConnAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	req := []byte("GET /x HTTP/1.1\r\nHost: a\r\nX-User-Id: u1\r\n\r\n")
	c := NewConn(&oneConn{req: req}, 0)
	p := make([]byte, 4096)
	read := func() {
		n, err := c.Read(p)
		if err != nil || n != len(req) {
			t.Fatalf("read %d, %v; want %d", n, err, len(req))
		}
	}
	read()
	if n := testing.AllocsPerRun(1000, read); n != 0 {
		t.Errorf("a request read through a Conn: %v allocations, want 0", n)
	}
}
