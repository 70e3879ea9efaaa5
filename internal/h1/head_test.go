package h1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"
)

// FuzzWriteHead holds writeHead to Request.Write's bytes for every request
// it takes, and checks that it takes the plain ones.
func FuzzWriteHead(f *testing.F) {
	f.Add("GET", "127.0.0.1:8080", "", "/coupon/claim", "", "a=1&b=2", false, "X-User-Id", "u-1", "Accept", "*/*", "", false)
	f.Add("POST", "example.com", "", "/a b/%2F", "/a%20b/%2F", "", true, "user-agent", " ua ", "X-Empty", "", "curl/8", true)
	f.Add("", "[::1]:80", "h", "", "", "", false, "Bad Name", "v", "X", "\x00", "", false)
	f.Add("DELETE", "xn--e1afmkfd.example", "", "/p", "", "q\t", false, "Content-Length", "5", "Host", "evil", "\r\n", true)
	f.Add("PATCH", "h\u00e9", "", "/é", "", "", false, "Trailer", "x", "Connection", "close", "", true)
	f.Fuzz(func(t *testing.T, method, host, reqHost, path, rawPath, query string, forceQuery bool,
		k1, v1, k2, v2, ua string, setUA bool) {
		u := &url.URL{Scheme: "http", Host: host, Path: path, RawPath: rawPath, RawQuery: query, ForceQuery: forceQuery}
		req := &http.Request{Method: method, URL: u, Host: reqHost, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		req = req.WithContext(context.Background())
		if k1 != "" {
			req.Header[k1] = []string{v1, v2}
		}
		if k2 != "" {
			req.Header[http.CanonicalHeaderKey(k2)] = append(req.Header[http.CanonicalHeaderKey(k2)], v2)
		}
		if setUA {
			req.Header["User-Agent"] = []string{ua}
		}
		var want bytes.Buffer
		werr := req.Write(&want)
		var got bytes.Buffer
		bw := bufio.NewWriter(&got)
		took := writeHead(bw, req)
		bw.Flush()
		if !took {
			if got.Len() != 0 {
				t.Fatalf("writeHead declined %q but wrote %q", req.URL, got.String())
			}
			return
		}
		if werr != nil {
			t.Fatalf("writeHead took a request Request.Write refuses (%v):\n%q", werr, got.String())
		}
		if got.String() != want.String() {
			t.Fatalf("writeHead:\n%q\nRequest.Write:\n%q", got.String(), want.String())
		}
	})
}

// TestWriteHeadTakesPlainRequests: a gateway's usual request goes the fast
// way; one with a body, Close or a client trace goes to Request.Write.
func TestWriteHeadTakesPlainRequests(t *testing.T) {
	mk := func() *http.Request {
		r, _ := http.NewRequest("GET", "http://127.0.0.1:9/coupon/claim?u=1", nil)
		r.Header.Set("X-User-Id", "u-1")
		r.Header.Set("X-Forwarded-For", "10.0.0.1")
		return r
	}
	bw := bufio.NewWriter(&bytes.Buffer{})
	if !writeHead(bw, mk()) {
		t.Error("a GET without a body went to Request.Write")
	}
	body := mk()
	body.Body, body.ContentLength = http.NoBody, 0
	if !writeHead(bw, body) {
		t.Error("a GET with http.NoBody went to Request.Write")
	}
	for name, change := range map[string]func(*http.Request) *http.Request{
		"body":  func(r *http.Request) *http.Request { r.Body, r.ContentLength = http.NoBody, 3; return r },
		"close": func(r *http.Request) *http.Request { r.Close = true; return r },
		"trace": func(r *http.Request) *http.Request {
			return r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{}))
		},
		"fields": func(r *http.Request) *http.Request {
			for i := range maxFastFields + 1 {
				r.Header.Set("X-F"+strings.Repeat("a", i), "v")
			}
			return r
		},
	} {
		if writeHead(bw, change(mk())) {
			t.Errorf("%s: writeHead took it", name)
		}
	}
	bw = bufio.NewWriter(io.Discard)
	if n := testing.AllocsPerRun(100, func() { writeHead(bw, body) }); n != 0 {
		t.Errorf("writeHead allocates %v times, want 0", n)
	}
}
