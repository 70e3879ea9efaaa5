package events

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"time"
	"unicode/utf8"
)

// encode returns e's JSON, the bytes json.Marshal makes of it. With
// events.audit all, every request the gateway decides becomes an event, and
// json.Marshal's reflection cost as much as the rest of a rejection; the
// events of requests (no admin action's fields, a time JSON can spell) are
// appended here field by field instead, and everything else goes to
// json.Marshal. A fuzz test holds the two to the same bytes.
func encode(e *Event) ([]byte, error) {
	if e.Action != "" || e.By != "" || e.Scope != "" || e.Instance != "" || e.State != "" ||
		e.TTL != 0 || e.Before != "" || e.After != "" || e.Reason != "" || e.Version != 0 {
		return json.Marshal(e)
	}
	b := make([]byte, 0, 256+len(e.Query)+len(e.Path)+len(e.Body)*4/3)
	b = append(b, `{"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"time":"`...)
	var ok bool
	if b, ok = appendTime(b, e.Time); !ok {
		return json.Marshal(e) // its error: the year or zone JSON cannot hold
	}
	b = append(b, `","type":`...)
	b = appendString(b, e.Type)
	b = append(b, `,"route":`...)
	b = appendString(b, e.Route)
	if e.RequestID != "" {
		b = append(b, `,"request_id":`...)
		b = appendString(b, e.RequestID)
	}
	b = append(b, `,"method":`...)
	b = appendString(b, e.Method)
	b = append(b, `,"path":`...)
	b = appendString(b, e.Path)
	if e.Query != "" {
		b = append(b, `,"query":`...)
		b = appendString(b, e.Query)
	}
	if len(e.Keys) > 0 {
		b = append(b, `,"keys":`...)
		b = appendLists(b, e.Keys)
	}
	if len(e.Fallback) > 0 {
		b = append(b, `,"fallback":`...)
		b = appendList(b, e.Fallback)
	}
	if e.Limit != "" {
		b = append(b, `,"limit":`...)
		b = appendString(b, e.Limit)
	}
	if len(e.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = appendLists(b, e.Headers)
	}
	if len(e.Body) > 0 {
		b = append(b, `,"body":"`...)
		b = base64.StdEncoding.AppendEncode(b, e.Body)
		b = append(b, '"')
	}
	if e.Truncated {
		b = append(b, `,"truncated":true`...)
	}
	return append(b, '}'), nil
}

// appendTime appends t as time.Time's MarshalText spells it, reporting
// false for a time it refuses (a year outside 0 to 9999, a zone offset of
// a day or more).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return b, false
	}
	return t.AppendFormat(b, time.RFC3339Nano), true
}

// appendLists appends m as a JSON object of string lists, its keys sorted
// as json.Marshal sorts them; a nil list is null.
func appendLists(b []byte, m map[string][]string) []byte {
	var small [8]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		if vs := m[k]; vs == nil {
			b = append(b, "null"...)
		} else {
			b = appendList(b, vs)
		}
	}
	return append(b, '}')
}

// appendList appends vs as a JSON array of strings.
func appendList(b []byte, vs []string) []byte {
	b = append(b, '[')
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, v)
	}
	return append(b, ']')
}

// appendString appends s quoted as json.Marshal quotes a string: with its
// HTML escaping of <, > and &, U+2028 and U+2029 escaped, and each byte of
// invalid UTF-8 replaced by U+FFFD.
// jsonPlain marks the ASCII bytes a JSON string holds as they are, as
// encoding/json writes them: not a control byte, quote, backslash, or one
// of the HTML characters it escapes.
var jsonPlain = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\\<>&` {
		t[c] = false
	}
	return t
}()

func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonPlain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
