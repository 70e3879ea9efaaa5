package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

var headSeeds = []string{
	"HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Mon, 07 Dec 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 404 Not Found\r\ncontent-length: 5\r\nx-trace-ID: a\r\nX-Trace-Id: b\r\n\r\nnope!NEXT",
	"HTTP/1.1 503\r\nContent-Length: 3\r\nRetry-After:  7 \t\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nVary: Accept\r\nEmpty:\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Obs: caf\xc3\xa9\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n1234567",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
	"HTTP/1.1 204 No Content\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
	"HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 2",
}

// FuzzReadHead: whatever readHead takes, it reads as http.ReadResponse
// does — the Response's fields, its body and what it leaves on the
// reader — and what it does not take it leaves untouched.
func FuzzReadHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(headSeeds[0]), true)
	f.Fuzz(func(t *testing.T, in []byte, head bool) {
		req, _ := http.NewRequest(http.MethodGet, "http://up/x", nil)
		if head {
			req.Method = http.MethodHead
		}
		br := bufio.NewReaderSize(bytes.NewReader(in), 4<<10)
		br.Peek(1)
		before := br.Buffered()
		got := readHead(br, req)
		if got == nil {
			if br.Buffered() != before {
				t.Fatalf("declined, yet read %d bytes", before-br.Buffered())
			}
			return
		}
		want, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), req)
		if err != nil {
			t.Fatalf("readHead took what ReadResponse refuses (%v): %q", err, in)
		}
		compareResponses(t, in, got, want)
	})
}

func compareResponses(t *testing.T, in []byte, got, want *http.Response) {
	t.Helper()
	gotBody, wantBody := got.Body, want.Body
	got.Body, want.Body = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\nread  %+v\nwant  %+v", in, got, want)
	}
	if (gotBody == http.NoBody) != (wantBody == http.NoBody) {
		t.Fatalf("%q: body %T, want %T", in, gotBody, wantBody)
	}
	gb, gerr := io.ReadAll(gotBody)
	wb, werr := io.ReadAll(wantBody)
	if !bytes.Equal(gb, wb) || !errors.Is(gerr, werr) && gerr != werr {
		t.Fatalf("%q: body %q, %v; want %q, %v", in, gb, gerr, wb, werr)
	}
}

// The seeds that readHead takes, and those it leaves to ReadResponse.
func TestReadHead(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://up/x", nil)
	taken := 0
	for _, s := range headSeeds {
		br := bufio.NewReaderSize(strings.NewReader(s), 4<<10)
		br.Peek(1)
		got := readHead(br, req)
		if got == nil {
			continue
		}
		taken++
		want, err := http.ReadResponse(bufio.NewReader(strings.NewReader(s)), req)
		if err != nil {
			t.Fatalf("%q: taken, and ReadResponse refuses it: %v", s, err)
		}
		compareResponses(t, []byte(s), got, want)
	}
	if taken != 8 {
		t.Errorf("readHead took %d seeds, want the first 8", taken)
	}
}

// What follows the body stays on the reader for the next answer.
func TestReadHeadLeavesTheRest(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\n!"
	req, _ := http.NewRequest(http.MethodGet, "http://up/x", nil)
	br := bufio.NewReaderSize(strings.NewReader(in), 4<<10)
	for _, want := range []struct {
		code int
		body string
	}{{200, "ok"}, {201, "!"}} {
		br.Peek(1)
		resp := readHead(br, req)
		if resp == nil {
			t.Fatal("declined")
		}
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != want.code || string(b) != want.body || err != nil {
			t.Fatalf("%d %q %v, want %d %q", resp.StatusCode, b, err, want.code, want.body)
		}
	}
}

// chunkReader returns at most n bytes per Read; with eofWithData it
// returns io.EOF together with the last bytes, as io.Reader allows.
type chunkReader struct {
	b           []byte
	n           int
	eofWithData bool
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.b))
	copy(p, r.b[:k])
	r.b = r.b[k:]
	if r.eofWithData && len(r.b) == 0 {
		return k, io.EOF
	}
	return k, nil
}

// readAllSeq reads up to 4 answers from in with read, each body with a
// buffer of size bufsz, and describes what it saw.
func readAllSeq(in []byte, chunk int, eofWithData bool, bufsz int, head bool,
	read func(*bufio.Reader, *http.Request) (*http.Response, error)) string {
	req, _ := http.NewRequest(http.MethodGet, "http://up/x", nil)
	if head {
		req.Method = http.MethodHead
	}
	br := bufio.NewReaderSize(&chunkReader{b: in, n: chunk, eofWithData: eofWithData}, 4<<10)
	var sb strings.Builder
	for i := 0; i < 4; i++ {
		if _, err := br.Peek(1); err != nil {
			fmt.Fprintf(&sb, "peek %v\n", err)
			break
		}
		resp, err := read(br, req)
		if err != nil {
			fmt.Fprintf(&sb, "err %v\n", err)
			break
		}
		body := resp.Body
		resp.Body = nil
		fmt.Fprintf(&sb, "%#v close=%v cl=%d h=%#v nobody=%v\n", resp.Status, resp.Close, resp.ContentLength, resp.Header, body == http.NoBody)
		buf := make([]byte, bufsz)
		var got []byte
		var rerr error
		for {
			n, err := body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				rerr = err
				break
			}
		}
		fmt.Fprintf(&sb, "body %q %v\n", got, rerr)
		if rerr != io.EOF {
			break
		}
	}
	rest, _ := io.ReadAll(br)
	fmt.Fprintf(&sb, "rest %q\n", rest)
	return sb.String()
}

// FuzzReadStream: readResponse over a connection that delivers its bytes
// in pieces, several answers in a row, reads what http.ReadResponse reads
// and leaves what it leaves.
func FuzzReadStream(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s+s), uint8(7), false, false)
	}
	f.Add([]byte(headSeeds[0]+headSeeds[2]), uint8(0), false, false)
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8, eofWithData, head bool) {
		c := int(chunk)
		if c == 0 {
			c = 1 << 20
		}
		got := readAllSeq(in, c, eofWithData, 512, head, readResponse)
		want := readAllSeq(in, c, eofWithData, 512, head, http.ReadResponse)
		if got != want {
			t.Fatalf("%q chunk %d:\nread %s\nwant %s", in, c, got, want)
		}
	})
}

// A body whose last bytes come with io.EOF, read straight into a caller's
// large buffer (bufio bypasses its buffer), is whole: io.EOF, as
// ReadResponse's body says, not io.ErrUnexpectedEOF.
func TestLengthBodyEOFWithData(t *testing.T) {
	body := strings.Repeat("a", 5000)
	in := []byte("HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + body)
	head := len(in) - len(body)
	mk := func() *bufio.Reader {
		// First read: the head only; then the body with EOF.
		r := io.MultiReader(bytes.NewReader(in[:head]), &chunkReader{b: in[head:], n: 1 << 20, eofWithData: true})
		br := bufio.NewReaderSize(r, 4<<10)
		br.Peek(1)
		return br
	}
	req, _ := http.NewRequest(http.MethodGet, "http://up/x", nil)
	got := readHead(mk(), req)
	if got == nil {
		t.Fatal("declined")
	}
	want, err := http.ReadResponse(mk(), req)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8192)
	gn, gerr := got.Body.Read(p)
	wn, werr := want.Body.Read(p)
	if gn != wn || gerr != werr {
		t.Errorf("lengthBody: %d, %v; ReadResponse's body: %d, %v", gn, gerr, wn, werr)
	}
}

// After a short body's io.ErrUnexpectedEOF comes io.EOF, as from
// ReadResponse's body, without reading the connection again.
func TestLengthBodyReadAfterShort(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"
	req, _ := http.NewRequest(http.MethodGet, "http://up/x", nil)
	mk := func() *bufio.Reader {
		br := bufio.NewReaderSize(strings.NewReader(in), 4<<10)
		br.Peek(1)
		return br
	}
	got := readHead(mk(), req)
	want, _ := http.ReadResponse(mk(), req)
	var gs, ws []string
	for i := 0; i < 3; i++ {
		p := make([]byte, 64)
		n, err := got.Body.Read(p)
		gs = append(gs, fmt.Sprint(n, err))
		n, err = want.Body.Read(p)
		ws = append(ws, fmt.Sprint(n, err))
	}
	if !reflect.DeepEqual(gs, ws) {
		t.Errorf("lengthBody %q; ReadResponse's body %q", gs, ws)
	}
}

// Close reads the rest of the body off the reader, so that the next answer
// follows, and reads after it fail, as with ReadResponse's body.
func TestLengthBodyClose(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT"
	req, _ := http.NewRequest(http.MethodGet, "http://up/x", nil)
	var rest [2]string
	var after [2]error
	for i, read := range []func(*bufio.Reader, *http.Request) (*http.Response, error){
		func(br *bufio.Reader, r *http.Request) (*http.Response, error) {
			if resp := readHead(br, r); resp != nil {
				return resp, nil
			}
			return nil, errors.New("declined")
		},
		http.ReadResponse,
	} {
		br := bufio.NewReaderSize(strings.NewReader(in), 4<<10)
		br.Peek(1)
		resp, err := read(br, req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Read(make([]byte, 2))
		resp.Body.Close()
		_, after[i] = resp.Body.Read(make([]byte, 2))
		b, _ := br.Peek(br.Buffered())
		rest[i] = string(b)
	}
	if rest[0] != rest[1] || after[0] != after[1] {
		t.Errorf("after Close: left %q, read %v; ReadResponse left %q, read %v", rest[0], after[0], rest[1], after[1])
	}
}

// Answers around the buffer's size and at the edges of what readHead takes,
// delivered in pieces of every size, bodies read with buffers of every
// size, with and without io.EOF arriving with the last bytes: the whole
// stream as ReadResponse reads it.
func TestReadResponseStream(t *testing.T) {
	var cases []string
	for pad := 4080; pad < 4100; pad++ { // the head ends around the 4 KiB buffer
		h := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Pad: " + strings.Repeat("p", pad-40) + "\r\n\r\nabc"
		cases = append(cases, h+h)
	}
	cases = append(cases, []string{
		"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length\t: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX\x00: y\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: y\x00\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: y\x7f\r\n\r\nok",
		"HTTP/1.1 200 O\x00K\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 O\x80K\r\nContent-Length: 2\r\nX: \xff\xfe\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n: y\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 0002\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n!",
		"HTTP/1.1 200 OK\r\nContent-Length: 1 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\t2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\ncontent-length: 3\r\n\r\nok!",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nCONTENT-LENGTH: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, close\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: Close\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: closed\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: ,close,\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTRANSFER-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: a\nContent-Length: 5\r\n\r\nokabc",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: a\r\rContent-Length: 5\r\n\r\nokabc",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\nokabc",
		"HTTP/1.1 200 OK\r\n Content-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX: y\r\n Content-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nX: y\r\n\tContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 103 Early\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No\r\nContent-Length: 2\r\n\r\nHTTP/1.1 304 N\r\nContent-Length: 2\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 \r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200  OK \r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200\tOK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 600 X\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 099 X\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nPragma: no-cache\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTrailer: X\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX:\t \r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length:\t2\t\r\n\r\nok",
	}...)
	for _, in := range cases {
		// Pieces of a byte or three for the short answers; the long
		// heads' edges are at the buffer's size.
		chunks := []int{1, 3, 64, 4096, 1 << 20}
		if len(in) > 4<<10 {
			chunks = []int{61, 4095, 4096, 4097, 1 << 20}
		}
		for _, head := range []bool{false, true} {
			for _, c := range chunks {
				for _, bs := range []int{1, 8192} {
					for _, ed := range []bool{false, true} {
						got := readAllSeq([]byte(in), c, ed, bs, head, readResponse)
						want := readAllSeq([]byte(in), c, ed, bs, head, http.ReadResponse)
						if got != want {
							t.Errorf("%q chunk %d bufsz %d head %v:\nread %s\nwant %s", in, c, bs, head, got, want)
						}
					}
				}
			}
		}
	}
}
