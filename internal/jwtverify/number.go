package jwtverify

import "strings"

// maxNumberText bounds the canonical text of a number claim: 1e999999 is
// valid JSON in a few bytes, and written out it would be a megabyte.
const maxNumberText = 256

// canonicalNumber writes a JSON number in one form whatever form it came
// in: plain decimal, no exponent, no leading or trailing zeros, no "+", no
// "-0", so that 42, 42.0, 4.2e1 and 420E-1 are one key, "42". ok is false
// for text that is not a JSON number, and for a number whose canonical
// form would be longer than maxNumberText.
func canonicalNumber(s string) (text string, ok bool) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, ok := parseExponent(s[i+1:])
		if !ok {
			return "", false
		}
		exp = e
	}
	intPart, frac, hasPoint := strings.Cut(mant, ".")
	if intPart == "" || !digits(intPart) || hasPoint && (frac == "" || !digits(frac)) ||
		len(intPart) > 1 && intPart[0] == '0' {
		return "", false
	}
	ds := intPart + frac
	point := len(intPart) + exp // the decimal point sits before ds[point]
	lead := len(ds) - len(strings.TrimLeft(ds, "0"))
	ds, point = ds[lead:], point-lead
	ds = strings.TrimRight(ds, "0")
	if ds == "" {
		return "0", true
	}
	size := max(len(ds), point, 0) + max(-point, 0) + 3
	if size > maxNumberText {
		return "", false
	}
	var b strings.Builder
	b.Grow(size)
	if neg {
		b.WriteByte('-')
	}
	switch {
	case point <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -point))
		b.WriteString(ds)
	case point >= len(ds):
		b.WriteString(ds)
		b.WriteString(strings.Repeat("0", point-len(ds)))
	default:
		b.WriteString(ds[:point])
		b.WriteByte('.')
		b.WriteString(ds[point:])
	}
	return b.String(), true
}

// parseExponent reads an exponent's sign and digits; one so large that
// the number could not be written within maxNumberText fails.
func parseExponent(s string) (int, bool) {
	neg := false
	switch {
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	}
	if s == "" || !digits(s) {
		return 0, false
	}
	s = strings.TrimLeft(s, "0")
	if len(s) > 6 {
		return 0, false
	}
	e := 0
	for i := 0; i < len(s); i++ {
		e = e*10 + int(s[i]-'0')
	}
	if neg {
		e = -e
	}
	return e, true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
