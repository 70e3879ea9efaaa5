package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/testcerts"
)

// The differential framing suite: raw requests, malformed or ambiguous,
// sent over TCP to the gateway in front of an upstream that records every
// byte it receives. Each case ends with a request for /api/smuggled, sent
// in the same write: a gateway that reads any byte after a framing error
// as a request answers it, and may pass it on. Every case runs on both
// upstream client paths: the gateway's own client (plain http; small
// bodies of known length go inline, the others to http.Transport) and
// http.Transport alone (https).
//
// testdata/framing.golden holds, per case and path, the statuses the
// client got, whether the connection closed, and the bytes of the whole
// requests each upstream connection received, request ids and ports
// masked; `go test -run TestFramingCorpus -update` writes it anew.

var update = flag.Bool("update", false, "write testdata/framing.golden anew")

// marker is the request every case ends with.
const marker = "GET /api/smuggled HTTP/1.1\r\nHost: gw\r\n\r\n"

type framingCase struct {
	name string
	raw  string // the client's bytes, marker excluded
	want []int  // statuses the client gets, interim ones included
	up   int    // complete requests the upstream gets, the marker's included
	// open: the connection stays open after the answers (the marker was
	// one of the requests); else it closes after the last one.
	open bool
	// half: the client half-closes after writing.
	half bool
}

const (
	ok2   = "GET /api/first HTTP/1.1\r\nHost: gw\r\n\r\n"
	post  = "POST /api/p HTTP/1.1\r\nHost: gw\r\n"
	chunk = post + "Transfer-Encoding: chunked\r\n"
)

func framingCorpus() []framingCase {
	refused := func(name, raw string, status int) framingCase {
		return framingCase{name: name, raw: raw, want: []int{status}}
	}
	big := strings.Repeat("b", 20000)
	cs := []framingCase{
		// Well framed: each passes, and so does the marker after it.
		{name: "get", raw: ok2, want: []int{200, 200}, up: 2, open: true},
		{name: "content-length", raw: post + "Content-Length: 5\r\n\r\nhello", want: []int{200, 200}, up: 2, open: true},
		{name: "content-length 0", raw: post + "Content-Length: 0\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "content-length with leading zeros", raw: post + "Content-Length: 005\r\n\r\nhello", want: []int{200, 200}, up: 2, open: true},
		{name: "content-length twice, equal", raw: post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", want: []int{200, 200}, up: 2, open: true},
		{name: "content-length shorter than the body", raw: post + "Content-Length: 3\r\n\r\nhel" + "PUT /api/rest HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nlo", want: []int{200, 200, 200}, up: 3, open: true},
		{name: "content-length large", raw: post + "Content-Length: 20000\r\n\r\n" + big, want: []int{200, 200}, up: 2, open: true},
		{name: "chunked", raw: chunk + "\r\n5\r\nhello\r\n0\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "chunked in capitals", raw: post + "Transfer-Encoding: CHUNKED\r\n\r\n5\r\nhello\r\n0\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "chunked after a tab", raw: post + "Transfer-Encoding:\tchunked\t\r\n\r\n5\r\nhello\r\n0\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "chunk size in capitals with leading zeros", raw: chunk + "\r\n000A\r\nhellohello\r\n0\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "chunk extensions", raw: chunk + "\r\n5;name=value;flag; q = \"a \\\" b\"\r\nhello\r\n0;end\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "chunked with a trailer", raw: chunk + "\r\n5\r\nhello\r\n0\r\nX-Checksum: 42\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "chunked large", raw: chunk + "\r\n4e20\r\n" + big + "\r\n0\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "empty lines before a request", raw: "\r\n\r\n" + ok2 + "\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "HTTP/1.0 keep-alive with a body", raw: "POST /api/p HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", want: []int{200, 200}, up: 2, open: true},
		{name: "HTTP/1.2 read as HTTP/1.1", raw: "GET /api/v HTTP/1.2\r\nHost: gw\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "raw octets in a field value", raw: "GET /api/o HTTP/1.1\r\nHost: gw\r\nX-Name: \xc3\xa9t\xc3\xa9\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "underscores in another field", raw: "GET /api/u HTTP/1.1\r\nHost: gw\r\nX_Trace: 1\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "absolute-form target", raw: "GET http://gw/api/abs HTTP/1.1\r\nHost: gw\r\n\r\n", want: []int{200, 200}, up: 2, open: true},
		{name: "expect 100-continue", raw: post + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello", want: []int{100, 200, 200}, up: 2, open: true},

		// Request smuggling's classics.
		refused("CL.TE", post+"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG", 400),
		refused("TE.CL", chunk+"Content-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n", 400),
		refused("CL 0 with TE", post+"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE.TE, second coding", chunk+"Transfer-Encoding: x\r\n\r\n0\r\n\r\n", 400),
		refused("TE.TE, chunked twice", chunk+"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE, chunked, identity", post+"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400),
		refused("TE identity", post+"Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\nhi", 400),
		refused("TE xchunked", post+"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE quoted", post+"Transfer-Encoding: \"chunked\"\r\n\r\n0\r\n\r\n", 400),
		refused("TE with a parameter", post+"Transfer-Encoding: chunked;q=1.0\r\n\r\n0\r\n\r\n", 400),
		refused("TE empty", post+"Transfer-Encoding:\r\nContent-Length: 2\r\n\r\nhi", 400),
		refused("TE gzip, chunked", post+"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
		refused("TE in two fields", post+"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501),
		refused("TE with a space before the colon", post+"Transfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400),
		refused("TE with a tab before the colon", post+"Transfer-Encoding\t: chunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE folded onto the next line", post+"Transfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE behind a folded line", post+"X-A: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400),
		refused("TE with a vertical tab", post+"Transfer-Encoding: \vchunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE with a form feed", post+"Transfer-Encoding:\x0cchunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE with a NUL", post+"Transfer-Encoding: chunked\x00\r\n\r\n0\r\n\r\n", 400),
		refused("TE name with a NUL", post+"Transfer-Encoding\x00: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400),
		refused("TE with a bare CR", post+"Transfer-Encoding: chunked\rX: y\r\n\r\n0\r\n\r\n", 400),
		refused("TE ended by a bare LF", post+"Transfer-Encoding: chunked\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400),
		refused("Transfer_Encoding", post+"Transfer_Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400),
		refused("TE in HTTP/1.0", "POST /api/p HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
		refused("TE in HTTP/1.0, body a request", "POST /api/p HTTP/1.0\r\nHost: gw\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n", 400),

		// Content-Length tricks.
		refused("CL twice, different", post+"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
		refused("CL with a plus", post+"Content-Length: +5\r\n\r\nhello", 400),
		refused("CL negative", post+"Content-Length: -1\r\n\r\n", 400),
		refused("CL with a space inside", post+"Content-Length: 1 5\r\n\r\nhello", 400),
		refused("CL in hex", post+"Content-Length: 0x5\r\n\r\nhello", 400),
		refused("CL list", post+"Content-Length: 5, 5\r\n\r\nhello", 400),
		refused("CL empty", post+"Content-Length:\r\n\r\n", 400),
		refused("CL past int64", post+"Content-Length: 99999999999999999999\r\n\r\n", 400),
		refused("Content_Length", post+"Content_Length: 5\r\n\r\nhello", 400),
		{name: "CL body cut short", raw: post + "Content-Length: 10\r\n\r\nhello", want: []int{400}, half: true},
		{name: "CL large body cut short", raw: post + "Content-Length: 30000\r\n\r\n" + big, want: []int{400}, half: true},

		// Chunk tricks.
		refused("chunk size not hex", chunk+"\r\nzz\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk size negative", chunk+"\r\n-5\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk size 0x", chunk+"\r\n0x5\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk size past int64", chunk+"\r\n8000000000000000\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk size of 18 digits", chunk+"\r\nffffffffffffffffff\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk size with a space", chunk+"\r\n5 \r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk size with a NUL", chunk+"\r\n5\x00\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk line ended by a bare LF", chunk+"\r\n5\nhello\r\n0\r\n\r\n", 400),
		refused("chunk lines all bare LF", chunk+"\r\n5\nhello\n0\n\n", 400),
		refused("chunk extension with a control byte", chunk+"\r\n5;\x01\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk extension with a bare LF", chunk+"\r\n5;a\nhello\r\n0\r\n\r\n", 400),
		refused("chunk extension with an open quote", chunk+"\r\n5;a=\"b\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk extension too long", chunk+"\r\n5;a="+strings.Repeat("x", 5000)+"\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk data longer than its size", chunk+"\r\n3\r\nhello\r\n0\r\n\r\n", 400),
		refused("chunk data shorter than its size", chunk+"\r\n8\r\nhello\r\n0\r\n\r\n", 400),
		refused("last chunk without its empty line", chunk+"\r\n5\r\nhello\r\n0\r\n", 400),
		refused("trailer folded", chunk+"\r\n5\r\nhello\r\n0\r\nX: a\r\n b\r\n\r\n", 400),
		refused("trailer with Content-Length", chunk+"\r\n5\r\nhello\r\n0\r\nContent-Length: 5\r\n\r\n", 400),
		refused("trailer with Transfer-Encoding", chunk+"\r\n5\r\nhello\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
		refused("trailer with a bare LF", chunk+"\r\n5\r\nhello\r\n0\r\nX: a\n\r\n", 400),
		refused("trailer with a NUL", chunk+"\r\n5\r\nhello\r\n0\r\nX: \x00\r\n\r\n", 400),
		{name: "chunked body cut short", raw: chunk + "\r\n5\r\nhello\r\n", want: []int{400}, half: true},
		{name: "chunked large body cut short", raw: chunk + "\r\n4e20\r\n" + big[:10000], want: []int{400}, half: true},

		// Heads.
		refused("obs-fold", "GET /api/f HTTP/1.1\r\nHost: gw\r\nX-A: a\r\n\tb\r\n\r\n", 400),
		refused("bare LF lines", "GET /api/f HTTP/1.1\nHost: gw\n\n", 400),
		refused("bare LF ends the head", "GET /api/f HTTP/1.1\r\nHost: gw\r\n\n", 400),
		refused("bare CR in a value", "GET /api/f HTTP/1.1\r\nHost: gw\r\nX-A: a\rb\r\n\r\n", 400),
		refused("bare CR ends a line", "GET /api/f HTTP/1.1\rHost: gw\r\n\r\n", 400),
		refused("DEL in a value", "GET /api/f HTTP/1.1\r\nHost: gw\r\nX-A: a\x7fb\r\n\r\n", 400),
		refused("two spaces in the request line", "GET  /api/f HTTP/1.1\r\nHost: gw\r\n\r\n", 400),
		refused("space after the version", "GET /api/f HTTP/1.1 \r\nHost: gw\r\n\r\n", 400),
		refused("tab in the request line", "GET\t/api/f HTTP/1.1\r\nHost: gw\r\n\r\n", 400),
		refused("space in the target", "GET /api/f g HTTP/1.1\r\nHost: gw\r\n\r\n", 400),
		refused("version in lower case", "GET /api/f http/1.1\r\nHost: gw\r\n\r\n", 400),
		refused("no version", "GET /api/f\r\nHost: gw\r\n\r\n", 400),
		refused("HTTP/2.0", "GET /api/f HTTP/2.0\r\nHost: gw\r\n\r\n", 505),
		refused("HTTP/2's preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
		refused("field without a colon", "GET /api/f HTTP/1.1\r\nHost: gw\r\nX-A\r\n\r\n", 400),
		refused("field with an empty name", "GET /api/f HTTP/1.1\r\nHost: gw\r\n: a\r\n\r\n", 400),
		refused("space before a colon", "GET /api/f HTTP/1.1\r\nHost : gw\r\n\r\n", 400),
		refused("head too large", "GET /api/f HTTP/1.1\r\nHost: gw\r\nX-A: "+strings.Repeat("a", 5000)+"\r\n\r\n", 431),
		refused("no Host", "GET /api/f HTTP/1.1\r\n\r\n", 400),
		refused("two Hosts", "GET /api/f HTTP/1.1\r\nHost: gw\r\nHost: other\r\n\r\n", 400),
		{name: "after a good request", raw: ok2 + post + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG", want: []int{200, 400}, up: 1},

		// Requests to switch protocols: what follows one is the new
		// protocol's, or nothing.
		{name: "upgrade refused by the upstream", raw: "GET /api/ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: refuse\r\n\r\n", want: []int{200}, up: 1},
		{name: "upgrade refused by a limit", raw: "GET /deny/ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", want: []int{403}},
		{name: "upgrade to no route", raw: "GET /nowhere HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", want: []int{404}},
		{name: "upgrade header alone", raw: "GET /api/ws HTTP/1.1\r\nHost: gw\r\nUpgrade: echo\r\n\r\n", want: []int{200}, up: 1},
		// net/http answers OPTIONS * itself, keeping the connection open:
		// what follows the request is still never read.
		{name: "upgrade by OPTIONS *, then CL.TE", raw: "OPTIONS * HTTP/1.1\r\nHost: gw\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n" +
			post + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", want: []int{200}},
		{name: "upgrade pipelined after a request", raw: ok2 + "GET /api/ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: refuse\r\n\r\n", want: []int{200, 200}, up: 2},
	}
	// A NUL and a bare CR at every place of a head, and a good request
	// before each: only the good one is answered 200 and passed on.
	head := "POST /api/n HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n"
	for i := 0; i <= len(head); i++ {
		for _, b := range []string{"\x00", "\r"} {
			raw := ok2 + head[:i] + b + head[i:] + "\r\nhi"
			cs = append(cs, framingCase{name: fmt.Sprintf("%q at %d", b, i), raw: raw, want: []int{200, 400}, up: 1})
		}
	}
	return cs
}

// framingConfig routes /api/** to the recorder and /deny/** to a limit
// whose key is always missing.
const framingConfig = `
admin: {listen: ""}
server: {max_header_bytes: 4096{{SERVER}}}
routes:
  - id: deny
    match: {path: /deny/**}
    upstream: {targets: ["{{UP}}"]{{UPTLS}}}
    limits: [{name: key, key: ["header:X-Never"], rate: 1/s}]
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"], timeout: 2s{{UPTLS}}}
`

// framingRig is a gateway served as serve serves it, through
// Gateway.Listener, in front of a recorder. Over https the routes trust
// the recorder's CA (upstream.tls.ca).
type framingRig struct {
	rec   *recorder
	addr  string
	srv   *httptest.Server
	gw    *Gateway
	once  sync.Once
	conns []*recConn
}

func newFramingRig(t testing.TB, useTLS bool) *framingRig {
	return newFramingRigWith(t, useTLS, "")
}

// newFramingRigWith adds server to the server block of the rig's config.
func newFramingRigWith(t testing.TB, useTLS bool, server string) *framingRig {
	t.Helper()
	rec := newRecorder(t, useTLS)
	upTLS := ""
	if useTLS {
		upTLS = `, tls: {ca: "` + rec.caFile + `"}`
	}
	yaml := strings.NewReplacer("{{UP}}", rec.url(), "{{UPTLS}}", upTLS, "{{SERVER}}", server).Replace(framingConfig)
	cfg, err := config.Parse("framing.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(cfg, Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	rig := &framingRig{rec: rec, gw: gw}
	rig.srv = httptest.NewUnstartedServer(gw)
	rig.srv.Config.MaxHeaderBytes = cfg.Server.MaxHeaderBytes
	rig.srv.Listener = gw.Listener(rig.srv.Config, rig.srv.Listener)
	rig.srv.Start()
	rig.addr = rig.srv.Listener.Addr().String()
	t.Cleanup(func() { rig.stop() })
	return rig
}

// stop shuts the gateway down, its handlers done and its upstream
// connections closed, and returns what every upstream connection received:
// then all the gateway sent is there.
func (rig *framingRig) stop() []*recConn {
	rig.once.Do(func() {
		rig.srv.Close()
		rig.gw.Close()
		rig.conns = rig.rec.stop()
	})
	return rig.conns
}

// recorder is an upstream that keeps every byte each connection brings and
// answers each request it reads with 200 and what it read. A request for
// Upgrade: echo gets 101 and its connection echoes from then on.
type recorder struct {
	ln     net.Listener
	tls    bool
	caFile string // the CA of its certificate, over TLS

	mu    sync.Mutex
	conns []*recConn
	open  []net.Conn
	wg    sync.WaitGroup
}

type recConn struct {
	raw    bytes.Buffer
	whole  int // raw's bytes up to the end of the last whole request
	reqs   []upRequest
	tail   error // why reading stopped: io.EOF when the gateway closed at a request's end
	closed bool  // the gateway closed the connection
	echo   bool  // switched protocols

}

type upRequest struct {
	method, path, body string
	header             http.Header
}

func newRecorder(t testing.TB, useTLS bool) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{ln: ln, tls: useTLS}
	if useTLS {
		ca := testcerts.NewCA(t, "recorder CA")
		rec.caFile = testcerts.Write(t, t.TempDir(), "ca.pem", ca.PEM)
		rec.ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "recorder").TLS(t)}})
	}
	rec.wg.Go(func() {
		for {
			c, err := rec.ln.Accept()
			if err != nil {
				return
			}
			rc := &recConn{}
			rec.mu.Lock()
			rec.conns = append(rec.conns, rc)
			rec.open = append(rec.open, c)
			rec.mu.Unlock()
			rec.wg.Go(func() { rec.serve(c, rc) })
		}
	})
	t.Cleanup(func() { rec.stop() })
	return rec
}

// stop stops accepting, waits for each connection to end (closing those
// that have not after a while) and returns what each received.
func (rec *recorder) stop() []*recConn {
	rec.ln.Close()
	done := make(chan struct{})
	go func() { rec.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		rec.mu.Lock()
		for _, c := range rec.open {
			c.Close()
		}
		rec.mu.Unlock()
		<-done
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.conns
}

func (rec *recorder) url() string {
	if rec.tls {
		return "https://" + rec.ln.Addr().String()
	}
	return "http://" + rec.ln.Addr().String()
}

// lockedBuffer is a recConn's raw bytes, written under the recorder's lock.
type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (rec *recorder) serve(c net.Conn, rc *recConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(io.TeeReader(c, lockedBuffer{&rec.mu, &rc.raw}))
	for {
		req, err := http.ReadRequest(br)
		if err == nil {
			var body []byte
			body, err = io.ReadAll(req.Body)
			if err == nil {
				rec.mu.Lock()
				rc.reqs = append(rc.reqs, upRequest{req.Method, req.URL.Path, string(body), req.Header})
				rc.whole = rc.raw.Len() - br.Buffered()
				rec.mu.Unlock()
				if req.Header.Get("Upgrade") == "echo" {
					io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
					rec.mu.Lock()
					rc.echo = true
					rec.mu.Unlock()
					io.Copy(c, br)
					return
				}
				msg := fmt.Sprintf("up: %s %s %d", req.Method, req.URL.Path, len(body))
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Up: 1\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
				continue
			}
		}
		rec.mu.Lock()
		rc.tail = err
		rc.closed = errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		rec.mu.Unlock()
		return
	}
}

func summary(up []upRequest) []string {
	var s []string
	for _, r := range up {
		s = append(s, fmt.Sprintf("%s %s (%d bytes)", r.method, r.path, len(r.body)))
	}
	return s
}

// clientSide is what a client got back for its bytes.
type clientSide struct {
	statuses []int
	closed   bool   // the gateway closed the connection after its answers
	open     bool   // the connection served one more request after them
	extra    []byte // bytes that were no answer
}

// sendRaw writes raw to the gateway in one write, reads the answers, and
// then either sees the connection closed or, when want answers came and
// it is still open, asks one more request to show it is.
func sendRaw(t testing.TB, addr, raw string, want int, half bool) clientSide {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, raw)
	if half {
		conn.(*net.TCPConn).CloseWrite()
	}
	var cs clientSide
	br := bufio.NewReader(conn)
	for len(cs.statuses) < want || half {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			rest, _ := io.ReadAll(br)
			cs.extra = rest
			cs.closed = len(rest) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
			return cs
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cs.statuses = append(cs.statuses, resp.StatusCode)
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return cs
		}
	}
	// As many answers as expected: is the connection closed, or does it
	// serve another request?
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "GET /api/after HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"); err == nil {
		if resp, err := http.ReadResponse(br, nil); err == nil {
			resp.Body.Close()
			cs.open = resp.StatusCode == http.StatusOK
			return cs
		}
	}
	rest, _ := io.ReadAll(br)
	cs.extra, cs.closed = rest, len(rest) == 0
	return cs
}

// checkUpstream checks what each upstream connection received: whole
// requests, and after an incomplete one nothing, the gateway having
// closed the connection. It returns the whole requests in order.
func checkUpstream(t testing.TB, conns []*recConn) []upRequest {
	t.Helper()
	var all []upRequest
	for i, c := range conns {
		all = append(all, c.reqs...)
		if c.echo {
			continue
		}
		switch {
		case c.tail == nil:
			// Still open and idle in the gateway's pool: every byte was a
			// whole request.
		case errors.Is(c.tail, io.EOF) && !errors.Is(c.tail, io.ErrUnexpectedEOF):
			// Closed at a request's end.
		case errors.Is(c.tail, io.ErrUnexpectedEOF) || strings.Contains(c.tail.Error(), "unexpected EOF") || errors.Is(c.tail, syscall.ECONNRESET):
			// An incomplete request, and then the connection closed (or
			// reset, by a client that closes with unsent bytes): the
			// upstream never had it whole.
		default:
			t.Errorf("upstream connection %d: %v after %d requests: the gateway sent what is no request: %q", i, c.tail, len(c.reqs), c.raw.Bytes())
		}
		for _, r := range c.reqs {
			if len(r.header["Content-Length"]) > 0 && len(r.header["Transfer-Encoding"]) > 0 {
				t.Errorf("upstream connection %d: a request with both Content-Length and Transfer-Encoding", i)
			}
		}
	}
	return all
}

var masks = []*regexp.Regexp{
	regexp.MustCompile(`(X-Request-Id|"request_id"): ?"?[0-9a-f]+-[0-9a-z]+`),
	regexp.MustCompile(`127\.0\.0\.1:[0-9]+`),
	regexp.MustCompile(`Date: [^\r]+`),
}

func masked(b []byte) string {
	s := string(b)
	for _, m := range masks {
		s = m.ReplaceAllStringFunc(s, func(x string) string {
			k, _, _ := strings.Cut(x, ":")
			return k + ":*"
		})
	}
	return s
}

func TestFramingCorpus(t *testing.T) {
	t.Parallel()
	corpus := framingCorpus()
	if len(corpus) < 60 {
		t.Fatalf("the corpus has %d cases", len(corpus))
	}
	paths := []string{"http", "https"}
	records := make([]strings.Builder, len(paths)*len(corpus))
	t.Run("cases", func(t *testing.T) {
		for pi, path := range paths {
			for ci, tc := range corpus {
				golden := &records[pi*len(corpus)+ci]
				t.Run(path+"/"+tc.name, func(t *testing.T) {
					t.Parallel()
					framingCaseRun(t, path, tc, golden)
				})
			}
		}
	})
	var golden strings.Builder
	for i := range records {
		golden.WriteString(records[i].String())
	}
	if t.Failed() {
		return
	}
	const file = "testdata/framing.golden"
	if *update {
		if err := os.WriteFile(file, []byte(golden.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (go test -run TestFramingCorpus -update writes it)", err)
	}
	if got := golden.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("%s differs at line %d:\n got %s\nwant %s\n(go test -run TestFramingCorpus -update writes it anew)", file, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%s: %d lines, want %d", file, len(gl), len(wl))
	}
}

// framingCaseRun sends one case to a gateway of its own on path (http or
// https upstream) and writes what came of it to golden.
func framingCaseRun(t *testing.T, path string, tc framingCase, golden *strings.Builder) {
	rig := newFramingRig(t, path == "https")
	raw := tc.raw + marker
	if tc.half {
		raw = tc.raw
	}
	got := sendRaw(t, rig.addr, raw, len(tc.want), tc.half)
	conns := rig.stop()
	up := checkUpstream(t, conns)
	if !slices.Equal(got.statuses, tc.want) {
		t.Errorf("answers %v, want %v", got.statuses, tc.want)
	}
	if len(got.extra) > 0 {
		t.Errorf("after the answers, bytes that are none: %q", got.extra)
	}
	switch {
	case tc.open && !got.open:
		t.Errorf("the connection did not serve a request after the answers (closed %v)", got.closed)
	case !tc.open && !got.closed:
		t.Errorf("the connection stayed open after the answers (served another: %v)", got.open)
	}
	upN := len(up)
	if tc.open {
		upN-- // the request that showed the connection open
	}
	if upN != tc.up {
		t.Errorf("the upstream got %d whole requests, want %d: %v", upN, tc.up, summary(up))
	}
	for _, r := range up {
		if strings.Contains(r.path, "smuggled") && !tc.open {
			t.Errorf("the request after a refused one reached the upstream")
		}
	}
	fmt.Fprintf(golden, "=== %s/%s\nclient %v closed=%v open=%v\n", path, tc.name, got.statuses, got.closed, got.open)
	// The whole requests byte for byte; of an incomplete one only that
	// it came, as how much of it the gateway had sent when the client's
	// body failed depends on timing.
	for i, c := range conns {
		if c.whole == 0 && !c.echo {
			continue
		}
		fmt.Fprintf(golden, "upstream %d: %q", i, masked(c.raw.Bytes()[:c.whole]))
		if c.raw.Len() > c.whole && !c.echo {
			golden.WriteString(" and an incomplete request")
		}
		golden.WriteString("\n")
	}
}

// The body's failures are the same whatever the gateway wraps the body in:
// with max_body_bytes, http.MaxBytesReader stands between the client's
// body and both upstream client paths.
func TestFramingBodyFailuresWithMaxBody(t *testing.T) {
	t.Parallel()
	for _, tc := range framingCorpus() {
		if !tc.half && !strings.HasPrefix(tc.raw, chunk) {
			continue
		}
		for _, useTLS := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tls=%v", tc.name, useTLS), func(t *testing.T) {
				t.Parallel()
				rig := newFramingRigWith(t, useTLS, ", max_body_bytes: 1000000")
				raw := tc.raw + marker
				if tc.half {
					raw = tc.raw
				}
				got := sendRaw(t, rig.addr, raw, len(tc.want), tc.half)
				up := checkUpstream(t, rig.stop())
				if !slices.Equal(got.statuses, tc.want) || got.closed == tc.open {
					t.Errorf("answers %v, closed %v; want %v, closed %v", got.statuses, got.closed, tc.want, !tc.open)
				}
				if want := tc.up + map[bool]int{true: 1}[tc.open]; len(up) != want {
					t.Errorf("the upstream got %d whole requests, want %d: %v", len(up), want, summary(up))
				}
			})
		}
	}
}

// A joined connection carries the new protocol's bytes, whatever they
// look like: a request line among them is no request.
func TestFramingAfterUpgrade(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		rig := newFramingRig(t, useTLS)
		conn, err := net.Dial("tcp", rig.addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "GET /api/ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"+marker)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Connection") != "Upgrade" {
			t.Fatalf("answer %v %v, want 101 with Connection: Upgrade", resp, err)
		}
		echo := make([]byte, len(marker))
		if _, err := io.ReadFull(br, echo); err != nil || string(echo) != marker {
			t.Errorf("the tunnel echoed %q (%v), want the bytes sent after the request", echo, err)
		}
		conn.Close()
		up := checkUpstream(t, rig.stop())
		if len(up) != 1 {
			t.Errorf("the upstream got %d requests, want the upgrade alone", len(up))
		}
	}
}

// Whatever bytes a client sends, the upstream receives whole requests
// only, each one the client sent as net/http reads the bytes, in order;
// and the gateway answers nothing after an answer that closes the
// connection.
func FuzzFraming(f *testing.F) {
	for _, tc := range framingCorpus()[:60] {
		f.Add([]byte(tc.raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		rig := newFramingRig(t, false)
		conn, err := net.Dial("tcp", rig.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		conn.Write(append(raw, marker...))
		conn.(*net.TCPConn).CloseWrite()
		br := bufio.NewReader(conn)
		var answers []*http.Response
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers = append(answers, resp)
			if resp.StatusCode == http.StatusSwitchingProtocols {
				break
			}
		}
		for i, resp := range answers {
			if resp.Close && i != len(answers)-1 {
				t.Fatalf("answer %d of %d closed the connection, yet more came", i+1, len(answers))
			}
		}
		conn.Close()
		up := checkUpstream(t, rig.stop())
		// The upstream's requests are some of the client's, as net/http
		// reads the bytes as sent, in order: the gateway answers others
		// itself (no route, a limit), never one it did not read whole.
		sent := bufio.NewReader(bytes.NewReader(append(raw, marker...)))
	next:
		for i, u := range up {
			for {
				if p, _ := sent.Peek(2); string(p) == "\r\n" {
					sent.Discard(2)
					continue
				}
				req, err := http.ReadRequest(sent)
				if err != nil {
					t.Fatalf("the upstream got request %d (%s %s %q), which the client never sent whole: %v; sent %q, upstream %v", i, u.method, u.path, u.body, err, raw, summary(up))
				}
				body, err := io.ReadAll(req.Body)
				if err != nil {
					t.Fatalf("the upstream got request %d (%s %s %q), whose body the client never sent whole: %v", i, u.method, u.path, u.body, err)
				}
				if req.Method == u.method && string(body) == u.body {
					if req.Header.Get("Upgrade") == "echo" {
						break next // the rest is the tunnel's
					}
					continue next
				}
			}
		}
	})
}

// A refusal is counted by its reason and logged, whether the head was
// refused (net/http's answer, rewritten) or the body (the gateway's).
func TestFramingRefusalsCounted(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	})
	h := newHarness(t, basic, up)
	srv := behindListener(t, h)
	for _, raw := range []string{
		"POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /api/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;\x01\r\nhello\r\n0\r\n\r\n",
	} {
		if got := exchangeWith(t, srv.Listener.Addr().String(), raw); !strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, "Connection: close\r\n") {
			t.Errorf("%q: answered %q", raw, got)
		}
	}
	for _, reason := range []string{"transfer_encoding_with_content_length", "bad_chunk_extension"} {
		if n := counterValue(t, h, "gateway_framing_refused_total", map[string]string{"reason": reason}); n != 1 {
			t.Errorf("gateway_framing_refused_total{reason=%q} = %v, want 1", reason, n)
		}
		if !strings.Contains(h.log.String(), `"reason":"`+reason+`"`) {
			t.Errorf("no log line with reason %s in %s", reason, h.log.String())
		}
	}
}

var (
	nginxBin = flag.String("framing.nginx", "", "nginx binary: compare the framing corpus's answers with nginx's (bench/framing-nginx.sh)")
	nginxOut = flag.String("framing.out", "", "with -framing.nginx: where to write the table of the cases nginx treats differently")
)

// TestFramingNginx sends the corpus to nginx in front of the recorder, as
// a reverse proxy is usually set up (HTTP/1.1 and keep-alive upstream,
// WebSocket upgrades passed on), and to the gateway, and tabulates the
// cases whose answers, closing or upstream requests differ. It runs only
// with -framing.nginx, from bench/framing-nginx.sh.
func TestFramingNginx(t *testing.T) {
	t.Parallel()
	if *nginxBin == "" {
		t.Skip("needs -framing.nginx (bench/framing-nginx.sh)")
	}
	describe := func(c clientSide, up int) string {
		s := fmt.Sprint(c.statuses)
		switch {
		case c.closed:
			s += ", closed"
		case c.open:
			s += ", kept open"
		}
		return fmt.Sprintf("%s; upstream: %d", s, up)
	}
	var table strings.Builder
	table.WriteString("| case | floodgate | nginx |\n|---|---|---|\n")
	same := 0
	for _, tc := range framingCorpus() {
		raw := tc.raw + marker
		if tc.half {
			raw = tc.raw
		}
		rig := newFramingRig(t, false)
		fg := sendRaw(t, rig.addr, raw, len(tc.want), tc.half)
		fgUp := len(checkUpstream(t, rig.stop()))

		rec := newRecorder(t, false)
		addr, stop := startNginx(t, rec)
		ng := sendRaw(t, addr, raw, len(tc.want), tc.half)
		stop()
		ngConns := rec.stop()
		ngUp := 0
		for _, c := range ngConns {
			ngUp += len(c.reqs)
		}
		a, b := describe(fg, fgUp), describe(ng, ngUp)
		if a == b {
			same++
			continue
		}
		fmt.Fprintf(&table, "| %s | %s | %s |\n", strings.ReplaceAll(tc.name, "|", `\|`), a, b)
	}
	fmt.Fprintf(&table, "\n%d of %d cases alike.\n", same, len(framingCorpus()))
	t.Log("\n" + table.String())
	if *nginxOut != "" {
		if err := os.WriteFile(*nginxOut, []byte(table.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startNginx runs nginx in the foreground in front of rec and returns its
// address and a function that stops it (gracefully, so that its upstream
// connections close).
func startNginx(t *testing.T, rec *recorder) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	user := ""
	if os.Getuid() == 0 {
		user = "user root;" // its workers write request bodies under dir
	}
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
%[4]s
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path %[1]s;
  proxy_temp_path %[1]s;
  map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
  upstream up { server %[2]s; keepalive 16; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
    }
  }
}
`, dir, rec.ln.Addr().String(), addr, user)
	if err := os.WriteFile(dir+"/nginx.conf", []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(*nginxBin, "-c", dir+"/nginx.conf", "-p", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nginx did not start")
		}
	}
	return addr, func() {
		cmd.Process.Signal(syscall.SIGQUIT)
		cmd.Wait()
	}
}

// A client that falls silent mid-body for longer than server.body_timeout
// gets 408 and its connection is closed, on both upstream client paths;
// one that keeps sending, however slowly, is not cut, nor is a long
// answer once the body is in.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	up := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/api/stream" {
			for range 8 {
				io.WriteString(w, "x")
				http.NewResponseController(w).Flush()
				time.Sleep(100 * time.Millisecond)
			}
			return
		}
		fmt.Fprintf(w, "got %d", len(b))
	})
	// A chunk every 50 ms against a bound of 500 ms: ten times apart, so
	// that a busy machine's scheduler cannot make the steady client look
	// silent.
	h := newHarness(t, "server: {body_timeout: 500ms}\n"+basic, up)
	addr := h.srv.Listener.Addr().String()
	for _, size := range []int{1000, 20000} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("a", 100))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%d bytes: %v; log %s", size, err, h.log.String())
		}
		answerOf(t, resp, http.StatusRequestTimeout, "request_timeout")
		if !resp.Close {
			t.Errorf("%d bytes: the 408 does not close the connection", size)
		}
		conn.Close()
	}
	// Steady but slow: a chunk every 50 ms for a second.
	pr, pw := io.Pipe()
	go func() {
		for range 20 {
			time.Sleep(50 * time.Millisecond)
			pw.Write([]byte("chunk"))
		}
		pw.Close()
	}()
	resp := h.do("POST", "/api/x", nil, pr)
	if body := drain(resp); resp.StatusCode != 200 || body != "got 100" {
		t.Errorf("a slow body: %d %q", resp.StatusCode, body)
	}
	// The answer streams for 800 ms after the body is in.
	resp = h.do("POST", "/api/stream", nil, strings.NewReader("hi"))
	if body := drain(resp); resp.StatusCode != 200 || body != "xxxxxxxx" {
		t.Errorf("a long answer: %d %q", resp.StatusCode, body)
	}
}
