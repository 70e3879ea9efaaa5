package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"unsafe"

	"golang.org/x/net/http/httpguts"
)

// readResponse reads an answer's head from br as http.ReadResponse does.
// The usual answer of an upstream — HTTP/1.1, a final status with a body
// of known length, plain fields, the head whole in br's buffer — is read
// here, into the Response ReadResponse would make (FuzzReadHead), in
// three or four allocations where ReadResponse takes nine and more:
// the head's bytes once, its fields' values cut from them, the map, and
// the Response with its body and the values' slices together. Anything
// else goes to ReadResponse, br untouched.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if resp := readHead(br, req); resp != nil {
		return resp, nil
	}
	return http.ReadResponse(br, req)
}

// maxHeadFields bounds the fields of a head readHead reads.
const maxHeadFields = 64

// headResp is what one head read by readHead allocates besides its bytes
// and its map.
type headResp struct {
	resp http.Response
	body lengthBody
	strs [12]string // the values of the first fields
}

// readHead returns the answer whose head is whole in br's buffer, and
// consumes the head; or nil, consuming nothing, when the head is not one
// it reads as ReadResponse does: not all buffered, a version other than
// HTTP/1.1, an interim status, 204 or 304, an answer to HEAD, a line not
// ending in CRLF, a folded line, a field name that is not a token, a
// value ReadResponse would refuse, more than maxHeadFields fields, no
// Content-Length or more than one, a Transfer-Encoding, Trailer or Pragma
// field, a Connection field naming close.
func readHead(br *bufio.Reader, req *http.Request) *http.Response {
	if req != nil && req.Method == http.MethodHead {
		return nil
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil
	}
	head := buf[:end+2] // every line with its CRLF
	// The status line: "HTTP/1.1 ddd", then " reason" or nothing.
	if len(head) < 14 || string(head[:9]) != "HTTP/1.1 " {
		return nil
	}
	d0, d1, d2 := head[9], head[10], head[11]
	if d0 < '2' || d0 > '5' || d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' {
		return nil
	}
	code := int(d0-'0')*100 + int(d1-'0')*10 + int(d2-'0')
	if code == http.StatusNoContent || code == http.StatusNotModified {
		return nil
	}
	statusEnd := bytes.IndexByte(head, '\n')
	if head[statusEnd-1] != '\r' || head[12] != '\r' && head[12] != ' ' {
		return nil
	}
	for _, c := range head[12 : statusEnd-1] {
		if c < ' ' || c == 0x7f {
			return nil // ReadResponse takes it as it is; so does it, there
		}
	}
	n := bytes.Count(head[statusEnd+1:], []byte("\r\n"))
	if n > maxHeadFields || bytes.Count(head, []byte("\n")) != n+1 {
		return nil // more fields than read here, or a bare LF
	}

	// One copy of the head: names are made canonical in it, and every
	// string of the Response is cut from it once its bytes are final;
	// they are never written again.
	b := make([]byte, len(head))
	copy(b, head)
	str := func(from, to int) string {
		if from == to {
			return ""
		}
		return unsafe.String(&b[from], to-from)
	}

	hr := new(headResp)
	strs := hr.strs[:]
	if n > len(strs) {
		strs = make([]string, n)
	}
	h := make(http.Header, n)
	cl := int64(-1)
	for line := statusEnd + 1; line < len(b); {
		eol := line + bytes.IndexByte(b[line:], '\r')
		if b[eol+1] != '\n' {
			return nil // a CR alone
		}
		kv := b[line:eol]
		next := eol + 2
		colon := bytes.IndexByte(kv, ':')
		if colon <= 0 {
			return nil // no name, or a folded line (which starts with SP or HTAB)
		}
		if !canonical(kv[:colon]) {
			return nil
		}
		key := str(line, line+colon)
		// The value without the whitespace around it, which must hold
		// only what ReadResponse takes.
		vs, ve := line+colon+1, eol
		for vs < ve && (b[vs] == ' ' || b[vs] == '\t') {
			vs++
		}
		for ve > vs && (b[ve-1] == ' ' || b[ve-1] == '\t') {
			ve--
		}
		for _, c := range b[vs:ve] {
			if c < ' ' && c != '\t' || c == 0x7f {
				return nil
			}
		}
		value := str(vs, ve)
		switch key {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil
		case "Content-Length":
			if cl >= 0 {
				return nil
			}
			if cl = contentLength(value); cl < 0 {
				return nil
			}
		case "Connection":
			if httpguts.HeaderValuesContainsToken([]string{value}, "close") {
				return nil
			}
		}
		if vv := h[key]; vv != nil {
			h[key] = append(vv, value)
		} else {
			vv, strs = strs[:1:1], strs[1:]
			vv[0] = value
			h[key] = vv
		}
		line = next
	}
	if cl < 0 {
		return nil
	}
	if _, err := br.Discard(len(head) + 2); err != nil {
		return nil // not reached: the head is buffered
	}
	resp := &hr.resp
	*resp = http.Response{
		Status:        str(9, statusEnd-1),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: cl,
		Request:       req,
	}
	if cl == 0 {
		resp.Body = http.NoBody
	} else {
		hr.body = lengthBody{r: br, n: cl}
		resp.Body = &hr.body
	}
	return resp
}

// canonical makes name, a field name, canonical in place as
// textproto.CanonicalMIMEHeaderKey does, and reports whether it is a
// token, the only names it takes.
func canonical(name []byte) bool {
	upper := true
	for i, c := range name {
		if c >= 0x80 || !httpguts.IsTokenRune(rune(c)) {
			return false
		}
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		name[i] = c
		upper = c == '-'
	}
	return true
}

// contentLength parses a Content-Length value as ReadResponse does
// (decimal digits, at most 2^63 - 1); -1 for one it refuses or reads
// otherwise.
func contentLength(v string) int64 {
	if v == "" || len(v) > 18 {
		return -1 // longer ones may not fit: ReadResponse's to judge
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// lengthBody is the body of an answer of known length, read as
// http.ReadResponse's is: io.EOF with its last bytes; io.ErrUnexpectedEOF
// when the connection ends before them, and io.EOF after that; Close reads
// what is left of it (so that the next answer can follow on the
// connection), and reads after Close fail.
type lengthBody struct {
	r      *bufio.Reader
	n      int64 // bytes left
	closed bool
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	k, err := b.r.Read(p)
	b.n -= int64(k)
	switch {
	case b.n == 0 && (err == nil || err == io.EOF):
		err = io.EOF
	case err == io.EOF:
		b.n = 0 // what follows is io.EOF
		err = io.ErrUnexpectedEOF
	}
	return k, err
}

func (b *lengthBody) Close() error {
	if b.closed {
		return nil
	}
	_, err := io.Copy(io.Discard, b)
	b.closed = true
	return err
}
