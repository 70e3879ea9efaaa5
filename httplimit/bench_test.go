package httplimit

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
)

// benchWriter is a ResponseWriter that keeps nothing, so that the
// benchmark measures the middleware and not a recorder.
type benchWriter struct{ h http.Header }

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(int)             {}

// BenchmarkMiddleware measures one admitted request through the middleware
// over the memory store: with a limit reported in the headers, with a
// request id the client sent and with one the middleware makes, and with a
// request no limit applies to; and one rejected request, of a user among
// 2,000 who are all over their limit, with either request id.
func BenchmarkMiddleware(b *testing.B) {
	r := &limit.Rule{Name: "api", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: limit.MaxCount, Period: time.Hour}}
	if err := r.Validate(); err != nil {
		b.Fatal(err)
	}
	byUser := func(r *http.Request) (string, bool) {
		v := r.Header.Get("X-User")
		return v, v != ""
	}
	mw, err := New(Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r, Key: byUser}}})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	for _, tc := range []struct {
		name string
		hdr  http.Header
	}{
		{"limited", http.Header{"X-User": {"u1"}, "X-Request-Id": {"req-1"}}},
		{"limited_new_id", http.Header{"X-User": {"u1"}}},
		{"unlimited", http.Header{"X-Request-Id": {"req-1"}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req, err := http.NewRequest("GET", "/", nil)
			if err != nil {
				b.Fatal(err)
			}
			w := &benchWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				clear(req.Header)
				for k, v := range tc.hdr {
					req.Header[k] = v
				}
				clear(w.h)
				h.ServeHTTP(w, req)
			}
		})
	}
	b.Run("rejected", func(b *testing.B) { benchmarkRejected(b, byUser, true) })
	b.Run("rejected_new_id", func(b *testing.B) { benchmarkRejected(b, byUser, false) })
}

func benchmarkRejected(b *testing.B, byUser func(*http.Request) (string, bool), ownID bool) {
	r := &limit.Rule{Name: "user", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 1, Period: time.Hour}}
	if err := r.Validate(); err != nil {
		b.Fatal(err)
	}
	mw, err := New(Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r, Key: byUser}}})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	const users = 2000
	reqs := make([]*http.Request, users)
	w := &benchWriter{h: make(http.Header)}
	for i := range reqs {
		if reqs[i], err = http.NewRequest("GET", "/", nil); err != nil {
			b.Fatal(err)
		}
		reqs[i].Header["X-User"] = []string{strconv.Itoa(i)}
		reqs[i].Header["X-Request-Id"] = []string{"req-" + strconv.Itoa(i)}
		clear(w.h)
		h.ServeHTTP(w, reqs[i])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := reqs[i%users]
		i++
		if !ownID {
			delete(req.Header, "X-Request-Id")
		}
		clear(w.h)
		h.ServeHTTP(w, req)
		if w.h["Retry-After"] == nil {
			b.Fatal("admitted")
		}
	}
}
