package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A request answered before its body is read — a limit's 429, an
// upstream that answers without reading — leaves the rest of the body on
// the connection. net/http's server closes such a connection once more
// than it drains is left; what follows the answer must never be read as
// requests: a body that holds one would pass unchecked and unlimited.
func TestBodyLeftUnreadIsNoRequest(t *testing.T) {
	t.Parallel()
	var smuggled atomic.Int64
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "smuggled") {
			smuggled.Add(1)
		}
		if r.URL.Path == "/api/early" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.Copy(io.Discard, r.Body)
	})
	h := newHarness(t, `
admin: {listen: ""}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
    limits: [{name: user, key: ["header:X-User-Id"], rate: 1/h}]
`, up)
	drain(h.do("GET", "/api/x", map[string]string{"X-User-Id": "u"}, nil))
	inner := "GET /api/smuggled HTTP/1.1\r\nHost: x\r\nX-User-Id: other\r\n\r\n"
	for _, tc := range []struct {
		name, path, user string
		status           int
	}{
		{"limited", "/api/x", "u", http.StatusTooManyRequests}, // u's one request is spent first
		{"answered early upstream", "/api/early", "v", http.StatusUnauthorized},
	} {
		for _, size := range []int{64 << 10, 1 << 20} { // under and over what net/http drains
			body := inner + strings.Repeat("x", size)
			conn, err := net.Dial("tcp", h.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			user := tc.user
			if tc.status != http.StatusTooManyRequests {
				user += fmt.Sprint(size) // admitted, once
			}
			// A last request, to see the connection's end if it is
			// kept: none but it and the first may be answered.
			go fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nX-User-Id: %s\r\nContent-Length: %d\r\n\r\n%s"+
				"GET /api/last HTTP/1.1\r\nHost: x\r\nX-User-Id: last-%s\r\nConnection: close\r\n\r\n",
				tc.path, user, len(body), body, user)
			br := bufio.NewReader(conn)
			var got []int
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				got = append(got, resp.StatusCode)
			}
			conn.Close()
			if len(got) == 0 || got[0] != tc.status || len(got) > 2 || len(got) == 2 && got[1] != 200 {
				t.Errorf("%s, %d bytes: answers %v, want %d, and 200 to the last request if the connection is kept", tc.name, size, got, tc.status)
			}
		}
	}
	if n := smuggled.Load(); n != 0 {
		t.Errorf("a request held in a body reached the upstream %d times", n)
	}
}
