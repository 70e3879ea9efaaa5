package answer

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync/atomic"
	"unsafe"
)

// maxRequestID bounds a request id a client may send; a longer one, or one
// with a byte outside the set below, is replaced by a generated one, so a
// client can neither inject into logs and JSON nor make us store a 1 MB id.
const maxRequestID = 128

// WellFormedID reports whether a request id a client sent may be used as
// it is: at most 128 bytes of letters, digits and - _ . : + / =.
func WellFormedID(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	return true
}

// IDSource makes request ids unique across processes without a syscall per
// request: a random per-process prefix and a counter.
type IDSource struct {
	prefix string
	n      atomic.Uint64
}

// NewIDSource returns a source with a fresh random prefix.
func NewIDSource() *IDSource {
	var b [8]byte
	rand.Read(b[:])
	return &IDSource{prefix: hex.EncodeToString(b[:]) + "-"}
}

// Prefix is the source's random prefix, unique to it: an instance id.
func (s *IDSource) Prefix() string { return s.prefix }

// Next returns a new request id.
func (s *IDSource) Next() string {
	var buf [idLen]byte
	return string(s.append(buf[:0]))
}

// idLen bounds a generated id: 17 bytes of prefix and at most 13 base-36
// digits of the counter.
const idLen = 32

func (s *IDSource) append(b []byte) []byte {
	b = append(b, s.prefix...)
	return strconv.AppendUint(b, s.n.Add(1), 36)
}

// idValue is a new request id as a header value, in one allocation: the
// one-element array the slice holds and the bytes its string reads. It
// cannot be a buffer used again, since net/http reads the response's
// header map after the handler returns.
type idValue struct {
	v [1]string
	b [idLen]byte
}

// nextValue returns a new request id as a header value, a one-element
// slice capped at its length.
func (s *IDSource) nextValue() []string {
	iv := new(idValue)
	b := s.append(iv.b[:0])
	if len(b) > len(iv.b) {
		// A prefix longer than NewIDSource makes: b is another array.
		iv.v[0] = string(b)
	} else {
		// The bytes are never written again: the string may read them.
		iv.v[0] = unsafe.String(&iv.b[0], len(b))
	}
	return iv.v[:]
}

// Use returns r's request id and puts it on the request and the response in
// header, a canonical header name: the client's when it sent one
// well-formed value, else a new one, which replaces what the client sent.
// Of two values, a handler could log one and the answer carry the other.
// The request and the response share one one-element slice, capped so that
// adding to either cannot change the other.
func (s *IDSource) Use(r *http.Request, w http.ResponseWriter, header string) string {
	idv := r.Header[header]
	if len(idv) == 1 && WellFormedID(idv[0]) {
		idv = idv[:1:1]
	} else {
		idv = s.nextValue()
		r.Header[header] = idv
	}
	w.Header()[header] = idv
	return idv[0]
}
