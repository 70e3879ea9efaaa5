package gateway

import (
	"encoding/binary"
	"time"

	"github.com/floodgate-gw/floodgate/internal/topk"
)

// The keys each limit rejects most are counted in a bounded sketch per
// route and limit (per limit for a global one, which every route shares),
// kept across reloads: the answer to "who is being blocked, and how
// often" during a surge.

// topEpoch is how long one epoch of a sketch lasts: an answer covers the
// current epoch and the one before, so from 5 to 10 minutes.
const topEpoch = 5 * time.Minute

// TopKey is one rejected key: its values, one per part of the limit's key
// (or of its fallback key), and how often it was rejected lately. The
// true count is between Count-Error and Count. Truncated says the values
// were cut: a key longer than 256 bytes is counted by its beginning.
type TopKey struct {
	Key       []string `json:"key"`
	Count     uint64   `json:"count"`
	Error     uint64   `json:"error"`
	Truncated bool     `json:"truncated,omitempty"`
}

// TopKeys are the keys a limit rejected most since Since, most rejected
// first.
type TopKeys struct {
	Route string    `json:"route"`
	Limit string    `json:"limit"`
	Since time.Time `json:"since"`
	Keys  []TopKey  `json:"keys"`
}

// MaxTopKeys is the most keys TopRejected answers: the sketch's size.
const MaxTopKeys = topk.DefaultSize

func newTopSketch() *topk.Sketch { return topk.New(topk.DefaultSize, topEpoch) }

// countRejected adds one rejection of values to l's sketch. The values
// are written length-prefixed into a buffer on the stack, so a key the
// sketch holds costs no allocation, and parts cannot run into each other.
func (l *limitSpec) countRejected(now time.Time, values []string) {
	if l.top == nil {
		return
	}
	var buf [topk.MaxKey + 1]byte
	b := buf[:0]
	for _, v := range values {
		if len(b)+binary.MaxVarintLen64+len(v) > len(buf) {
			// Longer than the sketch keeps: the rest is cut there.
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
			break
		}
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	l.top.Add(now, b)
}

// decodeTopKey reads back the values countRejected wrote; a key that was
// cut gives its last value as far as it goes.
func decodeTopKey(s string) (vs []string, cut bool) {
	for len(s) > 0 {
		n, w := binary.Uvarint([]byte(s))
		if w <= 0 {
			return vs, true
		}
		s = s[w:]
		if uint64(len(s)) < n {
			return append(vs, s), true
		}
		vs, s = append(vs, s[:n]), s[n:]
	}
	return vs, false
}

// TopRejected returns the n keys the limit rejected most lately (n at
// most MaxTopKeys). route is a route id, or "global" for a global limit.
// The error wraps ErrNoLimit for an unknown route or limit.
func (g *Gateway) TopRejected(route, name string, n int) (TopKeys, error) {
	spec, err := g.gen.Load().findLimit(route, name)
	if err != nil {
		return TopKeys{}, err
	}
	n = min(max(n, 0), MaxTopKeys)
	entries, since := spec.top.Top(g.now(), n)
	out := TopKeys{Route: route, Limit: name, Since: since, Keys: make([]TopKey, 0, len(entries))}
	for _, e := range entries {
		vs, cut := decodeTopKey(e.Key)
		out.Keys = append(out.Keys, TopKey{Key: vs, Count: e.Count, Error: e.Error, Truncated: e.Truncated || cut})
	}
	return out, nil
}
