package pathclean

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// ErrBadPath is wrapped by every error Clean returns. The gateway answers
// such a request with 400 bad_request; the wrapped text says why.
var ErrBadPath = errors.New("pathclean: bad path")

// The errors are built once: a client that sends bad paths on purpose costs
// the gateway no allocation.
var (
	errNotAbsolute     = fmt.Errorf("%w: does not start with '/'", ErrBadPath)
	errEncodedSlash    = fmt.Errorf("%w: encoded slash (%%2F)", ErrBadPath)
	errBackslash       = fmt.Errorf("%w: backslash (%%5C)", ErrBadPath)
	errNUL             = fmt.Errorf("%w: NUL byte", ErrBadPath)
	errControl         = fmt.Errorf("%w: control byte", ErrBadPath)
	errMalformed       = fmt.Errorf("%w: malformed percent-escape", ErrBadPath)
	errAboveRoot       = fmt.Errorf("%w: '..' above the root", ErrBadPath)
	errDotParamSegment = fmt.Errorf("%w: '.' or '..' segment with ';' parameters", ErrBadPath)
)

// Byte classes of a path, as it may appear in the input.
const (
	cEncode     = iota // valid only escaped: written as %XX
	cUnreserved        // RFC 3986 §2.3: kept raw, and decoded when escaped
	cKeep              // sub-delims, ':', '@' (pchar, §3.3) and '[' ']' (which net/url accepts raw): kept raw
	cSlash
	cPercent
	cBackslash
	cControl
)

var class = func() (t [256]uint8) {
	for c := 0; c < 0x20; c++ {
		t[c] = cControl
	}
	t[0x7f] = cControl
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = cUnreserved
		t[c+'a'-'A'] = cUnreserved
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = cUnreserved
	}
	for _, c := range []byte("-._~") {
		t[c] = cUnreserved
	}
	for _, c := range []byte("!$&'()*+,;=:@[]") {
		t[c] = cKeep
	}
	t['/'] = cSlash
	t['%'] = cPercent
	t['\\'] = cBackslash
	return t
}()

const upperHex = "0123456789ABCDEF"

// unhex returns the value of an upper- or lower-case hex digit, or -1.
func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c - 'A' + 10)
	case 'a' <= c && c <= 'f':
		return int(c - 'a' + 10)
	}
	return -1
}

// Clean returns the canonical form of escapedPath, the escaped path of a
// request without its query (http.Request.URL.EscapedPath()). The result is
// still escaped and valid in a URL. An empty path is "/". Clean returns
// escapedPath itself, without allocating, when it is already clean, and an
// error wrapping ErrBadPath when the path has no safe canonical form (see
// the package documentation).
func Clean(escapedPath string) (string, error) {
	if isClean(escapedPath) {
		return escapedPath, nil
	}
	return clean(escapedPath)
}

// isClean reports whether clean(s) would return s unchanged. It only scans,
// so the common case — a path that is already clean — costs no allocation.
// When in doubt it says no and leaves the verdict to clean.
func isClean(s string) bool {
	if len(s) == 0 || s[0] != '/' {
		return false
	}
	if len(s) == 1 {
		return true
	}
	if s[len(s)-1] == '/' {
		return false
	}
	seg := 1 // where the current segment starts
	for i := 1; i < len(s); i++ {
		switch class[s[i]] {
		case cUnreserved, cKeep:
		case cSlash:
			if !plainSegment(s[seg:i]) {
				return false
			}
			seg = i + 1
		case cPercent:
			if i+2 >= len(s) {
				return false
			}
			hi, lo := s[i+1], s[i+2]
			if !isUpperHex(hi) || !isUpperHex(lo) {
				return false
			}
			v := byte(unhex(hi)<<4 | unhex(lo))
			if v == 0 || class[v] == cUnreserved || class[v] == cSlash || class[v] == cBackslash {
				return false
			}
			i += 2
		default:
			return false
		}
	}
	return plainSegment(s[seg:])
}

func isUpperHex(c byte) bool { return '0' <= c && c <= '9' || 'A' <= c && c <= 'F' }

// plainSegment reports whether a normalized segment stays as it is: it is
// not empty, not a dot segment, and not a dot segment with parameters.
func plainSegment(seg string) bool {
	return seg != "" && seg != "." && seg != ".." && !dotParams(seg)
}

// dotParams reports whether seg is "." or ".." followed by ";parameters",
// which servlet containers resolve as a dot segment.
func dotParams(seg string) bool {
	return strings.HasPrefix(seg, ".;") || strings.HasPrefix(seg, "..;")
}

// clean normalizes s segment by segment into a buffer that starts on the
// stack, resolving each segment as soon as it is complete (RFC 3986 §5.2.4
// on a path that has no relative part).
func clean(s string) (string, error) {
	if s == "" {
		return "/", nil
	}
	if s[0] != '/' {
		return "", errNotAbsolute
	}
	var stack [256]byte
	// buf holds the cleaned path so far, with no trailing slash: an empty
	// buf is the root.
	buf := stack[:0]
	for i := 0; i < len(s); { // s[i] == '/'
		start := len(buf)
		buf = append(buf, '/')
		i++
		for i < len(s) && s[i] != '/' {
			c := s[i]
			switch class[c] {
			case cUnreserved, cKeep:
				buf = append(buf, c)
				i++
				continue
			case cControl:
				if c == 0 {
					return "", errNUL
				}
				return "", errControl
			case cBackslash:
				return "", errBackslash
			case cEncode:
				buf = append(buf, '%', upperHex[c>>4], upperHex[c&15])
				i++
				continue
			}
			// cPercent
			if i+2 >= len(s) {
				return "", errMalformed
			}
			hi, lo := unhex(s[i+1]), unhex(s[i+2])
			if hi < 0 || lo < 0 {
				return "", errMalformed
			}
			v := byte(hi<<4 | lo)
			switch class[v] {
			case cUnreserved:
				buf = append(buf, v)
			case cSlash:
				return "", errEncodedSlash
			case cBackslash:
				return "", errBackslash
			default:
				if v == 0 {
					return "", errNUL
				}
				// Other control bytes stay escaped: "%0A" is a valid path.
				buf = append(buf, '%', upperHex[v>>4], upperHex[v&15])
			}
			i += 3
		}
		switch seg := buf[start+1:]; {
		case len(seg) == 0 || len(seg) == 1 && seg[0] == '.':
			buf = buf[:start]
		case len(seg) == 2 && seg[0] == '.' && seg[1] == '.':
			if start == 0 {
				return "", errAboveRoot
			}
			buf = buf[:bytes.LastIndexByte(buf[:start], '/')]
		case bytes.HasPrefix(seg, []byte(".;")) || bytes.HasPrefix(seg, []byte("..;")):
			return "", errDotParamSegment
		}
	}
	if len(buf) == 0 {
		return "/", nil
	}
	return string(buf), nil
}
