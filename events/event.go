package events

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// The event types the gateway records.
const (
	// TypeBreakerRejected is a request an open breaker turned away, with
	// fallback.record set; these are what "floodgate events replay" sends.
	TypeBreakerRejected = "breaker_rejected"
	// TypeRateLimited is a request a limit rejected (events.audit rejected
	// or all).
	TypeRateLimited = "rate_limited"
	// TypeOverloaded is a request a route's protection turned away (the
	// upstream was at the limit learned for it), with fallback.record
	// set; "floodgate events replay" sends these too.
	TypeOverloaded = "overloaded"
	// TypeAdmitted is a request every limit admitted (events.audit all).
	TypeAdmitted = "admitted"
	// TypeAdminAction is an operator's reset or forced breaker through the
	// admin API (events.audit rejected or all), recorded by the instance
	// that received the call. It carries no request: Method and Path are
	// empty, Action says what was done.
	TypeAdminAction = "admin_action"
)

// The actions of a TypeAdminAction event.
const (
	// ActionReset is a limit key reset: Limit, Keys and Fallback name it.
	ActionReset = "reset"
	// ActionForceBreaker is a breaker forced: State, TTL, Before and
	// After say how.
	ActionForceBreaker = "force_breaker"
	// ActionOverride is a runtime override set: Limit names it, Before
	// and After are the values before and after it ("rate=400/s
	// burst=40"), TTL how long it lasts, Reason why.
	ActionOverride = "override"
	// ActionOverrideRemoved is a runtime override removed: Before is
	// what it was.
	ActionOverrideRemoved = "override_removed"
)

// Event is one recorded request. Its JSON form is what every sink stores
// and what replay reads back, so the field names are part of the contract.
type Event struct {
	// ID is unique and stays the same across redelivery, so a consumer
	// can discard duplicates and an upstream can use it as an idempotency
	// key. Record fills it when empty.
	ID string `json:"id"`
	// Time is when the gateway decided. Record fills it when zero.
	Time time.Time `json:"time"`
	// Type is one of the Type constants.
	Type string `json:"type"`
	// Route is the route's id.
	Route string `json:"route"`
	// RequestID is the request id the gateway passed on or generated.
	RequestID string `json:"request_id,omitempty"`
	// Method is the request method.
	Method string `json:"method"`
	// Path is the cleaned request path (package pathclean), in its escaped
	// form, before any strip_prefix: what the route matched.
	Path string `json:"path"`
	// Query is the raw query, without "?". Empty: none.
	Query string `json:"query,omitempty"`
	// Keys are the key values of the route's limits: limit name -> one
	// value per key part. Nil: none were resolved.
	Keys map[string][]string `json:"keys,omitempty"`
	// Fallback names the limits in Keys whose values are those of the
	// limit's fallback key, which the request's key parts were missing
	// for: the user id "10.0.0.1" and the fallback IP 10.0.0.1 are
	// different keys. Nil: every value in Keys is of the limit's key.
	Fallback []string `json:"fallback,omitempty"`
	// Limit is, for a rate-limit decision, the limit that decided it.
	Limit string `json:"limit,omitempty"`
	// Headers are the request headers named in events.headers that the
	// request carried. Nil: none.
	Headers map[string][]string `json:"headers,omitempty"`
	// Body is at most events.max_body bytes of the request body.
	Body []byte `json:"body,omitempty"`
	// Truncated says the body was longer than Body; replay skips such
	// events, since it cannot send the request as it was.
	Truncated bool `json:"truncated,omitempty"`

	// The fields below describe an admin action (TypeAdminAction) and are
	// empty in every other event.

	// Action is one of the Action constants.
	Action string `json:"action,omitempty"`
	// By names who asked.
	By string `json:"by,omitempty"`
	// Scope is where the action was carried out: "fleet" (every instance
	// sharing the store) or "instance".
	Scope string `json:"scope,omitempty"`
	// Instance is the id of the instance that received the call, the one
	// the fleet's announcements name.
	Instance string `json:"instance,omitempty"`
	// State is the force asked for: open, closed or auto.
	State string `json:"state,omitempty"`
	// TTL is how long the force lasts, in seconds; zero: until auto.
	TTL float64 `json:"ttl,omitempty"`
	// Before and After are the breaker's state on the receiving instance
	// before and after the force, spelled as GET /admin/breakers does
	// (OPEN, CLOSED, HALF_OPEN).
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// Reason is the operator's word on an override.
	Reason string `json:"reason,omitempty"`
	// Version is the version of the runtime overrides that an override's
	// change made.
	Version int64 `json:"version,omitempty"`
}

// idGen makes event IDs: 48 bits of milliseconds since the epoch, then 32
// random bits drawn once per process, then a 48-bit counter that starts at
// a random value. The time prefix makes IDs sort roughly by time across
// gateways (as ULIDs do); the random prefix keeps two gateways from ever
// making the same ID in the same millisecond; the counter keeps one
// gateway's IDs distinct without drawing randomness for every event, which
// would cost a system call on the request path.
type idGen struct {
	prefix uint32
	ctr    atomic.Uint64
}

var ids = newIDGen()

func newIDGen() *idGen {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	g := &idGen{prefix: binary.BigEndian.Uint32(b[:4])}
	g.ctr.Store(binary.BigEndian.Uint64(b[2:]) & (1<<48 - 1))
	return g
}

// next returns a 32-character lowercase hex ID for an event at now.
func (g *idGen) next(now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	binary.BigEndian.PutUint64(b[0:8], ms<<16)
	binary.BigEndian.PutUint32(b[6:10], g.prefix)
	c := g.ctr.Add(1)
	binary.BigEndian.PutUint16(b[10:12], uint16(c>>32))
	binary.BigEndian.PutUint32(b[12:16], uint32(c))
	return hex.EncodeToString(b[:])
}

// NewID returns a fresh event ID, for a caller that wants to know it before
// Record.
func NewID() string { return ids.next(time.Now()) }

// CaptureBody reads up to maxBytes+1 bytes of body, so that the gateway can
// keep the first maxBytes in an event and still know whether there was more.
// kept is at most maxBytes; truncated says the body was longer (or could
// not be read to its end); rest yields the whole body as it was, the bytes
// already read included, for the upstream. A read error other than EOF
// marks the body truncated and comes back from rest after the bytes read.
// A maxBytes below zero is taken as zero: no body is kept, and any body at all
// is truncated.
func CaptureBody(body io.Reader, maxBytes int64) (kept []byte, truncated bool, rest io.Reader) {
	if body == nil {
		return nil, false, nil
	}
	maxBytes = max(maxBytes, 0)
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(body, maxBytes+1))
	read := buf.Bytes()
	switch {
	case err != nil:
		return read[:min(n, maxBytes)], true, io.MultiReader(bytes.NewReader(read), errReader{err})
	case n > maxBytes:
		return read[:maxBytes], true, io.MultiReader(bytes.NewReader(read), body)
	default:
		return read, false, bytes.NewReader(read)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// KeepHeaders returns the headers of h named in names (events.headers),
// under their canonical names, or nil when h has none of them: an event
// keeps only the headers the operator chose, never, say, a Cookie that
// nobody asked for.
func KeepHeaders(h http.Header, names []string) map[string][]string {
	var kept map[string][]string
	for _, name := range names {
		k := http.CanonicalHeaderKey(name)
		if vs, ok := h[k]; ok {
			if kept == nil {
				kept = make(map[string][]string, len(names))
			}
			kept[k] = append([]string(nil), vs...)
		}
	}
	return kept
}
