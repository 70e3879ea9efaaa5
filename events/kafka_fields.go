package events

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"
)

// kafkaFields are the fields of an event's JSON that a Kafka record's key
// and headers need. The spool keeps only the id and type beside the JSON,
// so the sink reads these back in the forwarder, off the request's path;
// the spool's format stays as it is.
type kafkaFields struct {
	Route string              `json:"route"`
	Keys  map[string][]string `json:"keys"`
}

// readKafkaFields returns the route and the limiting key (limitingKey) of
// the event JSON data. It walks the top level of the object once, decoding
// only "route" and "keys" and skipping the rest, which costs a fraction of
// decoding the event; JSON it does not expect (not written by encode) is
// decoded by encoding/json instead. For any valid JSON the result is
// encoding/json's (FuzzReadKafkaFields).
func readKafkaFields(data []byte) (route string, key []byte) {
	if route, key, ok := scanKafkaFields(data); ok {
		return route, key
	}
	var f kafkaFields
	_ = json.Unmarshal(data, &f) // a record the recorder wrote always decodes
	return f.Route, limitingKey(f.Keys)
}

// scanKafkaFields is readKafkaFields's fast path; !ok: fall back.
func scanKafkaFields(data []byte) (route string, key []byte, ok bool) {
	s := jscan{b: data}
	if !s.eat('{') {
		return "", nil, false
	}
	if s.eat('}') {
		return "", nil, s.end()
	}
	var seenRoute, seenKeys bool
	for {
		name, ok := s.str(true)
		if !ok || !s.eat(':') {
			return "", nil, false
		}
		switch string(name) {
		case "route":
			v, ok := s.str(true)
			if !ok || seenRoute {
				return "", nil, false // a repeated field: leave it to encoding/json
			}
			seenRoute, route = true, string(v)
		case "keys":
			if seenKeys {
				return "", nil, false
			}
			seenKeys = true
			if key, ok = s.keys(); !ok {
				return "", nil, false
			}
		default:
			if !s.skip() || !isASCIILower(name) {
				// A field named in another case may be route or keys to
				// encoding/json, which matches names without case.
				return "", nil, false
			}
		}
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return route, key, s.end()
		}
		return "", nil, false
	}
}

// isASCIILower reports that name has no upper-case letters and no bytes
// that case folding could make "route" or "keys" of (the Kelvin sign, the
// long s): encoding/json would not take it for either field.
func isASCIILower(name []byte) bool {
	for _, c := range name {
		if 'A' <= c && c <= 'Z' || c >= 0x80 {
			return false
		}
	}
	return true
}

// jscan reads JSON written by encode: no white space between tokens is
// expected, and anything unexpected says !ok rather than guessing.
type jscan struct {
	b []byte
	i int
}

func (s *jscan) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *jscan) end() bool { return s.i == len(s.b) }

// str reads a string and returns its value, unescaped; without escapes
// the value aliases the input. Without check, a string without escapes is
// taken as it is, for a field whose value is skipped: the bytes of one
// encode wrote are valid.
func (s *jscan) str(check bool) ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	end := bytes.IndexByte(s.b[start:], '"')
	if end < 0 {
		return nil, false
	}
	raw := s.b[start : start+end]
	if bytes.IndexByte(raw, '\\') < 0 {
		s.i = start + end + 1
		if !check || utf8.Valid(raw) && !hasControl(raw) {
			return raw, true
		}
		// Bytes encoding/json would refuse or replace with U+FFFD.
		return s.unquote(start - 1)
	}
	// Escapes: the closing quote is the first one not escaped.
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			s.i++
			return s.unquote(start - 1)
		case '\\':
			s.i += 2
		default:
			s.i++
		}
	}
	return nil, false
}

// unquote decodes the string from the quote at from to s.i.
func (s *jscan) unquote(from int) ([]byte, bool) {
	var v string
	if json.Unmarshal(s.b[from:s.i], &v) != nil {
		return nil, false
	}
	return []byte(v), true
}

// hasControl reports a byte below 0x20, which JSON allows in a string
// only escaped.
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// skip passes over one value of any kind.
func (s *jscan) skip() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		_, ok := s.str(false)
		return ok
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, ok := s.str(false); !ok {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	// A number, true, false or null: up to the next delimiter.
	start := s.i
	for s.i < len(s.b) && s.b[s.i] != ',' && s.b[s.i] != '}' && s.b[s.i] != ']' {
		s.i++
	}
	return s.i > start
}

// keys reads the "keys" object (limit name -> values) and returns the
// limiting key: the values of the name that sorts first, joined by "|".
func (s *jscan) keys() ([]byte, bool) {
	if s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return nil, true
	}
	if !s.eat('{') {
		return nil, false
	}
	if s.eat('}') {
		return nil, true
	}
	var first []byte  // the name that sorts first so far
	var vals [][]byte // its values
	var nbuf [8][]byte
	names := nbuf[:0]
	for {
		name, ok := s.str(true)
		if !ok || !s.eat(':') {
			return nil, false
		}
		if slices.ContainsFunc(names, func(n []byte) bool { return bytes.Equal(n, name) }) {
			return nil, false // a repeated name: leave it to encoding/json
		}
		names = append(names, name)
		better := len(names) == 1 || bytes.Compare(name, first) < 0
		if better {
			first, vals = name, vals[:0]
		}
		if !s.eat('[') {
			if s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null" {
				s.i += 4
			} else {
				return nil, false
			}
		} else if !s.eat(']') {
			for {
				v, ok := s.str(true)
				if !ok {
					return nil, false
				}
				if better {
					vals = append(vals, v)
				}
				if s.eat(',') {
					continue
				}
				if !s.eat(']') {
					return nil, false
				}
				break
			}
		}
		if s.eat(',') {
			continue
		}
		if !s.eat('}') {
			return nil, false
		}
		break
	}
	return joinKey(vals, func(b, v []byte) []byte { return append(b, v...) }), true
}

// limitingKey is the record key of an event whose limits resolved keys:
// the values of the key of the limit whose name sorts first, joined by
// "|". The same limit for every event of a route, rejected or admitted,
// so that all the events of one user (one key value) of a route hash to
// one partition and stay in order there; the limit that rejected a
// request would put one user's rejections and admissions on different
// partitions. Nil when the event has no key (an admin action other than a
// reset, a route without limits): the client then spreads such records.
func limitingKey(keys map[string][]string) []byte {
	if len(keys) == 0 {
		return nil
	}
	first, had := "", false
	for name := range keys {
		if !had || jsonText(name) < jsonText(first) {
			first, had = name, true
		}
	}
	return joinKey(keys[first], appendJSONText)
}

// jsonText is s as it reads back from the event's JSON: each byte that is
// not valid UTF-8 replaced with U+FFFD, as encoding/json (and encode)
// write it, so that a record's key is the same whether it was made from
// the event or read back from the spool.
func jsonText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendJSONText(nil, s))
}

// appendJSONText appends jsonText(s) to b.
func appendJSONText(b []byte, s string) []byte {
	if utf8.ValidString(s) {
		return append(b, s...)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return b
}

// joinKey joins a limit's key values with "|", each appended by add, in
// one allocation when add appends them as they are; never nil.
func joinKey[S string | []byte](vs []S, add func([]byte, S) []byte) []byte {
	n := max(len(vs)-1, 0)
	for _, v := range vs {
		n += len(v)
	}
	key := make([]byte, 0, n)
	for i, v := range vs {
		if i > 0 {
			key = append(key, '|')
		}
		key = add(key, v)
	}
	return key
}
