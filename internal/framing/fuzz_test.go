package framing

import (
	"bytes"
	"io"
	"reflect"
	"testing"
)

// Whatever a client sends, what passes through a Conn is read by net/http
// as a run of the very requests it would read from the bytes as they were
// sent, in order, with the same fields and bodies: the Conn may stop
// early, never frame otherwise. A refusal stops net/http's reading with an
// error at that point: nothing after it is read as a request.
func FuzzConnAgreesWithNetHTTP(f *testing.F) {
	for _, s := range []string{
		get + after,
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + after,
		"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\"b\"\r\nhello\r\n0\r\nX: y\r\n\r\n" + after,
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + after,
		"POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + after,
		"GET /a HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n" + after,
		"\r\n" + get + "\r\n\r\n" + after,
		"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x02hi",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		out, refused := passed(t, string(in), int(step)%64+1, 4096, 512)
		want, _ := parseAll(in, true)
		got, err := parseAll(out, false)
		if len(got) > len(want) {
			t.Fatalf("net/http read %d requests through the Conn, %d from the bytes as sent", len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("request %d through the Conn:\n%+v\nas sent:\n%+v", i, got[i], want[i])
			}
		}
		if refused != nil && (err == io.EOF || err == nil) {
			t.Fatalf("the Conn refused %v, but net/http read on without an error", refused)
		}
		// What passes is what was sent, from its start, up to the refusal,
		// but for empty lines between requests.
		if refused != nil {
			out = out[:len(out)-len(headPoison)]
		}
		i := 0
		for j := 0; j < len(out); {
			switch {
			case i < len(in) && in[i] == out[j]:
				i, j = i+1, j+1
			case bytes.HasPrefix(in[i:], []byte("\r\n")):
				i += 2
			default:
				t.Fatalf("passed %q, which the client did not send", out)
			}
		}
	})
}
