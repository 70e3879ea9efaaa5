package gateway

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-gw/floodgate/internal/testredis"
)

type rejectWriter struct {
	h    http.Header
	code int
}

func (w *rejectWriter) Header() http.Header         { return w.h }
func (w *rejectWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *rejectWriter) WriteHeader(c int)           { w.code = c }

// BenchmarkReject measures a request that a per-user limit rejects, of a
// user among 2,000 who are all over their limit, over the memory store:
// with a request id the client sent (own_id) and with one the gateway
// makes (new_id); and one that a per-ip limit rejects, of one of 2,000
// addresses (ip).
func BenchmarkReject(b *testing.B) {
	yaml := `admin: {listen: ""}
routes:
  - id: ip
    match: {path: /ip/**}
    upstream: {targets: ["http://127.0.0.1:1"]}
    limits:
      - {name: ip, key: [ip], algorithm: token_bucket, rate: 1/1h}
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://127.0.0.1:1"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], algorithm: token_bucket, rate: 1/1h}
`
	cfg := mustParseB(b, yaml)
	gw, err := New(cfg, Options{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.Close()
	const users = 2000
	reqs := overLimit(gw, users)
	byIP := make([]*http.Request, users)
	for i := range byIP {
		byIP[i] = httptest.NewRequest("GET", "/ip/x", nil)
		byIP[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":4000"
		byIP[i].Header.Set("X-Request-Id", "req-"+strconv.Itoa(i))
		gw.ServeHTTP(&rejectWriter{h: http.Header{}}, byIP[i])
	}
	for _, bc := range []struct {
		name  string
		reqs  []*http.Request
		ownID bool
	}{{"own_id", reqs, true}, {"new_id", reqs, false}, {"ip", byIP, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			w := &rejectWriter{h: http.Header{}}
			i := 0
			for b.Loop() {
				r := bc.reqs[i%users]
				i++
				if !bc.ownID {
					delete(r.Header, "X-Request-Id")
				}
				clear(w.h)
				gw.ServeHTTP(w, r)
				if w.code != 429 {
					b.Fatal(w.code)
				}
			}
		})
	}
}

// BenchmarkRejectAccessLog is BenchmarkReject's own_id with
// server.access_log on: a rejected request's line put together and handed
// to the writer, which appends it to a file.
func BenchmarkRejectAccessLog(b *testing.B) {
	file := filepath.Join(b.TempDir(), "access.log")
	gw := rejectUsers(b, "server: {access_log: "+file+"}\n")
	b.StopTimer()
	b.ReportMetric(float64(gw.access.TakeDropped())/float64(b.N), "dropped/op")
}

// BenchmarkRejectLocally measures a request that a per-user limit on a
// Redis started for the run rejects from the store's memory of exhausted
// keys (store.local_rejects): no round trip, and nothing allocated.
func BenchmarkRejectLocally(b *testing.B) {
	srv := testredis.Start(b)
	gw := rejectUsers(b, `store: {type: redis, redis: {addrs: ["`+srv.Addr()+`"]}}`+"\n")
	local := testutil.ToFloat64(gw.metrics.localAnswers.WithLabelValues("api", "user"))
	if local < float64(b.N) {
		b.Fatalf("%v of %d rejections answered locally", local, b.N)
	}
}

// rejectUsers runs b over the requests of 2,000 users over a per-user
// limit, on a gateway whose config starts with head, and returns the
// gateway, closed when b ends.
func rejectUsers(b *testing.B, head string) *Gateway {
	cfg := mustParseB(b, `admin: {listen: ""}
`+head+`routes:
  - id: api
    match: {path: /**}
    upstream: {targets: ["http://127.0.0.1:1"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], algorithm: token_bucket, rate: 1/1h}
`)
	gw, err := New(cfg, Options{Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Close() })
	const users = 2000
	reqs := overLimit(gw, users)
	b.ReportAllocs()
	w := &rejectWriter{h: http.Header{}}
	i := 0
	for b.Loop() {
		clear(w.h)
		gw.ServeHTTP(w, reqs[i%users])
		i++
		if w.code != 429 {
			b.Fatal(w.code)
		}
	}
	return gw
}

// overLimit returns a request to /api/x of each of n users, with its own
// request id, sent once to gw so that each user has used its limit.
func overLimit(gw *Gateway, n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/api/x", nil)
		reqs[i].Header.Set("X-User-Id", strconv.Itoa(i))
		reqs[i].Header.Set("X-Request-Id", "req-"+strconv.Itoa(i))
		gw.ServeHTTP(&rejectWriter{h: http.Header{}}, reqs[i])
	}
	return reqs
}

// BenchmarkRejectAudit is BenchmarkReject's own_id with events.audit: all
// to a file: every rejection becomes an event, put together on the
// request's goroutine and written in batches by the recorder's. The CPU
// the recorder spends is the benchmark's too (ns/op over every core's
// work is what a busy gateway pays per event).
func BenchmarkRejectAudit(b *testing.B) {
	file := filepath.Join(b.TempDir(), "events.jsonl")
	gw := rejectUsers(b, "events: {sink: file, file: {path: "+file+"}, audit: all, headers: [X-User-Id]}\n")
	b.StopTimer()
	_ = gw
}
