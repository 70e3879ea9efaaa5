package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/testredis"
	"github.com/floodgate-gw/floodgate/limit"
	"github.com/floodgate-gw/floodgate/limit/memory"
	"github.com/floodgate-gw/floodgate/limit/redisstore"
)

func rule(t *testing.T, r *limit.Rule) *limit.Rule {
	t.Helper()
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func header(name string) func(*http.Request) (string, bool) {
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(name)
		return v, v != ""
	}
}

// server runs handler behind the middleware of o, over real HTTP.
func server(t *testing.T, o Options, handler http.Handler) *httptest.Server {
	t.Helper()
	if handler == nil {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	}
	mw, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(handler))
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	status int
	header http.Header
	body   string
}

// testClient has a transport of its own: an httptest.Server's Close
// closes http.DefaultTransport's idle connections, and a parallel test's
// request that has just taken one fails with "CloseIdleConnections
// called".
var testClient = &http.Client{Transport: &http.Transport{}}

func get(t *testing.T, url string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func TestAnswers(t *testing.T) {
	store := memory.New(memory.Options{})
	user := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Align: limit.AlignFirst, Rate: limit.Rate{Count: 2, Period: time.Hour}})
	api := rule(t, &limit.Rule{Name: "api", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 100, Period: time.Hour}})
	srv := server(t, Options{Store: store, Limits: []Limit{
		{Rule: api},
		{Rule: user, Key: header("X-User"), KeyOptional: true, Code: "repeat_apply", Message: "You have already taken part"},
	}}, nil)

	// Admitted: the headers report the limit closest to rejecting.
	r := get(t, srv.URL, "X-User", "u1")
	if r.status != 200 || r.body != "ok" {
		t.Fatalf("first request: %d %q", r.status, r.body)
	}
	for k, want := range map[string]string{
		"Ratelimit-Policy": `"user";q=2;w=3600`, "Ratelimit": `"user";r=1;t=3600`,
		"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "1",
	} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	get(t, srv.URL, "X-User", "u1")

	// Rejected: the limit's status, code and message, the request id,
	// Retry-After and the rejecting limit's headers.
	r = get(t, srv.URL, "X-User", "u1", "X-Request-Id", "abc-123")
	var body map[string]string
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if r.status != 429 || body["code"] != "repeat_apply" || body["message"] != "You have already taken part" || body["request_id"] != "abc-123" {
		t.Fatalf("rejection: %d %v", r.status, body)
	}
	if r.header.Get("Content-Type") != "application/json" || r.header.Get("Retry-After") == "" || r.header.Get("Ratelimit") == "" {
		t.Fatalf("rejection headers: %v", r.header)
	}
	// The rejected request took nothing from the api limit.
	st, err := store.Peek(context.Background(), time.Now(), api, limit.StringKey(""))
	if err != nil || st.Remaining != 98 {
		t.Fatalf("api limit after 2 admissions and a rejection: %+v %v", st, err)
	}

	// Without the header, the user limit does not apply.
	for range 3 {
		if r := get(t, srv.URL); r.status != 200 || r.header.Get("Ratelimit-Policy") != `"api";q=100;w=3600` {
			t.Fatalf("anonymous request: %d %v", r.status, r.header)
		}
	}

	// A request id that is not safe in logs and JSON is replaced.
	r = get(t, srv.URL, "X-User", "u1", "X-Request-Id", `"}{"x":1`)
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || !answer.WellFormedID(body["request_id"]) || strings.Contains(body["request_id"], "x") {
		t.Fatalf("hostile request id: %q %v", r.body, err)
	}
}

func TestStoreFails(t *testing.T) {
	srv := testredis.Start(t)
	// A second for a decision: on a loaded machine the first one (a
	// connection and a script load) can take longer than 100ms, and a
	// Redis that is down refuses at once. Without local rejects, which
	// would answer for the exhausted key while Redis is down: the store
	// must fail.
	store, err := redisstore.New(redisstore.Options{Addrs: []string{srv.Addr()}, Timeout: time.Second, NoLocalRejects: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	r := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	limits := []Limit{{Rule: r, Key: header("X-User")}}
	deny := server(t, Options{Store: store, Limits: limits}, nil)
	allow := server(t, Options{Store: store, Limits: limits, OnError: Allow}, nil)
	fallback := server(t, Options{Store: store, Limits: limits, Fallback: memory.New(memory.Options{})}, nil)
	if got := get(t, deny.URL, "X-User", "a").status; got != 200 {
		t.Fatalf("with Redis up: %d", got)
	}
	srv.Stop()
	if r := get(t, deny.URL, "X-User", "a"); r.status != 503 || !strings.Contains(r.body, `"code":"limiter_unavailable"`) {
		t.Fatalf("deny with Redis down: %d %s", r.status, r.body)
	}
	for range 3 {
		if got := get(t, allow.URL, "X-User", "a").status; got != 200 {
			t.Fatalf("allow with Redis down: %d", got)
		}
	}
	// The fallback store decides instead: one admission, then 429.
	if a, b := get(t, fallback.URL, "X-User", "a").status, get(t, fallback.URL, "X-User", "a").status; a != 200 || b != 429 {
		t.Fatalf("fallback with Redis down: %d then %d", a, b)
	}
}

// A concurrency lease is held while the handler runs and freed when it
// returns.
func TestConcurrencyLease(t *testing.T) {
	r := rule(t, &limit.Rule{Name: "inflight", Algorithm: limit.Concurrency, Rate: limit.Rate{Count: 1}, LeaseTTL: time.Minute})
	release, entered := make(chan struct{}), make(chan struct{}, 1)
	srv := server(t, Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r}}},
		http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == "/slow" {
				entered <- struct{}{}
				<-release
			}
		}))
	var wg sync.WaitGroup
	wg.Go(func() {
		if got := get(t, srv.URL+"/slow").status; got != 200 {
			t.Errorf("slow request: %d", got)
		}
	})
	<-entered
	if got := get(t, srv.URL).status; got != 429 {
		t.Fatalf("second request while the first runs: %d, want 429", got)
	}
	close(release)
	wg.Wait()
	if got := get(t, srv.URL).status; got != 200 {
		t.Fatalf("request after the first finished: %d, want 200", got)
	}
}

// A token bucket with a queue delays a request instead of rejecting it.
func TestQueue(t *testing.T) {
	r := rule(t, &limit.Rule{Name: "smooth", Algorithm: limit.TokenBucket, Rate: limit.Rate{Count: 20, Period: time.Second}, Burst: 1, Queue: time.Second})
	srv := server(t, Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r}}}, nil)
	for i := range 3 {
		if got := get(t, srv.URL).status; got != 200 {
			t.Fatalf("request %d within the queue: %d", i, got)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	good := rule(t, &limit.Rule{Name: "x", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Second}})
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "no store"},
		{Options{Store: memory.New(memory.Options{}), Limits: []Limit{{}}}, "no rule"},
		{Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: &limit.Rule{Name: "Bad Name"}}}}, "limit 0"},
		{Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: good, Status: 200}}}, "not an error status"},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error about %q", err, tc.want)
		}
	}
}

// The request id goes to the handler in the request's header and back to
// the client in the response's, on admissions and on the middleware's own
// answers alike: the client's when it sent one well-formed id, a new one
// otherwise.
func TestRequestID(t *testing.T) {
	r := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 1, Period: time.Hour}})
	seen := make(chan []string, 1)
	srv := server(t, Options{Store: memory.New(memory.Options{}), Limits: []Limit{{Rule: r, Key: header("X-User"), KeyOptional: true}}, RequestIDHeader: "x-correlation-id"},
		http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			seen <- req.Header.Values("X-Correlation-Id")
		}))
	for _, tc := range []struct {
		name, user string
		sent       []string
		kept       bool
	}{
		{"sent, limit applies", "u1", []string{"abc-123"}, true},
		{"sent, no limit applies", "", []string{"abc-124"}, true},
		{"none sent", "u2", nil, false},
		{"not well formed", "u3", []string{"a b"}, false},
		{"two sent", "u4", []string{"abc-125", "abc-126"}, false},
	} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header["X-Correlation-Id"] = tc.sent
		if tc.user != "" {
			req.Header.Set("X-User", tc.user)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Values("X-Correlation-Id")
		if len(got) != 1 || !answer.WellFormedID(got[0]) || tc.kept != slices.Equal(got, tc.sent) {
			t.Errorf("%s: response id %q", tc.name, got)
		}
		if handler := <-seen; !slices.Equal(handler, got) {
			t.Errorf("%s: the handler saw %q, the client %q", tc.name, handler, got)
		}
	}

	// A rejection carries the id in its header as in its body.
	rr := get(t, srv.URL, "X-User", "u1", "X-Correlation-Id", "abc-127")
	if rr.status != 429 || rr.header.Get("X-Correlation-Id") != "abc-127" || !strings.Contains(rr.body, `"request_id":"abc-127"`) {
		t.Fatalf("rejection: %d %v %s", rr.status, rr.header, rr.body)
	}
}

// A limit answers 403 key_required to a request without its key, before
// any limit is decided, as the gateway's default on_missing: deny does;
// with KeyOptional the request passes that limit unlimited.
func TestKeyRequired(t *testing.T) {
	store := memory.New(memory.Options{})
	all := rule(t, &limit.Rule{Name: "all", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: time.Hour}})
	user := rule(t, &limit.Rule{Name: "user", Algorithm: limit.FixedWindow, Rate: limit.Rate{Count: 10, Period: time.Hour}})
	srv := server(t, Options{Store: store, Limits: []Limit{{Rule: all}, {Rule: user, Key: header("X-User")}}}, nil)
	optional := server(t, Options{Store: store, Limits: []Limit{{Rule: user, Key: header("X-User"), KeyOptional: true}}}, nil)
	if r := get(t, optional.URL); r.status != 200 || r.header.Get("X-Ratelimit-Remaining") != "" {
		t.Fatalf("an optional key missing: %d %v", r.status, r.header)
	}

	r := get(t, srv.URL, "X-Request-Id", "abc-123")
	var body map[string]string
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
	if r.status != 403 || body["code"] != "key_required" || body["message"] == "" || body["request_id"] != "abc-123" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("without the key: %d %v %v", r.status, r.header, body)
	}
	if st, err := store.Peek(context.Background(), time.Now(), all, globalKey); err != nil || st.Remaining != 10 {
		t.Fatalf("the other limit after a request without the key: %+v %v", st, err)
	}
	if r := get(t, srv.URL, "X-User", "u1"); r.status != 200 || r.header.Get("X-Ratelimit-Remaining") != "9" {
		t.Fatalf("with the key: %d %v", r.status, r.header)
	}
}
