package framing

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// pieceConn is a connection whose reads return in, at most step bytes at a
// time, then io.EOF: the byte stream a client sent, cut up as the network
// may cut it.
type pieceConn struct {
	net.Conn // nil: only Read is used
	in       []byte
	step     int
}

func (c *pieceConn) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.step)], c.in)
	c.in = c.in[n:]
	return n, nil
}

// passed is what a Conn over in hands on, read at most read bytes at a
// time, and what it refused.
func passed(t testing.TB, in string, step, read, maxHead int) ([]byte, *Error) {
	t.Helper()
	c := NewConn(&pieceConn{in: []byte(in), step: step}, maxHead)
	var out []byte
	buf := make([]byte, read)
	for range 1 << 20 {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, c.Refused()
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
	t.Fatal("Read never ended")
	return nil, nil
}

// parsed is the request net/http reads from b, one after the other, with
// their bodies, until one fails; err is that failure (io.EOF at a clean
// end).
type parsedReq struct {
	method, uri, proto string
	header, trailer    http.Header
	body               string
	cl                 int64
	te                 []string
}

func parseAll(b []byte, skipEmpty bool) (reqs []parsedReq, err error) {
	br := bufio.NewReader(bytes.NewReader(b))
	for {
		if skipEmpty {
			for {
				p, _ := br.Peek(2)
				if string(p) != "\r\n" {
					break
				}
				br.Discard(2)
			}
		}
		if _, err := br.Peek(1); err != nil {
			return reqs, io.EOF
		}
		r, err := http.ReadRequest(br)
		if err != nil {
			return reqs, err
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return reqs, err
		}
		reqs = append(reqs, parsedReq{r.Method, r.RequestURI, r.Proto, r.Header, r.Trailer, string(body), r.ContentLength, r.TransferEncoding})
	}
}

const (
	get   = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	after = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
)

func TestConn(t *testing.T) {
	cases := []struct {
		name, in string
		reqs     int    // requests net/http reads through the Conn
		reason   string // what the Conn refuses, "" for nothing
		status   int
	}{
		{"two gets", get + after, 2, "", 0},
		{"content-length body", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + after, 2, "", 0},
		{"identical content-lengths", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello" + after, 2, "", 0},
		{"chunked body", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + after, 2, "", 0},
		{"chunked, any case", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ChUnKeD\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + after, 2, "", 0},
		{"chunk extensions", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5; a=b;c ; d = \"x\\\"y\"\r\nhello\r\n0;last\r\n\r\n" + after, 2, "", 0},
		{"trailer", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n" + after, 2, "", 0},
		{"leading empty lines", "\r\n\r\n" + get + "\r\n" + after, 2, "", 0},
		{"HTTP/1.0 with a body", "POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi" + after, 2, "", 0},

		{"CL.TE", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + after, 0, "transfer_encoding_with_content_length", 400},
		{"TE.CL", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n" + after, 0, "transfer_encoding_with_content_length", 400},
		{"TE in HTTP/1.0", "POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + after, 0, "transfer_encoding_http10", 400},
		{"TE not chunked last", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n" + after, 0, "transfer_encoding_not_chunked", 400},
		{"TE gzip, chunked", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + after, 0, "transfer_encoding_unsupported", 501},
		{"TE twice", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + after, 0, "transfer_encoding_chunked_twice", 400},
		{"TE with a parameter", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n" + after, 0, "transfer_encoding_not_chunked", 400},
		{"TE empty", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\n\r\n" + after, 0, "transfer_encoding_not_chunked", 400},
		{"TE with a space before the colon", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + after, 0, "bad_field_name", 400},
		{"TE with a vertical tab", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \vchunked\r\n\r\n0\r\n\r\n" + after, 0, "control_in_field", 400},
		{"TE folded", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + after, 0, "obs_fold", 400},
		{"Transfer_Encoding", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer_Encoding: chunked\r\n\r\n0\r\n\r\n" + after, 0, "underscore_framing_field", 400},
		{"content_length", "GET /a HTTP/1.1\r\nHost: x\r\ncontent_length: 5\r\n\r\n" + after, 0, "underscore_framing_field", 400},
		{"other underscores", "GET /a HTTP/1.1\r\nHost: x\r\nX_Trace_Id: 5\r\n\r\n" + after, 2, "", 0},
		{"CL conflict", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nhello" + after, 0, "content_length_conflict", 400},
		{"CL with a sign", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello" + after, 0, "bad_content_length", 400},
		{"CL with a space inside", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1 0\r\n\r\nhello" + after, 0, "bad_content_length", 400},
		{"CL list", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello" + after, 0, "bad_content_length", 400},
		{"CL too large", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 9223372036854775808\r\n\r\nhello" + after, 0, "bad_content_length", 400},
		{"obs-fold", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n" + after, 0, "obs_fold", 400},
		{"bare LF", "GET /a HTTP/1.1\nHost: x\n\n" + after, 0, "bare_lf", 400},
		{"bare LF ends the head", "GET /a HTTP/1.1\r\nHost: x\r\n\n" + after, 0, "bare_lf", 400},
		{"bare CR", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\rb\r\n\r\n" + after, 0, "bare_cr", 400},
		{"NUL in a value", "GET /a HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n" + after, 0, "control_in_field", 400},
		{"NUL in a name", "GET /a HTTP/1.1\r\nHost: x\r\nX\x00A: a\r\n\r\n" + after, 0, "bad_field_name", 400},
		{"two spaces", "GET  /a HTTP/1.1\r\nHost: x\r\n\r\n" + after, 0, "bad_request_line", 400},
		{"space at the end", "GET /a HTTP/1.1 \r\nHost: x\r\n\r\n" + after, 0, "bad_version", 400},
		{"tab for a space", "GET\t/a HTTP/1.1\r\nHost: x\r\n\r\n" + after, 0, "bad_method", 400},
		{"space in the target", "GET /a b HTTP/1.1\r\nHost: x\r\n\r\n" + after, 0, "bad_version", 400},
		{"raw octet in the target", "GET /\x80 HTTP/1.1\r\nHost: x\r\n\r\n" + after, 0, "bad_target", 400},
		{"HTTP/2", "GET /a HTTP/2.0\r\nHost: x\r\n\r\n" + after, 0, "unsupported_version", 505},
		{"HTTP/1.1 in lower case", "GET /a http/1.1\r\nHost: x\r\n\r\n" + after, 0, "bad_version", 400},
		{"chunk size not hex", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n" + after, 0, "bad_chunk_size", 400},
		{"chunk size too large", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\nhello\r\n0\r\n\r\n" + after, 0, "chunk_size_too_large", 400},
		{"chunk size of 17 digits", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n00000000000000005\r\nhello\r\n0\r\n\r\n" + after, 0, "chunk_size_too_large", 400},
		{"chunk size with a sign", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n" + after, 0, "bad_chunk_size", 400},
		{"chunk size with a space before its extension", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5 ;a\r\nhello\r\n0\r\n\r\n" + after, 0, "bad_chunk_extension", 400},
		{"chunk size with a space after it", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n" + after, 0, "bad_chunk_extension", 400},
		{"control byte in a chunk extension", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;\x01\r\nhello\r\n0\r\n\r\n" + after, 0, "bad_chunk_extension", 400},
		{"chunk extension without a name", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;=x\r\nhello\r\n0\r\n\r\n" + after, 0, "bad_chunk_extension", 400},
		{"chunk extension's open quote", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"x\r\nhello\r\n0\r\n\r\n" + after, 0, "bad_chunk_extension", 400},
		{"chunk line with a bare LF", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n" + after, 0, "bare_lf", 400},
		{"chunk data longer than its size", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n" + after, 0, "chunk_data_end", 400},
		{"trailer folded", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: a\r\n b\r\n\r\n" + after, 0, "trailer_obs_fold", 400},
		{"content-length in a trailer", "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nContent-Length: 5\r\n\r\n" + after, 0, "trailer_framing_field", 400},
		{"head too large", "GET /a HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", 300) + "\r\n\r\n" + after, 0, "head_too_large", 431},
		{"line too large", "GET /" + strings.Repeat("a", 300) + " HTTP/1.1\r\n\r\n" + after, 0, "head_too_large", 431},
		{"after a good one", get + "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + after, 1, "transfer_encoding_with_content_length", 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []int{1, 7, 4096} {
				for _, read := range []int{1, 3, 4096} {
					out, e := passed(t, tc.in, step, read, 256)
					reqs, err := parseAll(out, false)
					if len(reqs) != tc.reqs {
						t.Fatalf("step %d, read %d: net/http read %d requests through the Conn (%v), want %d; it passed %q", step, read, len(reqs), err, tc.reqs, out)
					}
					if tc.reason == "" {
						if e != nil || err != io.EOF {
							t.Fatalf("step %d, read %d: refused %v, then %v; want every request through", step, read, e, err)
						}
						continue
					}
					if e == nil || e.Reason != tc.reason || e.Status != tc.status {
						t.Fatalf("step %d, read %d: refused %+v, want %d %s", step, read, e, tc.status, tc.reason)
					}
					if err == io.EOF || err == nil {
						t.Fatalf("step %d, read %d: net/http read what the Conn refused without an error", step, read)
					}
					if bytes.Contains(out, []byte("smuggled")) {
						t.Fatalf("step %d, read %d: the bytes after the refused request passed: %q", step, read, out)
					}
				}
			}
		})
	}
}

// A request that asks to switch protocols is followed by the protocol's
// bytes, whatever they are, once the connection is taken over; if the
// request is answered otherwise, nothing after it passes. A request that
// merely carries Upgrade is not one.
func TestConnUpgrade(t *testing.T) {
	ws := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n"
	frames := "\x81\x05hello\nGET / HTTP/1.1 garbage\n"
	read := func(c *Conn, n int) (string, error) {
		var out []byte
		buf := make([]byte, 64)
		for len(out) < n {
			k, err := c.Read(buf)
			out = append(out, buf[:k]...)
			if err != nil {
				return string(out), err
			}
		}
		return string(out), nil
	}
	for _, answer := range []string{"switched", "refused"} {
		c := NewConn(&pieceConn{in: []byte(get + ws + frames), step: 5}, 0)
		head, err := read(c, len(get+ws))
		if head != get+ws || err != nil {
			t.Fatalf("%s: the heads %q (%v)", answer, head, err)
		}
		c.Answered() // the GET's answer: nothing yet for the upgrade
		if answer == "switched" {
			c.Switched()
			if rest, err := read(c, len(frames)); rest != frames || err != nil {
				t.Errorf("after the switch, passed %q (%v), want the frames", rest, err)
			}
			continue
		}
		c.Answered()
		if rest, err := read(c, 1); rest != "" || err != io.EOF {
			t.Errorf("after a refused switch, passed %q (%v), want nothing and io.EOF", rest, err)
		}
	}
	half := "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n"
	if _, e := passed(t, half+frames, 5, 64, 0); e == nil {
		t.Errorf("after a request with Upgrade but no Connection: upgrade, refused %v; want the frames read as a request", e)
	}
}

// Empty lines before a request line are skipped, and count to the head's
// bound: a stream of them is a head too large, not a loop.
func TestConnEmptyLines(t *testing.T) {
	if out, e := passed(t, strings.Repeat("\r\n", 100)+get, 7, 64, 512); e != nil || string(out) != get {
		t.Errorf("passed %q, refused %v", out, e)
	}
	if _, e := passed(t, strings.Repeat("\r\n", 100000)+get, 4096, 4096, 64<<10); e == nil || e.Reason != "head_too_large" {
		t.Errorf("100,000 empty lines: refused %v, want head_too_large", e)
	}
}

// A client that stops halfway leaves net/http with a request it cannot
// finish: the Conn passes the end of the stream on as it is.
func TestConnCutShort(t *testing.T) {
	for _, in := range []string{
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello",
		"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
		"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\n",
	} {
		out, e := passed(t, in, 3, 16, 0)
		if e != nil || string(out) != in {
			t.Errorf("%q: passed %q, refused %v", in, out, e)
		}
		if reqs, err := parseAll(out, false); len(reqs) != 0 || err == io.EOF {
			t.Errorf("%q: net/http read %d requests, then %v", in, len(reqs), err)
		}
	}
}

// Errors of the connection other than the end of it pass as they are, and
// the Conn goes on from where it was after them: net/http sets a deadline
// in the past to stop its background read, then reads again.
func TestConnKeepsStateAcrossErrors(t *testing.T) {
	in := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + get
	c := NewConn(&flakyConn{in: []byte(in)}, 0)
	var out []byte
	buf := make([]byte, 8)
	timeouts := 0
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			break
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		timeouts++
	}
	if string(out) != in || timeouts == 0 || c.Refused() != nil {
		t.Errorf("passed %q after %d timeouts (refused %v)", out, timeouts, c.Refused())
	}
}

// flakyConn times out before every other read.
type flakyConn struct {
	net.Conn
	in  []byte
	odd bool
}

type timeout struct{}

func (timeout) Error() string   { return "i/o timeout" }
func (timeout) Timeout() bool   { return true }
func (timeout) Temporary() bool { return true }

func (c *flakyConn) Read(p []byte) (int, error) {
	if c.odd = !c.odd; c.odd {
		return 0, timeout{}
	}
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 3)], c.in)
	c.in = c.in[n:]
	return n, nil
}

// The Conn stands in front of a real net/http server: pipelined requests
// get their answers in order, a refused one gets net/http's 400 after
// them, and nothing after it is answered.
func TestConnBeforeNetHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.URL.Path+" "+string(b))
	})}
	go srv.Serve(guardedListener{ln})
	defer srv.Close()

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, get+"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"+
		"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+after)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the connection did not close: %v (read %q)", err, got)
	}
	br := bufio.NewReader(bytes.NewReader(got))
	var answers []string
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(resp.Body)
		answers = append(answers, resp.Status+": "+string(b))
	}
	want := []string{"200 OK: /a ", "200 OK: /b hi", "400 Bad Request: 400 Bad Request"}
	if strings.Join(answers, "|") != strings.Join(want, "|") {
		t.Errorf("answers %q, want %q", answers, want)
	}
}

type guardedListener struct{ net.Listener }

func (l guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewConn(c, 0), nil
}
