package httplimit

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
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
	var buf [40]byte
	b := append(buf[:0], s.prefix...)
	b = strconv.AppendUint(b, s.n.Add(1), 36)
	return string(b)
}
