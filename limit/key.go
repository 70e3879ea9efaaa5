package limit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Part is one component of a composite key: where the value came from
// (Kind, for example "ip" or "header:x-user-id") and the value itself.
// Fallback marks a part taken from a limit's fallback list rather than its
// key list, so that a fallback IP and a primary IP never share a counter.
type Part struct {
	Kind     string
	Value    string
	Fallback bool
}

// Key is the encoded identity of one counter of a rule: its parts, escaped
// and joined so that no two different lists of parts give the same Key.
// Keys contain no braces, so a client cannot choose a Redis Cluster slot,
// and are bounded in length whatever the values are.
type Key string

// MaxPartBytes is how much of a value a key keeps verbatim. A longer value
// is cut there and followed by the SHA-256 of the whole value, so that two
// long values that differ only at the end still differ.
const MaxPartBytes = 256

// NewKey encodes parts as Kind=Value pairs joined by ':', with "!" before
// the kind of a fallback part. Every byte of a kind or value outside
// [A-Za-z0-9-._/@+,] is written as %XX; '#' only ever introduces the digest
// of a long value. The encoding is therefore injective.
func NewKey(parts ...Part) Key {
	n := 0
	for _, p := range parts {
		n += len(p.Kind) + min(len(p.Value), MaxPartBytes) + 3
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(':')
		}
		if p.Fallback {
			b.WriteByte('!')
		}
		escape(&b, p.Kind)
		b.WriteByte('=')
		if len(p.Value) > MaxPartBytes {
			escape(&b, p.Value[:MaxPartBytes])
			sum := sha256.Sum256([]byte(p.Value))
			b.WriteByte('#')
			b.WriteString(hex.EncodeToString(sum[:]))
		} else {
			escape(&b, p.Value)
		}
	}
	return Key(b.String())
}

// StringKey is a key of one opaque part, for callers that have their own
// key already (the Go library, the Envoy descriptor entries).
func StringKey(s string) Key { return NewKey(Part{Kind: "k", Value: s}) }

const hexDigits = "0123456789ABCDEF"

func safe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '/' || c == '@' || c == '+' || c == ','
}

func escape(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
}
