package h1

import (
	"bufio"
	"bytes"
	"errors"
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
