package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzReadKafkaFields holds the route and limiting key read from an
// event's JSON to encoding/json's reading of it: for the recorder's own
// encoding of any event, and for any JSON object at all.
func FuzzReadKafkaFields(f *testing.F) {
	f.Add("coupon", "user", "u-1", "ip", "10.0.0.1", "X-User-Id", []byte(`{"route":"a","keys":{"b":["1","2"],"a":["3"]}}`))
	f.Add("é\u2028", "k\"", "v\\", "", "", "", []byte(`{"ROUTE":"x","route":"y"}`))
	f.Add("\xff", "\xc3", "v\xc3", "K", "w", "h", []byte(`{"keys":{"a":["1"],"a":["2"]},"x":[{"y":"]}"}],"keys":null}`))
	f.Add("r", "a", "", "b", "", "", []byte(`{"rout\u0065":"x","keys":{"\u0061":["\u00e9"]},"n":-1.5e3,"t":true}`))
	f.Fuzz(func(t *testing.T, route, k1, v1, k2, v2, header string, raw []byte) {
		e := &Event{ID: "1", Time: time.Unix(1765000000, 5), Type: TypeAdmitted, Route: route, Method: "GET", Path: "/p"}
		if k1 != "" || k2 != "" {
			e.Keys = map[string][]string{k1: {v1, v2}, k2: {v2}}
		}
		if header != "" {
			e.Headers = map[string][]string{header: {v1}}
		}
		data, err := encode(e)
		if err != nil {
			t.Fatal(err)
		}
		// A record sent straight from the event gets the key and route
		// one read back from the spool gets; limit names are tokens (two
		// names of invalid UTF-8 could be one in the JSON).
		if route, key := readKafkaFields(data); utf8.ValidString(k1) && utf8.ValidString(k2) &&
			(route != jsonText(e.Route) || !bytes.Equal(key, limitingKey(e.Keys))) {
			t.Fatalf("from the event: %q, %q; from its JSON: %q, %q", jsonText(e.Route), limitingKey(e.Keys), route, key)
		}
		for _, in := range [][]byte{data, raw} {
			var f kafkaFields
			if json.Unmarshal(in, &f) != nil && bytes.Equal(in, raw) {
				continue // not an event: readKafkaFields need only not panic
			}
			route, key := readKafkaFields(in)
			if want := limitingKey(f.Keys); route != f.Route || !bytes.Equal(key, want) || (key == nil) != (want == nil) {
				t.Fatalf("readKafkaFields(%s) = %q, %q; encoding/json's %q, %q", in, route, key, f.Route, want)
			}
		}
		_, _ = readKafkaFields(raw)
	})
}

// TestScanKafkaFieldsFast: the recorder's own events take the fast path.
func TestScanKafkaFieldsFast(t *testing.T) {
	e := &Event{ID: NewID(), Time: time.Now(), Type: TypeRateLimited, Route: "coupon", Method: "GET", Path: "/c",
		Keys:    map[string][]string{"user": {"u-1", "用户"}, "ip": {"10.0.0.1"}, "global": {"coupon"}},
		Headers: map[string][]string{"X-User-Id": {"u-1"}}, Body: []byte("{}"), Truncated: true, Limit: "user"}
	data, err := encode(e)
	if err != nil {
		t.Fatal(err)
	}
	route, key, ok := scanKafkaFields(data)
	if !ok || route != "coupon" || string(key) != "coupon" {
		t.Fatalf("scanKafkaFields = %q, %q, %v; want coupon, coupon, true", route, key, ok)
	}
}

// BenchmarkReadKafkaFields is the record key and headers of an audit
// event of the seeds' four limits, read by the scan and by encoding/json.
func BenchmarkReadKafkaFields(b *testing.B) {
	e := &Event{ID: NewID(), Time: time.Now(), Type: TypeRateLimited, Route: "coupon", RequestID: "0123456789abcdef0123456789abcdef",
		Method: "GET", Path: "/coupon/claim", Keys: map[string][]string{"user": {"u-12345"}, "ip": {"10.1.2.3"}, "global": {"coupon"}, "api": {"/coupon/claim"}},
		Limit: "user", Headers: map[string][]string{"X-User-Id": {"u-12345"}}}
	data, _ := encode(e)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = readKafkaFields(data)
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var f kafkaFields
			_ = json.Unmarshal(data, &f)
			_ = limitingKey(f.Keys)
		}
	})
}
