package gateway

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

func wellFormedID(s string) bool {
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

// idSource makes request ids unique across processes without a syscall per
// request: a random per-process prefix and a counter.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

func newIDSource() *idSource {
	var b [8]byte
	rand.Read(b[:])
	return &idSource{prefix: hex.EncodeToString(b[:]) + "-"}
}

func (s *idSource) next() string {
	var buf [40]byte
	b := append(buf[:0], s.prefix...)
	b = strconv.AppendUint(b, s.n.Add(1), 36)
	return string(b)
}
