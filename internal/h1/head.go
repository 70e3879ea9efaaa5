package h1

import (
	"bufio"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes req as Request.Write does. A request without a body
// (most of a gateway's) has its head written here, byte for byte as
// Request.Write would (FuzzWriteHead), without Request.Write's
// formatting, sorting and transfer writer, which cost four allocations a
// request; anything else goes to Request.Write.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	if writeHead(bw, req) {
		return nil
	}
	return req.Write(bw)
}

// maxFastFields bounds the header fields of a head writeHead writes; one
// with more goes to Request.Write.
const maxFastFields = 32

// writeHead writes the head of req, a request without a body, and reports
// true; or writes nothing and reports false when req is not one it
// writes as Request.Write does: a body, a trailer, a transfer coding,
// Close, an opaque or CONNECT target, a host that is not plain ASCII or
// carries a zone, a control byte or a line break anywhere, a field name
// that is not a token, more than maxFastFields fields, a client trace.
func writeHead(bw *bufio.Writer, req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody || req.ContentLength != 0 || len(req.TransferEncoding) > 0 ||
		req.Trailer != nil || req.Close || req.URL == nil || req.URL.Opaque != "" || req.Method == "CONNECT" ||
		len(req.Header) > maxFastFields || httptrace.ContextClientTrace(req.Context()) != nil {
		return false
	}
	method := req.Method
	if method == "" {
		method = "GET"
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !plainASCII(host) || strings.IndexByte(host, '%') >= 0 || !httpguts.ValidHostHeader(host) {
		return false
	}
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	query := req.URL.ForceQuery || req.URL.RawQuery != ""
	if hasCTL(method) || hasCTLOrTab(path) || hasCTLOrTab(req.URL.RawQuery) {
		return false
	}
	ua := "Go-http-client/1.1"
	if vs, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(vs) > 0 {
			ua = vs[0]
		}
	}
	var small [maxFastFields]string
	keys := small[:0]
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // not written
		case "User-Agent":
			if len(vs) > 0 && hasCTL(vs[0]) {
				return false
			}
			continue // written first
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vs {
			if hasCTL(v) {
				return false
			}
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)

	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(path)
	if query {
		bw.WriteByte('?')
		bw.WriteString(req.URL.RawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	if ua != "" { // trimmed after the test, as Request.Write does
		bw.WriteString("User-Agent: ")
		bw.WriteString(trimSpace(ua))
		bw.WriteString("\r\n")
	}
	if method == "POST" || method == "PUT" || method == "PATCH" {
		// Request.Write's, for servers that expect one with these.
		bw.WriteString("Content-Length: 0\r\n")
	}
	for _, k := range keys {
		for _, v := range req.Header[k] {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(trimSpace(v))
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
	return true
}

// plainASCII reports that s has no byte above 0x7f, which Request.Write
// would turn to punycode.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// hasCTL reports a control byte (a tab aside) or DEL in s: Request.Write
// refuses some in the target and rewrites line breaks in values.
func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// hasCTLOrTab is hasCTL with tabs too: Request.Write refuses every
// control byte in the request target.
func hasCTLOrTab(s string) bool {
	return strings.IndexByte(s, '\t') >= 0 || hasCTL(s)
}

// trimSpace trims spaces and tabs at both ends, as textproto.TrimString
// does a value without line breaks.
func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
