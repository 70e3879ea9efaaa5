package jwtverify

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// claims reads the payload of a verified token and checks its registered
// claims at now. nbf is returned for a NotYetValid failure.
func (v *Verifier) claims(payload []byte, now time.Time) (t *Token, nbf time.Time, err error) {
	raw, err := decodeClaims(payload)
	if err != nil {
		return nil, nbf, err
	}
	t = &Token{claims: make(map[string]claim, len(raw))}
	for name, val := range raw {
		t.claims[name] = readClaim(name, val)
	}
	if val, ok := raw["exp"]; ok {
		if t.expiry, err = numericDate("exp", val); err != nil {
			return nil, nbf, err
		}
		if !now.Before(t.expiry.Add(v.o.Leeway)) {
			return nil, nbf, fail(Expired, "exp %s is past (leeway %v)", t.expiry.UTC().Format(time.RFC3339), v.o.Leeway)
		}
	}
	if val, ok := raw["nbf"]; ok {
		if nbf, err = numericDate("nbf", val); err != nil {
			return nil, nbf, err
		}
		if now.Before(nbf.Add(-v.o.Leeway)) {
			return nil, nbf, fail(NotYetValid, "nbf %s is still to come (leeway %v)", nbf.UTC().Format(time.RFC3339), v.o.Leeway)
		}
	}
	if want := v.o.Issuer; want != "" {
		if iss := t.claims["iss"]; !isString(raw["iss"]) || iss.err != nil || iss.text != want {
			return nil, nbf, fail(Issuer, "iss is not %q", want)
		}
	}
	if want := v.o.Audience; want != "" && !hasAudience(raw["aud"], want) {
		return nil, nbf, fail(Audience, "aud does not hold %q", want)
	}
	return t, nbf, nil
}

// decodeClaims reads a token's claims: a JSON object, each value kept as
// its text, so that a number is read as it is written and a string can be
// checked before it is decoded.
//
// Two things that encoding/json lets pass are Malformed. Bytes that are
// not UTF-8, which it would decode as U+FFFD, so that "\xff" and "\xfe"
// would be one key: JSON exchanged between systems is UTF-8 (RFC 8259
// §8.1). And a claim named twice, of which it would keep the last: RFC
// 7519 §4 lets a parser reject such claims or keep the last, and an
// upstream that reads the same token keeping the first would see another
// user than the one counted.
func decodeClaims(payload []byte) (map[string]json.RawMessage, error) {
	if !utf8.Valid(payload) {
		return nil, fail(Malformed, "the claims are not UTF-8")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil || raw == nil {
		return nil, fail(Malformed, "the claims are not a JSON object")
	}
	if n := countNames(payload); n != len(raw) {
		return nil, fail(Malformed, "%d claims, of %d names: a claim is named twice", n, len(raw))
	}
	return raw, nil
}

// countNames counts the names of a valid JSON object: the colons outside
// strings at its top level. Unmarshal keeps one of each name, so fewer
// claims than names means a name came twice (perhaps escaped otherwise).
func countNames(obj []byte) int {
	n, depth, inString := 0, 0, false
	for i := 0; i < len(obj); i++ {
		c := obj[i]
		if inString {
			switch c {
			case '\\':
				i++ // an escaped character, perhaps a quote
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ':':
			if depth == 1 {
				n++
			}
		}
	}
	return n
}

// readClaim makes a claim's text for a key part: a string as it is, a
// number in its canonical decimal form; anything else is a ClaimType
// failure, made once here rather than on every request that reads it.
func readClaim(name string, val json.RawMessage) claim {
	switch val[0] {
	case '"':
		if !pairedSurrogates(val[1 : len(val)-1]) {
			// encoding/json would decode each lone half as U+FFFD, so
			// that "\ud800" and "\udbff" would be one key.
			return claim{err: fail(ClaimType, "claim %q is a string with an unpaired surrogate escape, not Unicode text", name)}
		}
		if bytes.IndexByte(val, '\\') < 0 {
			return claim{text: string(val[1 : len(val)-1])} // no escapes: the text is as written
		}
		var s string
		if err := json.Unmarshal(val, &s); err != nil {
			return claim{err: fail(ClaimType, "claim %q is not a JSON string", name)}
		}
		return claim{text: s}
	case '{':
		return claim{err: fail(ClaimType, "claim %q is an object, not a string or a number", name)}
	case '[':
		return claim{err: fail(ClaimType, "claim %q is an array, not a string or a number", name)}
	case 't', 'f':
		return claim{err: fail(ClaimType, "claim %q is a boolean, not a string or a number", name)}
	case 'n':
		return claim{err: fail(ClaimType, "claim %q is null, not a string or a number", name)}
	}
	if s, ok := canonicalNumber(string(val)); ok {
		return claim{text: s}
	}
	return claim{err: fail(ClaimType, "claim %q is a number too long to write out", name)}
}

// pairedSurrogates reports whether the \u escapes of a JSON string's
// inside (valid JSON, quotes removed) spell Unicode text: an escaped
// surrogate must be the high half of a pair whose low half follows at
// once (RFC 8259 §7). JSON's grammar allows a lone half; no character is
// one.
func pairedSurrogates(s []byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		i++ // the escaped character: one of "\/bfnrtu
		if s[i] != 'u' {
			continue
		}
		r := hex4(s[i+1 : i+5])
		i += 4
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return false // a low half first
		case r >= 0xd800 && r <= 0xdbff:
			if i+7 > len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
				return false
			}
			if lo := hex4(s[i+3 : i+7]); lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		}
	}
	return true
}

// hex4 reads the four hex digits of a \u escape, which valid JSON has.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// isString reports whether a claim's JSON is a string.
func isString(val json.RawMessage) bool { return len(val) > 0 && val[0] == '"' }

// numericDate reads exp or nbf: seconds since the epoch, possibly with a
// fraction (RFC 7519 §2).
func numericDate(name string, val json.RawMessage) (time.Time, error) {
	f, err := strconv.ParseFloat(string(val), 64)
	if err != nil || math.Abs(f) > maxNumericDate {
		return time.Time{}, fail(Malformed, "%s is not a time in seconds since the epoch", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

// hasAudience reports whether aud, a string or a list of strings, holds
// want (RFC 7519 §4.1.3).
func hasAudience(aud json.RawMessage, want string) bool {
	if isString(aud) && bytes.IndexByte(aud, '\\') < 0 {
		return string(aud[1:len(aud)-1]) == want
	}
	var v any
	if len(aud) == 0 || json.Unmarshal(aud, &v) != nil {
		return false
	}
	switch x := v.(type) {
	case string:
		return x == want
	case []any:
		for _, a := range x {
			if a == want {
				return true
			}
		}
	}
	return false
}
