package framing

import (
	"bytes"
	"net/http"
)

// requestLine checks a request line: method SP request-target SP
// HTTP-version, each space a single one (RFC 9112 §3).
func (c *Conn) requestLine(line []byte) *Error {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || !isToken(line[:sp]) {
		return &Error{http.StatusBadRequest, "bad_method"}
	}
	rest := line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp <= 0 {
		return &Error{http.StatusBadRequest, "bad_request_line"}
	}
	for _, b := range rest[:sp] {
		// Visible ASCII only: a target holds no space, control byte or
		// raw octet above 0x7e (RFC 3986 has them percent-encoded).
		if b <= ' ' || b >= 0x7f {
			return &Error{http.StatusBadRequest, "bad_target"}
		}
	}
	v := rest[sp+1:]
	if len(v) != 8 || string(v[:5]) != "HTTP/" || !isDigit(v[5]) || v[6] != '.' || !isDigit(v[7]) {
		return &Error{http.StatusBadRequest, "bad_version"}
	}
	if v[5] != '1' {
		// HTTP/2's preface and anything else but 1.x: net/http's own
		// answer, 505.
		return &Error{http.StatusHTTPVersionNotSupported, "unsupported_version"}
	}
	c.head.http10 = v[7] == '0'
	return nil
}

// fieldLine checks a header field line, name ":" OWS value OWS, and keeps
// what the framing needs of it.
func (c *Conn) fieldLine(line []byte) *Error {
	name, value, e := field(line)
	if e != nil {
		return e
	}
	h := &c.head
	switch {
	case equalFold(name, "content-length"):
		if !isDigits(value) {
			// No sign, no space or comma inside, no list: a recipient
			// that read "+5" or "5, 5" another way would frame the body
			// otherwise.
			return &Error{http.StatusBadRequest, "bad_content_length"}
		}
		if h.hasCL && !bytes.Equal(h.cl, value) {
			return &Error{http.StatusBadRequest, "content_length_conflict"}
		}
		h.cl, h.hasCL = append(h.cl[:0], value...), true // value is the buffer's
	case equalFold(name, "transfer-encoding"):
		h.teLines++
		for coding := range bytes.SplitSeq(value, []byte(",")) {
			h.teCodings++
			h.teChunkedBefore = h.teChunkedBefore || h.teChunkedLast
			h.teChunkedLast = equalFold(trimOWS(coding), "chunked")
		}
	case equalFold(name, "connection"):
		for token := range bytes.SplitSeq(value, []byte(",")) {
			if equalFold(trimOWS(token), "upgrade") {
				h.connUp = true
			}
		}
	case equalFold(name, "upgrade"):
		h.upgrade = h.upgrade || len(value) > 0
	case bytes.IndexByte(name, '_') >= 0 && (underscored(name, "transfer-encoding") || underscored(name, "content-length")):
		// "Transfer_Encoding" frames nothing here, but servers that read
		// header fields through CGI's names (PHP, WSGI, Rack behind some
		// front ends) take it for Transfer-Encoding, and read the body the
		// gateway sends them otherwise.
		return &Error{http.StatusBadRequest, "underscore_framing_field"}
	}
	return nil
}

// underscored reports whether name is lower with some of its dashes
// written as underscores, ASCII case ignored.
func underscored(name []byte, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i, x := range name {
		if x == '_' && lower[i] == '-' {
			continue
		}
		if !equalFold(name[i:i+1], lower[i:i+1]) {
			return false
		}
	}
	return true
}

// endHead checks the framing a whole head asks for (RFC 9112 §6).
func (c *Conn) endHead() *Error {
	h := &c.head
	if h.lines == 0 {
		return &Error{http.StatusBadRequest, "bad_request_line"}
	}
	if h.teLines == 0 {
		return nil
	}
	switch {
	case h.http10:
		// HTTP/1.0 has no transfer codings, and net/http ignores the
		// field there: a chunked body would be read as the next request
		// (RFC 9112 §6.1).
		return &Error{http.StatusBadRequest, "transfer_encoding_http10"}
	case h.hasCL:
		// The CL.TE and TE.CL smuggling: a front that frames by one and a
		// server by the other part ways at the body's end (RFC 9112
		// §6.1). nginx and Envoy refuse it; net/http would go by the
		// Transfer-Encoding.
		return &Error{http.StatusBadRequest, "transfer_encoding_with_content_length"}
	case !h.teChunkedLast:
		// Without chunked last, the body's length cannot be known (RFC
		// 9112 §6.3).
		return &Error{http.StatusBadRequest, "transfer_encoding_not_chunked"}
	case h.teChunkedBefore:
		return &Error{http.StatusBadRequest, "transfer_encoding_chunked_twice"}
	}
	if h.teCodings > 1 || h.teLines > 1 {
		// A coding besides chunked, which nothing here decodes.
		return &Error{http.StatusNotImplemented, "transfer_encoding_unsupported"}
	}
	return nil
}

// trailerField checks a trailer field line: a field line, and not one of
// the fields that frame a message, which a trailer may not carry (RFC 9110
// §6.5.1).
func trailerField(line []byte) string {
	name, _, e := field(line)
	if e != nil {
		return "trailer_" + e.Reason
	}
	for _, f := range []string{"content-length", "transfer-encoding", "host", "trailer", "connection", "upgrade", "te"} {
		if equalFold(name, f) {
			return "trailer_framing_field"
		}
	}
	return ""
}

// field splits a field line into its name and its value without the
// surrounding white space, refusing anything RFC 9110 §5 does not allow
// there.
func field(line []byte) (name, value []byte, e *Error) {
	if line[0] == ' ' || line[0] == '\t' {
		// Obsolete line folding (RFC 9112 §5.2): refused rather than
		// unfolded, as a front that unfolds differently would see other
		// fields.
		return nil, nil, &Error{http.StatusBadRequest, "obs_fold"}
	}
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		// No space before the colon either: "Transfer-Encoding :" is a
		// field some read and others do not (RFC 9112 §5.1).
		return nil, nil, &Error{http.StatusBadRequest, "bad_field_name"}
	}
	value = trimOWS(line[colon+1:])
	for _, b := range value {
		if b < ' ' && b != '\t' || b == 0x7f {
			return nil, nil, &Error{http.StatusBadRequest, "control_in_field"}
		}
	}
	return line[:colon], value, nil
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// equalFold reports whether b is lower, ASCII case ignored.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, x := range b {
		if x != lower[i] && ('A' > x || x > 'Z' || x+'a'-'A' != lower[i]) {
			return false
		}
	}
	return true
}

// tchar is the table of RFC 9110's token characters.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, x := range b {
		if !tchar[x] {
			return false
		}
	}
	return true
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// isDigits reports whether b is a decimal number that fits an int64.
func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, x := range b {
		if !isDigit(x) {
			return false
		}
	}
	// Leading zeros say nothing; past them, 19 digits may still be too
	// many for an int64.
	t := bytes.TrimLeft(b, "0")
	return len(t) < 19 || len(t) == 19 && string(t) <= "9223372036854775807"
}

// parseDigits is the value of b, which isDigits accepted.
func parseDigits(b []byte) int64 {
	var n int64
	for _, x := range b {
		n = n*10 + int64(x-'0')
	}
	return n
}
