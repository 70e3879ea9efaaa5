package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func testClient(connect, header time.Duration) *Client {
	return New(Options{ConnectTimeout: connect, HeaderTimeout: header, Fallback: &http.Transport{}})
}

// countingServer is an httptest server that counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

func get(t *testing.T, cl *Client, ctx context.Context, method, rawURL string, idle time.Duration) (*http.Response, error) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	req := (&http.Request{Method: method, URL: u, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	return cl.Do(req, idle, nil)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return string(b)
}

func TestClientKeepsConnections(t *testing.T) {
	t.Parallel()
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok "+r.URL.RequestURI())
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	for i := range 50 {
		resp, err := get(t, cl, context.Background(), "GET", s.URL+"/a?i=1", 0)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := readAll(t, resp); got != "ok /a?i=1" {
			t.Fatalf("body %q", got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("50 requests one after the other used %d connections, want 1", n)
	}

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				resp, err := get(t, cl, context.Background(), "GET", s.URL+"/b", 0)
				if err != nil {
					t.Error(err)
					return
				}
				if got := readAll(t, resp); got != "ok /b" {
					t.Errorf("body %q", got)
				}
			}
		})
	}
	wg.Wait()
	if n := conns.Load(); n > 9 {
		t.Fatalf("8 goroutines used %d connections, want at most 9", n)
	}
}

// rawServer answers each connection with handle, which reads the request
// itself.
func rawServer(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				handle(c, bufio.NewReader(c))
			})
		}
	})
	return "http://" + ln.Addr().String(), &conns
}

// closesOnTheNextRequest is an upstream that answers the first request on
// each connection (echoing its body) and closes the connection, without
// answering, once the next request has arrived: one whose keep-alive
// timeout ran out as the request came in.
func closesOnTheNextRequest(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	return rawServer(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(r.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+string(b))
		if r, err := http.ReadRequest(br); err == nil {
			io.Copy(io.Discard, r.Body) // all of it, so the close is a FIN
		}
	})
}

func TestClientResendsWhenTheUpstreamClosesOnTheRequest(t *testing.T) {
	t.Parallel()
	base, conns := closesOnTheNextRequest(t)
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	for i := range 5 {
		resp, err := get(t, cl, context.Background(), "GET", base+"/", 0)
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		readAll(t, resp)
	}
	// Every GET after the first met a connection that closed on it, and
	// was sent again on a new one.
	if n := conns.Load(); n != 5 {
		t.Fatalf("%d connections for 5 answers, want 5", n)
	}

	// A request that is not safe to repeat is not sent twice.
	resp, err := get(t, cl, context.Background(), "DELETE", base+"/", 0)
	if err == nil {
		readAll(t, resp)
		t.Fatal("a DELETE on a dead connection was sent again")
	}
	var ne net.Error
	if errors.Is(err, errNothingRead) || !(errors.Is(err, io.EOF) || errors.As(err, &ne)) {
		t.Fatalf("DELETE error %v (%T), want the connection's error", err, err)
	}
	if n := conns.Load(); n != 5 {
		t.Fatalf("the DELETE was sent again on a connection of its own")
	}
}

func TestClientTimeouts(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow-head":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/slow-body":
			io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	})
	defer close(release)
	cl := testClient(time.Second, 100*time.Millisecond)
	defer cl.CloseIdle()

	_, err := get(t, cl, context.Background(), "GET", s.URL+"/slow-head", 0)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a head later than the timeout: %v, want a timeout", err)
	}

	// The rest on a client that waits long for a head: a loaded machine
	// may take longer than 100 ms over a head sent at once.
	cl = testClient(time.Second, 5*time.Second)
	defer cl.CloseIdle()
	resp, err := get(t, cl, context.Background(), "GET", s.URL+"/slow-body", 150*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "part" || !errors.Is(err, ErrIdle) {
		t.Fatalf("a body that falls silent: %q, %v; want \"part\", ErrIdle", b, err)
	}

	// A connection whose last answer had a deadline is reused later
	// without it: the deadline, passed while the connection sat idle,
	// neither fails the peek before use nor the next answer.
	resp, err = get(t, cl, context.Background(), "GET", s.URL+"/fast", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	time.Sleep(150 * time.Millisecond)
	resp, err = get(t, cl, context.Background(), "GET", s.URL+"/fast", 0)
	if err != nil {
		t.Fatalf("a reused connection kept its old deadline: %v", err)
	}
	readAll(t, resp)
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3: the idle one was not reused", n)
	}
}

func TestClientCancel(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{})
	base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
		c.Read(make([]byte, 1)) // until the client closes
		close(closed)
	})
	cl := testClient(time.Second, 0)
	defer cl.CloseIdle()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := get(t, cl, ctx, "GET", base+"/", 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := resp.Body.Read(buf); err == nil {
		t.Fatal("the body read on after the client went away")
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream connection stayed open after the client went away")
	}

	// Waiting for the head, too.
	base2, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br)
		c.Read(make([]byte, 1))
	})
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := get(t, cl, ctx, "GET", base2+"/", 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled while waiting for the head: %v", err)
	}
}

func TestClientAnswers(t *testing.T) {
	t.Parallel()
	// Each case is one connection's whole answer; then the client asks
	// again, to see whether the connection was kept.
	for _, tc := range []struct {
		name, answer, method string
		status               int
		body                 string
		trailer              string
		kept                 bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "GET", 200, "ok", "", true},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 7\r\n\r\n", "GET", 200, "ok", "7", true},
		{"interim answers", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", "GET", 201, "x", "", true},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", "GET", 204, "", "", true},
		{"head", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", "HEAD", 200, "", "", true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "GET", 200, "ok", "", false},
		{"until close", "HTTP/1.0 200 OK\r\n\r\nuntil close", "GET", 200, "until close", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					io.WriteString(c, tc.answer)
					if strings.Contains(tc.answer, "close") || strings.HasPrefix(tc.answer, "HTTP/1.0") {
						return
					}
				}
			})
			cl := testClient(time.Second, time.Second)
			defer cl.CloseIdle()
			for range 2 {
				resp, err := get(t, cl, context.Background(), tc.method, base+"/", 0)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
				}
				if got := readAll(t, resp); got != tc.body {
					t.Fatalf("body %q, want %q", got, tc.body)
				}
				if got := resp.Trailer.Get("X-Sum"); got != tc.trailer {
					t.Fatalf("trailer %q, want %q", got, tc.trailer)
				}
			}
			want := int64(2)
			if tc.kept {
				want = 1
			}
			if n := conns.Load(); n != want {
				t.Fatalf("two exchanges used %d connections, want %d", n, want)
			}
		})
	}
}

// net/http's ReadResponse drops a Connection field that says close; the
// client puts it back as sent, so that a proxy can remove the hop-by-hop
// fields it names.
func TestClientKeepsTheConnectionFieldThatCloses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer string
		want         []string
	}{
		{"listed", "HTTP/1.1 200 OK\r\nConnection: X-Secret, close\r\nX-Secret: s\r\nContent-Length: 2\r\n\r\nok", []string{"X-Secret, close"}},
		{"two fields", "HTTP/1.1 200 OK\r\nconnection: close\r\nX-A: 1\r\nCONNECTION:  x-a \r\nContent-Length: 2\r\n\r\nok", []string{"close", "x-a"}},
		{"after interim answers", "HTTP/1.1 103 Early Hints\r\nConnection: X-Hint\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\nConnection: X-Final, close\nContent-Length: 2\n\nok", []string{"X-Final, close"}},
		{"a head over 64 KiB", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 70<<10) + "\r\nConnection: X-Secret, close\r\nContent-Length: 2\r\n\r\nok", []string{"X-Secret, close"}},
		{"after 64 KiB of interim answers", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </"+strings.Repeat("l", 1000)+">\r\n\r\n", 70) +
			"HTTP/1.1 200 OK\r\nConnection: X-Secret, close\r\nContent-Length: 2\r\n\r\nok", []string{"X-Secret, close"}},
		{"folded", "HTTP/1.1 200 OK\r\nConnection: close,\r\n X-Secret\r\nX-Secret: s\r\nX-Other: o\r\n\tfolded too\r\nContent-Length: 2\r\n\r\nok", []string{"close, X-Secret"}},
		{"a body like a head", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nokConnection: X-Body\r\n\r\n", []string{"close"}},
		{"keep-alive", "HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nContent-Length: 2\r\n\r\nok", []string{"X-Secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err == nil {
					io.WriteString(c, tc.answer)
				}
			})
			cl := testClient(time.Second, time.Second)
			defer cl.CloseIdle()
			resp, err := get(t, cl, context.Background(), "GET", base+"/", 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); got != "ok" {
				t.Fatalf("body %q", got)
			}
			if got := resp.Header["Connection"]; !slices.Equal(got, tc.want) {
				t.Fatalf("Connection %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClientPassesInterimAnswersOn(t *testing.T) {
	t.Parallel()
	base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
				"HTTP/1.1 103 Early Hints\r\nLink: </b.js>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	u, _ := url.Parse(base + "/")
	var got []string
	req := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	resp, err := cl.Do(req, 0, func(code int, h http.Header) error {
		got = append(got, fmt.Sprint(code, " ", h.Get("Link")))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, resp); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	want := []string{"100 ", "103 </a.css>; rel=preload", "103 </b.js>; rel=preload"}
	if !slices.Equal(got, want) {
		t.Fatalf("interim answers %q, want %q", got, want)
	}
}

// An interim answer's Connection field that says close, which
// ReadResponse removes as it does a final answer's, is put back too: the
// caller drops the fields it names before passing the answer on.
func TestClientKeepsAnInterimAnswersConnectionField(t *testing.T) {
	t.Parallel()
	base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err == nil {
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nLink: </a>\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	u, _ := url.Parse(base + "/")
	req := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	var got []string
	resp, err := cl.Do(req, 0, func(code int, h http.Header) error {
		got = h["Connection"]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if want := []string{"close, X-Secret"}; !slices.Equal(got, want) {
		t.Fatalf("the 103's Connection %q, want %q", got, want)
	}
}

// requestOn is a GET to base, or, with streamed, a POST whose body is of
// unknown length, which goes to the fallback.
func requestOn(t *testing.T, base string, streamed bool) *http.Request {
	t.Helper()
	u, err := url.Parse(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	req := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if streamed {
		req.Method, req.ContentLength, req.Body = "POST", -1, io.NopCloser(strings.NewReader("hi"))
	}
	return req
}

// An upstream may send interim answers without end, and the fallback's
// Transport reads them all once it passes them on: an error from the
// interim callback ends the exchange on either path, and Do returns it.
func TestClientInterimErrorEndsTheExchange(t *testing.T) {
	t.Parallel()
	base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		go io.Copy(io.Discard, r.Body)
		for {
			if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"); err != nil {
				return
			}
		}
	})
	enough := errors.New("enough")
	for _, streamed := range []bool{false, true} {
		cl := testClient(time.Second, 5*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		n := 0
		resp, err := cl.Do(requestOn(t, base, streamed).WithContext(ctx), 0, func(code int, h http.Header) error {
			if n++; n > 3 {
				return enough
			}
			return nil
		})
		if err == nil {
			resp.Body.Close()
		}
		if !errors.Is(err, enough) || n != 4 {
			t.Errorf("streamed %v: Do returned %v after %d interim answers, want the callback's error after 4", streamed, err, n)
		}
		cancel()
		cl.CloseIdle()
	}
}

// A status under 100, which ReadResponse takes from "099", is neither
// interim nor final: the exchange fails, on either path.
func TestClientRefusesAStatusUnder100(t *testing.T) {
	t.Parallel()
	base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(c, "HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok")
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	for _, streamed := range []bool{false, true} {
		resp, err := cl.Do(requestOn(t, base, streamed), 0, nil)
		if err == nil {
			resp.Body.Close()
			t.Errorf("streamed %v: answer accepted with status %d", streamed, resp.StatusCode)
		}
	}
}

// The record of a large head is not kept with a pooled connection.
func TestClientDropsALargeHeadRecord(t *testing.T) {
	t.Parallel()
	base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Pad: "+strings.Repeat("p", 100<<10)+"\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	resp, err := get(t, cl, context.Background(), "GET", base+"/", 0)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	pooled := 0
	for _, cs := range cl.idle {
		for _, c := range cs {
			pooled++
			if cap(c.head) > 4<<10 {
				t.Errorf("a pooled connection keeps a head record of %d bytes", cap(c.head))
			}
		}
	}
	if pooled != 1 {
		t.Fatalf("%d pooled connections, want 1", pooled)
	}
}

func TestClientRefusesBadAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, answer string }{
		{"garbage", "SSH-2.0-OpenSSH\r\n\r\n"},
		{"huge head", "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-Pad: "+strings.Repeat("a", 1000)+"\r\n", 1100) + "\r\n"},
		{"switching protocols unasked", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, tc.answer)
			})
			cl := testClient(time.Second, time.Second)
			defer cl.CloseIdle()
			resp, err := get(t, cl, context.Background(), "GET", base+"/", 0)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("answer accepted with status %d", resp.StatusCode)
			}
		})
	}
}

func TestClientUnreadBodyClosesTheConnection(t *testing.T) {
	t.Parallel()
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 100<<10))
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	for range 2 {
		resp, err := get(t, cl, context.Background(), "GET", s.URL+"/", 0)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Read(make([]byte, 10))
		resp.Body.Close()
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: a half-read answer must not be reused", n)
	}
}

func TestClientBodies(t *testing.T) {
	t.Parallel()
	s, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		// Whole, before answering: net/http's server may close a body
		// not read by the time the answer is sent.
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	for _, tc := range []struct {
		name   string
		body   io.Reader
		length int64
		own    bool
	}{
		{"small", strings.NewReader("hello"), 5, true},
		{"largest inline", strings.NewReader(strings.Repeat("b", MaxInlineBody)), MaxInlineBody, true},
		{"large", strings.NewReader(strings.Repeat("b", MaxInlineBody+1)), MaxInlineBody + 1, false},
		{"unknown length", io.MultiReader(strings.NewReader("chunk")), -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", s.URL+"/echo", tc.body)
			req.ContentLength = tc.length
			want := ""
			if tc.length != 0 {
				b, _ := io.ReadAll(req.Body)
				want = string(b)
				req.Body = io.NopCloser(strings.NewReader(want))
			}
			resp, err := cl.Do(req, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if Owns(resp) != tc.own {
				t.Errorf("went over the client's own connections: %v, want %v", Owns(resp), tc.own)
			}
			if got := readAll(t, resp); got != want {
				t.Fatalf("echo of %d bytes, want %d", len(got), len(want))
			}
		})
	}

	// A body shorter than its Content-Length is the caller's failure.
	req, _ := http.NewRequest("POST", s.URL+"/echo", strings.NewReader("abc"))
	req.ContentLength = 10
	if _, err := cl.Do(req, 0, nil); !errors.Is(err, ErrRequestBody) {
		t.Fatalf("short body: %v, want ErrRequestBody", err)
	}
}

func TestClientResendsABodyOnlyWhenSafe(t *testing.T) {
	t.Parallel()
	base, conns := closesOnTheNextRequest(t)
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	post := func(key string) (string, error) {
		req, _ := http.NewRequest("POST", base+"/", strings.NewReader("payload"))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := cl.Do(req, 0, nil)
		if err != nil {
			return "", err
		}
		return readAll(t, resp), nil
	}
	for i := range 3 {
		got, err := post("k" + strconv.Itoa(i))
		if err != nil || got != "payload" {
			t.Fatalf("POST %d with an Idempotency-Key: %q, %v", i, got, err)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
	if got, err := post(""); err == nil {
		t.Fatalf("a POST without an Idempotency-Key was sent again on a dead connection: %q", got)
	}
}

// TestClientResendsARequestNoneOfWhichWasWritten: a request that could not
// be written at all, not one byte, never reached the upstream, and is sent
// on another connection whatever its method. The pooled connection is
// shut for writing here, as one the upstream reset just after the peek
// before use would be.
func TestClientResendsARequestNoneOfWhichWasWritten(t *testing.T) {
	t.Parallel()
	done := make(chan struct{})
	base, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				<-done // no close of its own, so the peek finds the connection alive
				return
			}
			b, _ := io.ReadAll(r.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+string(b))
		}
	})
	t.Cleanup(func() { close(done) }) // before rawServer's cleanup waits for the handlers
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	post := func() (string, error) {
		req, _ := http.NewRequest("POST", base+"/", strings.NewReader("entry"))
		resp, err := cl.Do(req, 0, nil)
		if err != nil {
			return "", err
		}
		return readAll(t, resp), nil
	}
	if got, err := post(); err != nil || got != "entry" {
		t.Fatalf("first POST: %q, %v", got, err)
	}
	cl.mu.Lock()
	for _, cs := range cl.idle {
		for _, c := range cs {
			c.Conn.(*net.TCPConn).CloseWrite()
		}
	}
	cl.mu.Unlock()
	if got, err := post(); err != nil || got != "entry" {
		t.Fatalf("POST on a connection that takes no byte: %q, %v; want it sent on another", got, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

// TestClientIdleBoundsTheUpstreamsSilence: the idle bound is on the
// upstream's silence while the client waits for it, not on the time
// between two reads of the body: a reader that takes its time with the
// data (a slow client behind a gateway) is not cut off, and an upstream
// that falls silent still is.
func TestClientIdleBoundsTheUpstreamsSilence(t *testing.T) {
	t.Parallel()
	const sent = 2 << 20
	base, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// Twice as much announced as sent: after its 2 MiB the upstream
		// falls silent.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(2*sent)+"\r\n\r\n")
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range sent / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
		c.Read(make([]byte, 1)) // until the client closes
	})
	const idle = 500 * time.Millisecond
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	resp, err := get(t, cl, context.Background(), "GET", base+"/", idle)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 32<<10)
	got, paused := 0, false
	var last time.Time
	for {
		if got >= 256<<10 && !paused {
			// Meanwhile the upstream is blocked on a full connection, not silent.
			time.Sleep(2 * idle)
			paused = true
		}
		last = time.Now()
		n, err := resp.Body.Read(buf)
		got += n
		if err != nil {
			if got != sent || !errors.Is(err, ErrIdle) {
				t.Fatalf("read %d bytes, then %v; want %d, then ErrIdle", got, err, sent)
			}
			break
		}
	}
	if waited := time.Since(last); waited < idle*9/10 {
		t.Fatalf("the silent upstream was given up on after %v, want %v", waited, idle)
	}
}

// TestClientDropsAConnectionTheUpstreamSpokeOn: an answer nobody asked for,
// sent after the answer (with it, or while the connection sits idle), is
// never read as the answer to the next request: the connection is out of
// step and is closed.
func TestClientDropsAConnectionTheUpstreamSpokeOn(t *testing.T) {
	t.Parallel()
	const unasked = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nunasked"
	for _, tc := range []struct {
		name  string
		later bool
	}{
		{"with the answer", false},
		{"while idle", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spoke := make(chan struct{}, 10)
			base, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				for first := true; ; first = false {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					answer := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
					if first && !tc.later {
						answer += unasked
					}
					io.WriteString(c, answer)
					if first && tc.later {
						time.Sleep(20 * time.Millisecond) // the answer is read and the connection idle
						io.WriteString(c, unasked)
					}
					if first {
						spoke <- struct{}{}
					}
				}
			})
			cl := testClient(time.Second, time.Second)
			defer cl.CloseIdle()
			for i := range 3 {
				resp, err := get(t, cl, context.Background(), "GET", base+"/", 0)
				if err != nil {
					t.Fatalf("GET %d: %v", i, err)
				}
				if got := readAll(t, resp); got != "ok" {
					t.Fatalf("GET %d: %q, want \"ok\"", i, got)
				}
				select {
				case <-spoke:
				case <-time.After(5 * time.Second):
					t.Fatal("the upstream did not send its unasked answer")
				}
				time.Sleep(20 * time.Millisecond) // for it to arrive
			}
			if n := conns.Load(); n != 3 {
				t.Fatalf("%d connections for 3 answers, want 3", n)
			}
		})
	}
}

// TestClientPostsAfterTheUpstreamClosedTheConnection: an upstream that
// closes each connection shortly after answering (as in a rolling restart)
// never gets a POST, which is not sent twice, on a connection it closed.
func TestClientPostsAfterTheUpstreamClosedTheConnection(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 20)
	base, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(r.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(b))+"\r\n\r\n"+string(b))
		time.Sleep(30 * time.Millisecond)
		c.Close()
		closed <- struct{}{}
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	body := strings.Repeat("p", MaxInlineBody)
	for i := range 10 {
		req, _ := http.NewRequest("POST", base+"/", strings.NewReader(body))
		resp, err := cl.Do(req, 0, nil)
		if err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		if got := readAll(t, resp); got != body {
			t.Fatalf("POST %d: an echo of %d bytes, want %d", i, len(got), len(body))
		}
		select {
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the upstream did not close")
		}
		time.Sleep(20 * time.Millisecond) // for the close to arrive
	}
	if n := conns.Load(); n != 10 {
		t.Fatalf("%d connections for 10 answers, want 10", n)
	}
}

func BenchmarkClient(b *testing.B) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer s.Close()
	u, _ := url.Parse(s.URL + "/")
	for _, name := range []string{"own", "transport"} {
		b.Run(name, func(b *testing.B) {
			do := (&http.Transport{MaxIdleConnsPerHost: 100}).RoundTrip
			if name == "own" {
				cl := testClient(time.Second, 0)
				do = func(r *http.Request) (*http.Response, error) { return cl.Do(r, 0, nil) }
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 512)
				for pb.Next() {
					req := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
					resp, err := do(req)
					if err != nil {
						b.Fatal(err)
					}
					for {
						if _, err := resp.Body.Read(buf); err != nil {
							break
						}
					}
					resp.Body.Close()
				}
			})
		})
	}
}

// BenchmarkClientBody streams 1 MiB answers with an idle bound, as the
// gateway reads them.
func BenchmarkClientBody(b *testing.B) {
	payload := []byte(strings.Repeat("x", 1<<20))
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	defer s.Close()
	u, _ := url.Parse(s.URL + "/")
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		req := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		resp, err := cl.Do(req, time.Minute, nil)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
		resp.Body.Close()
	}
}

// BenchmarkPeek is the check made on every connection taken from the pool.
func BenchmarkPeek(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if s := <-accepted; s != nil {
		defer s.Close()
	}
	var p peeker
	p.init(c)
	b.ReportAllocs()
	for b.Loop() {
		if !p.alive() {
			b.Fatal("an idle connection found dead")
		}
	}
}

// TestClientPrunesIdleConnections: after a burst, the connections it
// opened are closed once idle for longer than the limit, even while one
// connection stays busy and the pool is never emptied.
func TestClientPrunesIdleConnections(t *testing.T) {
	t.Parallel()
	var open atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(50 * time.Millisecond)
		}
		io.WriteString(w, "ok")
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	s.Start()
	defer s.Close()
	cl := testClient(time.Second, time.Second)
	cl.idleLimit = 200 * time.Millisecond
	defer cl.CloseIdle()

	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			resp, err := get(t, cl, context.Background(), "GET", s.URL+"/slow", 0)
			if err != nil {
				t.Error(err)
				return
			}
			readAll(t, resp)
		})
	}
	wg.Wait()
	if n := open.Load(); n != 10 {
		t.Fatalf("%d connections open after a burst of 10, want 10", n)
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := get(t, cl, context.Background(), "GET", s.URL+"/", 0)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if open.Load() == 1 {
			return
		}
	}
	t.Fatalf("%d connections still open, want the burst's idle ones closed and 1 busy", open.Load())
}

// TestClientProbesIdleConnections: a POST, which is never sent twice, does
// not meet a connection the server closed while it sat idle; one the
// server kept is used again.
func TestClientProbesIdleConnections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		serverIdle  time.Duration
		connections int64
	}{
		{"closed by the server", 50 * time.Millisecond, 4},
		{"kept by the server", 10 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int64
			s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(w, r.Body)
			}))
			s.Config.IdleTimeout = tc.serverIdle
			s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			s.Start()
			defer s.Close()
			cl := testClient(time.Second, time.Second)
			defer cl.CloseIdle()
			for i := range 4 {
				if i > 0 {
					time.Sleep(400 * time.Millisecond) // well past the server's 50 ms
				}
				req, _ := http.NewRequest("POST", s.URL+"/", strings.NewReader("entry"))
				resp, err := cl.Do(req, 0, nil)
				if err != nil {
					t.Fatalf("POST %d after 400 ms idle: %v", i, err)
				}
				if got := readAll(t, resp); got != "entry" {
					t.Fatalf("POST %d: %q", i, got)
				}
			}
			if n := conns.Load(); n != tc.connections {
				t.Fatalf("%d connections, want %d", n, tc.connections)
			}
		})
	}
}

// TestClientHTTPSGoesThroughTheFallback: the client speaks plain HTTP/1.1
// only; an https target is the fallback's.
func TestClientHTTPSGoesThroughTheFallback(t *testing.T) {
	t.Parallel()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure "+r.URL.Path)
	}))
	defer s.Close()
	cl := New(Options{ConnectTimeout: time.Second, Fallback: s.Client().Transport})
	defer cl.CloseIdle()
	resp, err := get(t, cl, context.Background(), "GET", s.URL+"/x", 0)
	if err != nil {
		t.Fatal(err)
	}
	if Owns(resp) {
		t.Error("an https answer came over the client's own connections")
	}
	if got := readAll(t, resp); got != "secure /x" {
		t.Fatalf("body %q", got)
	}
}

// A request that HTTP/1.1 cannot carry as it is fails before a
// connection is made, on the client's own path and on the fallback's
// alike: written as it is, a method with a space moves the target the
// upstream reads, and a CR or LF in a field ends it early.
func TestClientRefusesRequestsItCannotWrite(t *testing.T) {
	t.Parallel()
	s, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Method+" "+r.URL.RequestURI())
	})
	cl := testClient(time.Second, time.Second)
	defer cl.CloseIdle()
	for _, tc := range []struct {
		name   string
		method string
		header http.Header
	}{
		{"a method with a space", "DELETE /admin/delete-all", nil},
		{"a method with a tab", "GET\t/x", nil},
		{"a method with a CR LF", "GET / HTTP/1.1\r\nX:", nil},
		{"a method with a NUL", "GET\x00", nil},
		{"a method with a separator", "G(ET", nil},
		{"a value with a CR LF", "GET", http.Header{"X-A": {"1\r\nX-Injected: 1"}}},
		{"a value with a LF", "GET", http.Header{"X-A": {"1\nX-Injected: 1"}}},
		{"a value with a NUL", "GET", http.Header{"X-A": {"a\x00b"}}},
		{"a name with a CR LF", "GET", http.Header{"X-A\r\nX-Injected": {"1"}}},
		{"a name with a space", "GET", http.Header{"X A": {"1"}}},
		{"a name with a NUL", "GET", http.Header{"X\x00A": {"1"}}},
		{"an empty name", "GET", http.Header{"": {"1"}}},
	} {
		for _, path := range []string{"own", "fallback"} {
			t.Run(tc.name+"/"+path, func(t *testing.T) {
				u, _ := url.Parse(s.URL + "/x")
				h := http.Header{}
				for k, vv := range tc.header {
					h[k] = vv
				}
				if path == "fallback" {
					h["Connection"], h["Upgrade"] = []string{"upgrade"}, []string{"websocket"}
				}
				req := &http.Request{Method: tc.method, URL: u, Host: u.Host, Header: h, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
				resp, err := cl.Do(req, 0, nil)
				if err == nil {
					resp.Body.Close()
					t.Fatalf("sent, and answered %d", resp.StatusCode)
				}
				if !errors.Is(err, ErrInvalidRequest) {
					t.Errorf("error %v, want ErrInvalidRequest", err)
				}
			})
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections made for requests that cannot be written", n)
	}
	// A method that is a token, however unusual, and a tab in a value go.
	u, _ := url.Parse(s.URL + "/x")
	req := &http.Request{Method: "PURGE", URL: u, Host: u.Host, Header: http.Header{"X-A": {"a\tb"}}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	resp, err := cl.Do(req, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "PURGE /x" {
		t.Errorf("answered %q", got)
	}
}
