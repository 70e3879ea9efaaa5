package framing

// chunkSize reads a chunk-size line without its CRLF: chunk-size
// [ chunk-ext ] (RFC 9112 §7.1), where
//
//	chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//	chunk-ext-val = token / quoted-string
//
// It returns the size, or the reason the line is refused. net/http reads
// any bytes after a ";" as an extension it ignores; a front that reads
// them otherwise, say a bare LF or a control byte among them, finds
// another end of the chunk.
func chunkSize(line []byte) (int64, string) {
	i := 0
	for i < len(line) && unhex(line[i]) >= 0 {
		i++
	}
	if i == 0 {
		return 0, "bad_chunk_size"
	}
	digits := line[:i]
	for len(digits) > 1 && digits[0] == '0' {
		digits = digits[1:]
	}
	// Fifteen hex digits and a small sixteenth fit an int64; net/http
	// takes sixteen at most. Leading zeros count for neither.
	if len(digits) > 16 || len(digits) == 16 && unhex(digits[0]) > 7 || i > 16 {
		return 0, "chunk_size_too_large"
	}
	var n int64
	for _, d := range digits {
		n = n<<4 | int64(unhex(d))
	}
	if !chunkExt(line[i:]) {
		return 0, "bad_chunk_extension"
	}
	return n, ""
}

// chunkExt reports whether b is a well-formed chunk-ext. White space
// before the first ";" is refused although RFC 9112 allows it: net/http
// reads the size up to the ";" and refuses "5 ".
func chunkExt(b []byte) bool {
	for first := true; len(b) > 0; first = false {
		if !first {
			b = skipBWS(b)
		}
		if len(b) == 0 || b[0] != ';' {
			return false
		}
		b = skipBWS(b[1:])
		n := 0
		for n < len(b) && tchar[b[n]] {
			n++
		}
		if n == 0 {
			return false
		}
		b = b[n:]
		if rest := skipBWS(b); len(rest) > 0 && rest[0] == '=' {
			b = skipBWS(rest[1:])
			if n = extValue(b); n == 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}

// extValue is the length of the token or quoted-string at the start of b,
// 0 if there is none.
func extValue(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if b[0] != '"' {
		n := 0
		for n < len(b) && tchar[b[n]] {
			n++
		}
		return n
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			// quoted-pair: a backslash and one HTAB, SP, VCHAR or
			// obs-text.
			if i+1 == len(b) || !qdtext(b[i+1]) && b[i+1] != '"' && b[i+1] != '\\' {
				return 0
			}
			i++
		case !qdtext(c):
			return 0
		}
	}
	return 0
}

// qdtext reports whether c may stand in a quoted-string as it is.
func qdtext(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || c >= 0x23 && c <= 0x5b || c >= 0x5d && c <= 0x7e || c >= 0x80
}

func skipBWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}
