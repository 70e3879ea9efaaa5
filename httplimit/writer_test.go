package httplimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// handlerLimitHeaders sets rate-limit headers of the handler's own, in the
// ways a handler may: replacing, adding to and deleting the middleware's,
// in other case, and names the middleware does not send.
func handlerLimitHeaders(h http.Header) {
	h.Set("RateLimit", "upstream")
	h.Add("Ratelimit-Policy", `"upstream";q=10;w=1`)
	h.Set("X-RateLimit-Remaining", "12345")
	h.Set("X-RateLimit-Limit", "999")
	h.Del("X-RateLimit-Reset")
	h.Set("X-RateLimit-Used", "7")
	h.Set("RateLimit-Reset", "3")
	h["x-ratelimit-resource"] = []string{"core"}
	h.Set("Retry-After", "30")
	h.Set("X-Other", "kept")
}

// The middleware's rate-limit headers are the ones an admitted response
// carries, whatever the handler set and however it ends its response
// (they replace any of the same name); the handler's other headers,
// Retry-After included, are its own.
func TestHandlerLimitHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		serve  func(w http.ResponseWriter)
	}{
		{"WriteHeader", 503, "busy", func(w http.ResponseWriter) {
			w.WriteHeader(503)
			io.WriteString(w, "busy")
		}},
		{"Write", 200, "ok", func(w http.ResponseWriter) { io.WriteString(w, "ok") }},
		{"nothing written", 200, "", func(w http.ResponseWriter) {}},
		{"Flush", 200, "ok", func(w http.ResponseWriter) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			io.WriteString(w, "ok")
		}},
		{"ReadFrom", 200, "ok", func(w http.ResponseWriter) {
			io.Copy(w, strings.NewReader("ok"))
		}},
		{"early hints", 200, "ok", func(w http.ResponseWriter) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			handlerLimitHeaders(w.Header())
			io.WriteString(w, "ok")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 5, Period: time.Minute}})
			srv := server(t, Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r}}},
				http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
					handlerLimitHeaders(w.Header())
					tc.serve(w)
				}))
			got := get(t, srv.URL)
			if got.status != tc.status || got.body != tc.body {
				t.Fatalf("response: %d %q, want %d %q", got.status, got.body, tc.status, tc.body)
			}
			want := http.Header{
				"Ratelimit-Policy":      {`"user";q=5;w=60`},
				"Ratelimit":             {`"user";r=4;t=60`},
				"X-Ratelimit-Limit":     {"5"},
				"X-Ratelimit-Remaining": {"4"},
				"X-Ratelimit-Reset":     {"60"},
				"Retry-After":           {"30"},
				"X-Other":               {"kept"},
			}
			for k, vv := range got.header {
				if lk := strings.ToLower(k); strings.HasPrefix(lk, "ratelimit") || strings.HasPrefix(lk, "x-ratelimit") || lk == "retry-after" || lk == "x-other" {
					if !slices.Equal(vv, want[k]) {
						t.Errorf("%s: %q, want %q", k, vv, want[k])
					}
				}
			}
			for k, vv := range want {
				if got.header[k] == nil {
					t.Errorf("%s missing, want %q", k, vv)
				}
			}
		})
	}
}

// A limit kept out of the headers leaves a handler's rate-limit headers as
// they are: the middleware has none of the same name to replace them with.
func TestHandlerLimitHeadersNotReported(t *testing.T) {
	r := rule(t, &limit.Rule{Name: "quiet", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 5, Period: time.Minute}})
	srv := server(t, Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r, NoHeaders: true}}},
		http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("X-RateLimit-Remaining", "12345")
		}))
	if got := get(t, srv.URL).header; got.Get("X-Ratelimit-Remaining") != "12345" || got.Get("Ratelimit") != "" {
		t.Fatalf("headers: %v", got)
	}
}

// The writer a handler gets keeps the optional interfaces of the server's:
// flushing, io.ReaderFrom, deadlines and hijacking, asserted or through
// http.ResponseController.
func TestWriterInterfaces(t *testing.T) {
	r := rule(t, &limit.Rule{Name: "api", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 100, Period: time.Minute}})
	srv := server(t, Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r}}},
		http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			rc := http.NewResponseController(w)
			switch req.URL.Path {
			case "/stream":
				if _, ok := w.(http.Flusher); !ok {
					t.Error("the writer is no http.Flusher")
				}
				if _, ok := w.(io.ReaderFrom); !ok {
					t.Error("the writer is no io.ReaderFrom")
				}
				if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
					t.Errorf("SetWriteDeadline: %v", err)
				}
				io.WriteString(w, "first\n")
				if err := rc.Flush(); err != nil {
					t.Errorf("Flush: %v", err)
				}
				<-req.Context().Done() // until the client has read the first line
			case "/hijack", "/hijack-asserted":
				var conn net.Conn
				var buf *bufio.ReadWriter
				var err error
				if req.URL.Path == "/hijack" {
					conn, buf, err = rc.Hijack()
				} else if hj, ok := w.(http.Hijacker); ok {
					conn, buf, err = hj.Hijack()
				} else {
					t.Error("the writer is no http.Hijacker")
					return
				}
				if err != nil {
					t.Errorf("Hijack: %v", err)
					return
				}
				defer conn.Close()
				buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
				buf.Flush()
			}
		}))

	// The first line arrives while the handler still runs.
	resp, err := srv.Client().Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	if line != "first\n" || resp.Header.Get("Ratelimit") == "" {
		t.Fatalf("streamed: %q %v, headers %v", line, err, resp.Header)
	}

	for _, path := range []string{"/hijack", "/hijack-asserted"} {
		if r := get(t, srv.URL+path); r.status != 200 || r.body != "hijacked" {
			t.Errorf("%s: %d %q", path, r.status, r.body)
		}
	}
}

// The writer behind a recorder, which can neither hijack nor set
// deadlines, says so instead of pretending.
func TestWriterUnsupported(t *testing.T) {
	r := rule(t, &limit.Rule{Name: "api", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 100, Period: time.Minute}})
	mw, err := New(Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r}}})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rc := http.NewResponseController(w)
		if _, _, err := rc.Hijack(); err == nil {
			t.Error("Hijack on a recorder succeeded")
		}
		if err := rc.SetReadDeadline(time.Now()); err == nil {
			t.Error("SetReadDeadline on a recorder succeeded")
		}
		if err := rc.Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if !rec.Flushed || rec.Header().Get("Ratelimit") == "" {
		t.Fatalf("recorder: flushed %v, headers %v", rec.Flushed, rec.Header())
	}
}
