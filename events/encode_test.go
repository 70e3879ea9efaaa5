package events

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// FuzzEncode holds encode to json.Marshal's bytes, whatever the strings,
// times and maps of the event.
func FuzzEncode(f *testing.F) {
	f.Add("01HZX", int64(1765000000123456789), 0, "rate_limited", "coupon", "r-1", "GET", "/coupon", "a=1&b=<2>",
		"user", "u-1\u2028", "ip", "10.0.0.1", "X-User-Id", []byte("body"), true, "user")
	f.Add("", int64(-62135596800000000), 3600, "", "", "", "", "", "", "", "", "", "", "", []byte{}, false, "")
	f.Add("\xff\x00\"\\\b\f\n\r\t\x7f&", int64(253402300800000000), -86400, "\xe2\x80", "é", "<", ">", "&", "\u2029",
		"k", "v\xc3", "k", "w", "h", []byte{0xff}, false, "l")
	f.Fuzz(func(t *testing.T, id string, nanos int64, offset int, typ, route, rid, method, path, query,
		k1, v1, k2, v2, header string, body []byte, truncated bool, limit string) {
		e := &Event{
			ID: id, Time: time.Unix(0, nanos).In(time.FixedZone("z", offset)), Type: typ, Route: route,
			RequestID: rid, Method: method, Path: path, Query: query, Limit: limit, Body: body, Truncated: truncated,
		}
		if k1 != "" || v1 != "" {
			e.Keys = map[string][]string{k1: {v1, v2}, k2: nil}
			e.Fallback = []string{k2}
		}
		if header != "" {
			e.Headers = map[string][]string{header: {v1}, strings.ToUpper(header): {}}
		}
		want, werr := json.Marshal(e)
		got, gerr := encode(e)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("encode error %v, json.Marshal's %v", gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encode:\n%s\njson.Marshal:\n%s", got, want)
		}
	})
}

// TestEncodeAdminAction: an admin action's event goes to json.Marshal.
func TestEncodeAdminAction(t *testing.T) {
	e := &Event{ID: "1", Time: time.Unix(1, 0).UTC(), Type: TypeAdminAction, Action: ActionOverride, TTL: 1.5, Version: 3}
	want, _ := json.Marshal(e)
	if got, err := encode(e); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("encode %s %v, want %s", got, err, want)
	}
}

// BenchmarkEncode is an audit event of a request with the seeds' four
// limits, by encode and by json.Marshal.
func BenchmarkEncode(b *testing.B) {
	e := &Event{ID: NewID(), Time: time.Now(), Type: TypeRateLimited, Route: "coupon", RequestID: "0123456789abcdef0123456789abcdef",
		Method: "GET", Path: "/coupon/claim", Keys: map[string][]string{"user": {"u-12345"}, "ip": {"10.1.2.3"}, "global": {"coupon"}, "api": {"/coupon/claim"}},
		Limit: "user", Headers: map[string][]string{"X-User-Id": {"u-12345"}}}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = encode(e)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(e)
		}
	})
}
