package gateway

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Answer is what an HTTP/2 server sent on a stream: the status and
// fields of its head, its body, or the code it reset the stream with.
type h2Answer struct {
	status int
	header http.Header
	body   string
	reset  http2.ErrCode
	// goaway is set when the server ended the connection instead, with
	// a GOAWAY or without; goawayCode is the GOAWAY's code, if it came.
	goaway     bool
	goawayCode http2.ErrCode
}

// h2Exchange sends one request on a new h2c connection to addr, as frames
// written by hand, for what no HTTP/2 client library sends: fields
// HTTP/2 forbids, a body short of its Content-Length. fields are the
// head's, pseudo-fields first; body, if not nil, follows in one DATA
// frame that ends the stream.
func h2Exchange(t *testing.T, addr string, fields [][2]string, body []byte) h2Answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return h2ExchangeOn(t, c, fields, body)
}

// h2ExchangeOn is h2Exchange on c, a connection that speaks HTTP/2 once
// the preface is sent (h2c, or TLS that negotiated h2); it closes c.
func h2ExchangeOn(t *testing.T, c net.Conn, fields [][2]string, body []byte) h2Answer {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	// A head larger than a frame goes on in CONTINUATION frames.
	b := block.Bytes()
	first := b[:min(len(b), 16384)]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first,
		EndStream: body == nil, EndHeaders: len(first) == len(b)}); err != nil {
		t.Fatal(err)
	}
	for b = b[len(first):]; len(b) > 0; {
		n := min(len(b), 16384)
		if err := fr.WriteContinuation(1, n == len(b), b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if body != nil {
		if err := fr.WriteData(1, true, body); err != nil {
			t.Fatal(err)
		}
	}
	var a h2Answer
	var data strings.Builder
	for {
		f, err := fr.ReadFrame()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("no answer: %v (so far %+v)", err, a)
		}
		if err != nil {
			// The server closed the connection, maybe before its GOAWAY
			// could be read: a reset destroys what the client had not
			// read yet.
			a.goaway = true
			return a
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			if a.header == nil {
				a.header = http.Header{}
				for _, hf := range f.RegularFields() {
					a.header.Add(hf.Name, hf.Value)
				}
				a.status, _ = strconv.Atoi(f.PseudoValue("status"))
			}
			if f.StreamEnded() {
				a.body = data.String()
				return a
			}
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			data.Write(f.Data())
			if f.StreamEnded() {
				a.body = data.String()
				return a
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				a.reset, a.body = f.ErrCode, data.String()
				return a
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID < 1 {
				a.goaway, a.goawayCode = true, f.ErrCode
				return a
			}
		}
	}
}

// What HTTP/2 forbids in a request never reaches the gateway's handler,
// let alone the upstream: net/http's HTTP/2 server answers 400 for a
// hop-by-hop field (there is no switch of protocols on HTTP/2) or a TE
// other than trailers, 431 for a head too large (and ends the connection
// for one more than twice too large, or with a single field larger than
// the bound, which the HPACK decoder refuses), and resets the stream of
// an extended CONNECT, which it does not offer, and of a field that is
// upper-case or holds a control byte. A body short of its Content-Length
// is the client's fault, answered 400 by the gateway.
func TestH2ForbiddenRequests(t *testing.T) {
	t.Parallel()
	up := newBackend(t, echoBody)
	h := newHarness(t, "server: {max_header_bytes: 4096}\n"+basic, up)
	var p clientProtocol
	for _, p = range clientProtocols {
		if p.name == "edge-h2c" {
			break
		}
	}
	o := serveOver(t, h, p)
	addr := o.hostPort()
	req := func(method string, more ...string) [][2]string {
		f := [][2]string{{":method", method}, {":scheme", "http"}, {":authority", "x"}, {":path", "/api/x"}}
		for i := 0; i < len(more); i += 2 {
			f = append(f, [2]string{more[i], more[i+1]})
		}
		return f
	}
	for _, tc := range []struct {
		name   string
		fields [][2]string
		body   []byte
		status int
		reset  http2.ErrCode
		goaway bool
	}{
		{"a WebSocket upgrade", req("GET", "connection", "upgrade", "upgrade", "websocket"), nil, 400, 0, false},
		{"upgrade alone", req("GET", "upgrade", "websocket"), nil, 400, 0, false},
		{"keep-alive", req("GET", "keep-alive", "timeout=5"), nil, 400, 0, false},
		{"transfer-encoding", req("POST", "transfer-encoding", "chunked"), []byte("2\r\nhi\r\n0\r\n\r\n"), 400, 0, false},
		{"TE gzip", req("GET", "te", "gzip"), nil, 400, 0, false},
		{"a head too large", req("GET", manyFields(5, 1000)...), nil, 431, 0, false},
		{"a head far too large", req("GET", manyFields(16, 1000)...), nil, 0, 0, true},
		{"a field larger than the bound", req("GET", "x-big", strings.Repeat("v", 5000)), nil, 0, 0, true},
		{"an upper-case field name", req("GET", "X-User", "1"), nil, 0, http2.ErrCodeProtocol, false},
		{"a NUL in a value", req("GET", "x-a", "a\x00b"), nil, 0, http2.ErrCodeProtocol, false},
		{"an extended CONNECT", [][2]string{{":method", "CONNECT"}, {":protocol", "websocket"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/api/x"}}, nil, 0, http2.ErrCodeProtocol, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := h2Exchange(t, addr, tc.fields, tc.body)
			if a.status != tc.status || a.reset != tc.reset || a.goaway != tc.goaway {
				t.Errorf("%+v, want status %d, reset %v, goaway %v", a, tc.status, tc.reset, tc.goaway)
			}
		})
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("%d of them reached the upstream", n)
	}
	// The HPACK decoder's refusal ends the connection as a compression
	// error.
	if code, ok := h2GoAway(t, addr, req("GET", "x-big", strings.Repeat("v", 5000))); !ok || code != http2.ErrCodeCompression {
		t.Errorf("a field larger than the bound: GOAWAY %v (%v), want COMPRESSION_ERROR", code, ok)
	}

	a := h2Exchange(t, addr, req("POST", "content-length", "10"), []byte("short"))
	if a.status != 400 || !strings.Contains(a.body, `"code":"bad_request"`) {
		t.Errorf("a body short of its length: %+v", a)
	}
	a = h2Exchange(t, addr, req("POST", "content-length", "5", "te", "trailers"), []byte("whole"))
	if a.status != 200 || !strings.HasPrefix(a.body, "POST 5 cl=5") {
		t.Errorf("a body of its length: %+v", a)
	}
	if n := up.hits.Load(); n != 1 {
		t.Errorf("the upstream got %d requests, want the whole body's alone", n)
	}
}

// manyFields are n fields and their values, each value size bytes long.
func manyFields(n, size int) []string {
	var f []string
	for i := range n {
		f = append(f, "x-field-"+strconv.Itoa(i), strings.Repeat("v", size))
	}
	return f
}

// h2GoAway sends one request's head, in one HEADERS frame, on a new h2c
// connection to addr and reads until the server's GOAWAY, whose code it
// returns; ok is false when the connection ended without one. It writes
// nothing after the head, not even the SETTINGS acknowledgement: bytes the
// server does not read before it closes the connection would have it
// reset, and the reset lose the GOAWAY on its way.
func h2GoAway(t *testing.T, addr string, fields [][2]string) (code http2.ErrCode, ok bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	fr := http2.NewFramer(c, c)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, false
		}
		if g, is := f.(*http2.GoAwayFrame); is {
			return g.ErrCode, true
		}
	}
}
