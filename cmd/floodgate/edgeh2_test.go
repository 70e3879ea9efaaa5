package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// An h2Conn is a raw HTTP/2 connection to the gateway's clear listener
// (h2c), written frame by frame.
type h2Conn struct {
	t  *testing.T
	c  net.Conn
	fr *http2.Framer
	// enc encodes header blocks into buf.
	enc *hpack.Encoder
	buf bytes.Buffer
	// settings are the server's first SETTINGS.
	settings map[http2.SettingID]uint32
}

// dialH2C opens a connection, sends the preface and the client's
// settings, and acknowledges the server's.
func dialH2C(t *testing.T, addr string) *h2Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(waitTimeout))
	h := &h2Conn{t: t, c: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.buf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := h.fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("first frame %v, want the server's SETTINGS", f)
	}
	h.settings = map[http2.SettingID]uint32{}
	sf.ForeachSetting(func(s http2.Setting) error {
		h.settings[s.ID] = s.Val
		return nil
	})
	if err := h.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return h
}

// block encodes a request's header block: GET path, then extra fields.
func (h *h2Conn) block(path string, extra ...hpack.HeaderField) []byte {
	h.buf.Reset()
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "gateway.test"}, {Name: ":path", Value: path},
	}, extra...) {
		h.enc.WriteField(f)
	}
	return bytes.Clone(h.buf.Bytes())
}

// request sends a GET of path on stream id, its header block split into
// CONTINUATION frames of at most 16384 bytes.
func (h *h2Conn) request(id uint32, path string, extra ...hpack.HeaderField) {
	h.t.Helper()
	b := h.block(path, extra...)
	const max = 16384
	first := b[:min(len(b), max)]
	b = b[len(first):]
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: true, EndHeaders: len(b) == 0}); err != nil {
		h.t.Fatal(err)
	}
	for len(b) > 0 {
		n := min(len(b), max)
		if err := h.fr.WriteContinuation(id, n == len(b), b[:n]); err != nil {
			h.t.Fatal(err)
		}
		b = b[n:]
	}
}

// next reads frames until one that want accepts, answering PINGs.
func (h *h2Conn) next(what string, want func(http2.Frame) bool) http2.Frame {
	h.t.Helper()
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			h.t.Fatalf("waiting for %s: %v", what, err)
		}
		if want(f) {
			return f
		}
	}
}

// status reads the answer of stream id: its status and body.
func (h *h2Conn) status(id uint32) (string, string) {
	h.t.Helper()
	a := h.answers(id)[id]
	return a.status, a.body
}

type h2Answer struct{ status, body string }

// answers reads the answers of the streams ids, in any order.
func (h *h2Conn) answers(ids ...uint32) map[uint32]h2Answer {
	h.t.Helper()
	got := map[uint32]h2Answer{}
	open := map[uint32]bool{}
	for _, id := range ids {
		open[id] = true
	}
	for len(open) > 0 {
		f := h.next(fmt.Sprintf("the answers of streams %v", ids), func(f http2.Frame) bool { return open[f.Header().StreamID] })
		id := f.Header().StreamID
		a := got[id]
		ended := false
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			a.status = f.PseudoValue("status")
			ended = f.StreamEnded()
		case *http2.DataFrame:
			a.body += string(f.Data())
			ended = f.StreamEnded()
		case *http2.RSTStreamFrame:
			h.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
		}
		got[id] = a
		if ended {
			delete(open, id)
		}
	}
	return got
}

// h2Fixture serves a config with h2c and the HTTP/2 limits given, and an
// upstream that holds /api/slow until release is closed.
func h2Fixture(t *testing.T, http2Block string) (f *fixture, p *proc, seen *atomic.Int64, arrived chan struct{}, release chan struct{}) {
	seen = new(atomic.Int64)
	arrived = make(chan struct{}, 100)
	release = make(chan struct{})
	f = newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if r.URL.Path == "/api/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "upstream "+r.URL.Path)
	}))
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	f.write(`
server:
  listen: "{{LISTEN}}"
  h2c: true
  max_header_bytes: 8192
` + http2Block + `
admin:
  listen: "{{ADMIN}}"
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"], timeout: 30s}
`)
	return f, f.serve(), seen, arrived, release
}

// A header list over the bound (server.max_header_bytes, or
// server.http2.max_header_list_size) gets 431 on its stream, and the
// connection goes on.
func TestServeHTTP2HeadersTooLarge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, block string }{
		{"max_header_bytes", ""},
		{"max_header_list_size", "  http2: {max_header_list_size: 4096}\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, _, seen, _, _ := h2Fixture(t, tt.block)
			h := dialH2C(t, f.listen)
			size := 9000 // over 8192 and its allowance
			if tt.name == "max_header_list_size" {
				size = 5000 // under max_header_bytes, over the list's bound
			}
			// Fields of 100 bytes, none too long alone.
			var pad []hpack.HeaderField
			for i := 0; i*100 < size; i++ {
				pad = append(pad, hpack.HeaderField{Name: fmt.Sprintf("x-pad-%d", i), Value: strings.Repeat("p", 100)})
			}
			h.request(1, "/api/big", pad...)
			if status, body := h.status(1); status != "431" {
				t.Errorf("stream 1: %s %q, want 431", status, body)
			}
			h.request(3, "/api/small")
			if status, body := h.status(3); status != "200" || body != "upstream /api/small" {
				t.Errorf("stream 3 after the 431: %s %q", status, body)
			}
			if n := seen.Load(); n != 1 {
				t.Errorf("the upstream saw %d requests, want 1 (the small one)", n)
			}
		})
	}
}

// A stream beyond server.http2.max_concurrent_streams is refused, as a
// stream error; the streams open are served.
func TestServeHTTP2MaxConcurrentStreams(t *testing.T) {
	t.Parallel()
	f, _, seen, arrived, release := h2Fixture(t, "  http2: {max_concurrent_streams: 2}\n")
	h := dialH2C(t, f.listen)
	h.request(1, "/api/slow")
	h.request(3, "/api/slow")
	<-arrived
	<-arrived
	h.request(5, "/api/slow")
	rst := h.next("the reset of stream 5", func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	if rst.StreamID != 5 || rst.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("reset %d %v, want stream 5 PROTOCOL_ERROR", rst.StreamID, rst.ErrCode)
	}
	close(release)
	for id, a := range h.answers(1, 3) {
		if a.status != "200" || a.body != "upstream /api/slow" {
			t.Errorf("stream %d: %s %q", id, a.status, a.body)
		}
	}
	if n := seen.Load(); n != 2 {
		t.Errorf("the upstream saw %d requests, want 2", n)
	}
}

// Streams opened and reset at once (the rapid reset attack,
// CVE-2023-44487) end the connection with ENHANCE_YOUR_CALM once more are
// waiting than four times max_concurrent_streams, the upstream sees only
// some of them, and other clients are served meanwhile.
func TestServeHTTP2RapidReset(t *testing.T) {
	t.Parallel()
	f, _, seen, _, _ := h2Fixture(t, "  http2: {max_concurrent_streams: 10}\n")
	h := dialH2C(t, f.listen)
	h.c.SetDeadline(time.Now().Add(4 * waitTimeout))
	const most = 100_000
	var sent atomic.Int64
	var stop atomic.Bool
	writeErr := make(chan error, 1)
	go func() {
		// The same header block each time: hpack indexes it after the
		// first.
		for id := uint32(1); sent.Load() < most && !stop.Load(); id += 2 {
			if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block("/api/reset"), EndStream: true, EndHeaders: true}); err != nil {
				writeErr <- err
				return
			}
			if err := h.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
				writeErr <- err
				return
			}
			sent.Add(1)
		}
		writeErr <- nil
	}()
	var away *http2.GoAwayFrame
	for away == nil {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d streams: %v, want a GOAWAY", sent.Load(), err)
		}
		away, _ = f.(*http2.GoAwayFrame)
	}
	stop.Store(true)
	if away.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM", away.ErrCode, away.DebugData())
	}
	// The connection then closes.
	for {
		if _, err := h.fr.ReadFrame(); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset by peer") {
				t.Errorf("after the GOAWAY: %v, want the connection closed", err)
			}
			break
		}
	}
	h.c.Close()
	<-writeErr
	// The server took the streams up to the GOAWAY's last one, far
	// fewer than were sent; the upstream saw at most those it started
	// (max_concurrent_streams at a time) before their resets came.
	n, taken, upstream := sent.Load(), int64(away.LastStreamID+1)/2, seen.Load()
	t.Logf("%d streams sent, opened and reset; the server took %d; the upstream saw %d", n, taken, upstream)
	if taken >= most/10 {
		t.Errorf("the server took %d streams of %d before it ended the connection", taken, n)
	}
	if upstream > taken {
		t.Errorf("the upstream saw %d requests of %d streams taken", upstream, taken)
	}

	// Another client is served.
	h2 := dialH2C(t, f.listen)
	h2.request(1, "/api/after")
	if status, body := h2.status(1); status != "200" || body != "upstream /api/after" {
		t.Errorf("another client: %s %q", status, body)
	}
}

// The server announces the limits of server.http2.
func TestServeHTTP2Settings(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, block string
		want        map[http2.SettingID]uint32
		connWindow  uint32
	}{
		{"defaults", "", map[http2.SettingID]uint32{
			http2.SettingMaxConcurrentStreams: 100, http2.SettingMaxFrameSize: 1 << 20,
			http2.SettingMaxHeaderListSize: 8192 + 320, http2.SettingInitialWindowSize: 1 << 20,
		}, 1 << 20},
		{"given", "  http2: {max_concurrent_streams: 7, max_read_frame_size: 32768, max_header_list_size: 4096, initial_stream_window: 100000, initial_conn_window: 200000}\n",
			map[http2.SettingID]uint32{
				http2.SettingMaxConcurrentStreams: 7, http2.SettingMaxFrameSize: 32768,
				http2.SettingMaxHeaderListSize: 4096 + 320, http2.SettingInitialWindowSize: 100000,
			}, 200000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, _, _, _, _ := h2Fixture(t, tt.block)
			h := dialH2C(t, f.listen)
			for id, want := range tt.want {
				if got, ok := h.settings[id]; !ok || got != want {
					t.Errorf("%v = %d (given: %v), want %d", id, got, ok, want)
				}
			}
			// The connection's window opens from the 65535 every
			// connection starts with.
			wu := h.next("the connection's WINDOW_UPDATE", func(f http2.Frame) bool {
				w, ok := f.(*http2.WindowUpdateFrame)
				return ok && w.StreamID == 0
			}).(*http2.WindowUpdateFrame)
			if got := 65535 + wu.Increment; got != tt.connWindow {
				t.Errorf("connection window %d, want %d", got, tt.connWindow)
			}
		})
	}
}
