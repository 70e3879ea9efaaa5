package framing

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Error is a request Conn refused: the status to answer it with and a short
// reason for logs ("te_with_cl").
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string { return "request framing: " + e.Reason }

// Limits of what Conn holds at a time.
const (
	// maxChunkLine bounds a chunk-size line with its extensions, as
	// net/http's chunked reader does.
	maxChunkLine = 4096
	// maxTrailer bounds a chunked body's trailer section; net/http reads
	// no more than its buffer, 4 KiB, either.
	maxTrailer = 4096
	// bufSize is what Conn reads at a time, net/http's own read size.
	bufSize = 4096
)

// Poisons are what Conn hands on instead of the bytes it refuses: bytes
// that net/http's parser refuses at the same place. An error from Read
// would do the same in the reader, but net/http's server cancels the
// request's context on any read error, and the read may be the one it
// makes in the background while an earlier request's handler runs: that
// request, well framed, would lose its answer. Data cancels nothing, and
// net/http reaches it only when it parses on from the last byte that
// passed.
var (
	// headPoison fails a request line ("malformed HTTP request") and a
	// header field line ("malformed MIME header line") alike: 400, and
	// the connection closes.
	headPoison = []byte("\x00\r\n\r\n")
	// chunkPoison fails a chunk-size line ("invalid byte in chunk
	// length"), the CRLF after a chunk's data ("malformed chunked
	// encoding") and a trailer field line alike: the body's read fails.
	chunkPoison = []byte("\x00\r\n\r\n")
)

type state uint8

const (
	stHead      state = iota // a request head, line by line
	stBody                   // a body of known length: n bytes left
	stChunkLine              // a chunk-size line
	stChunkData              // a chunk's data: n bytes left
	stChunkEnd               // the CRLF after a chunk's data
	stTrailer                // the trailer section of a chunked body
	stHold                   // after a request to switch protocols, until it is answered
	stRaw                    // the connection switched protocols: the rest passes
	stRefused                // the poison is handed on, then nothing
)

// What became of a request to switch protocols (Conn.mode).
const (
	modeHTTP     int32 = iota
	modeSwitched       // the connection was taken over: its bytes are the new protocol's
	modeRefused        // the request was answered otherwise: nothing more passes
)

// maxHold bounds what a client may send after a request to switch
// protocols before its answer; WebSocket's client sends nothing then.
const maxHold = 64 << 10

var errHoldFull = &Error{Status: http.StatusBadRequest, Reason: "too_much_before_switch"}

// Conn is a server connection whose reads pass on only requests whose
// framing is beyond doubt (see the package doc). Its Read is not safe for
// concurrent use, as no net.Conn's reads are meant to be; Refused is.
type Conn struct {
	net.Conn
	maxHead int // longest head, request line and fields with their CRLFs

	// buf[r:v] has passed and waits for Read; buf[v:w] is read from the
	// connection and not yet checked.
	buf     []byte
	bufp    *[]byte // the pool's handle on buf, while buf is the pool's
	r, v, w int

	st      state
	n       int64 // stBody, stChunkData: bytes left
	head    head  // stHead: what the head says so far
	trailer int   // stTrailer: bytes of the trailer section so far
	raw     bool  // the request asks to switch protocols: stHold after its body

	// heads counts the heads passed; holdAt is the count at the request
	// to switch protocols that the Conn holds what follows for, answered
	// the requests answered. mode says what became of that request.
	heads    int64
	holdAt   atomic.Int64
	answered atomic.Int64
	mode     atomic.Int32

	refusal *Error                // set when a request is refused
	refused atomic.Pointer[Error] // published once the poison is handed on
}

// bufs are the Conns' read buffers, held only while bytes wait in them: an
// idle keep-alive connection holds none.
var bufs = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

// head is what Conn keeps of a head while it reads it.
type head struct {
	bytes  int
	lines  int
	http10 bool
	cl     []byte // the Content-Length value, if any
	hasCL  bool
	// Transfer-Encoding: its fields, its codings, whether the last is
	// chunked and whether one before it is.
	teLines, teCodings             int
	teChunkedLast, teChunkedBefore bool
	connUp                         bool // Connection lists "upgrade"
	upgrade                        bool // Upgrade names a protocol
}

// NewConn returns c guarded. maxHead bounds a request's head (its request
// line and header fields, CRLFs included); a longer head is refused with
// 431. Zero means http.DefaultMaxHeaderBytes.
func NewConn(c net.Conn, maxHead int) *Conn {
	if maxHead <= 0 {
		maxHead = http.DefaultMaxHeaderBytes
	}
	return &Conn{Conn: c, maxHead: maxHead}
}

// Refused returns the request Conn refused, once what stands for it has
// been read; nil before that, and while every request passed.
func (c *Conn) Refused() *Error { return c.refused.Load() }

// Switched tells the Conn that its connection was taken over from the
// server (net/http's StateHijacked): from now on its bytes pass as they
// are, the new protocol's.
func (c *Conn) Switched() { c.mode.CompareAndSwap(modeHTTP, modeSwitched) }

// Answered tells the Conn that the server answered a request and waits
// for the next (net/http's StateIdle). Once the request to switch
// protocols that it holds the bytes after is answered without a switch,
// those bytes never pass: the connection ends there.
func (c *Conn) Answered() {
	n := c.answered.Add(1)
	if at := c.holdAt.Load(); at > 0 && n >= at {
		c.mode.CompareAndSwap(modeHTTP, modeRefused)
	}
}

// Read reads the connection's bytes as far as they pass.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.r < c.v {
			k := copy(p, c.buf[c.r:c.v])
			c.r += k
			if c.st == stRefused && c.r == c.v {
				c.refused.Store(c.refusal)
			}
			return k, nil
		}
		if c.st != stRaw && c.st != stRefused && c.mode.Load() == modeSwitched {
			// What the Conn holds or has not checked is the new
			// protocol's. What follows a refusal never is.
			c.st = stRaw
		}
		switch c.st {
		case stRefused:
			return c.drain()
		case stHold:
			// The bytes after a request to switch protocols wait until
			// the request is answered: a switch lets them pass, any
			// other answer ends the connection before them. Meanwhile
			// the reads (net/http's background read) block on the
			// connection as on a quiet client.
			if c.mode.Load() == modeRefused {
				return 0, io.EOF
			}
			if c.w-c.r >= maxHold {
				return 0, errHoldFull
			}
			if err := c.fill(); err != nil {
				return 0, err
			}
			continue
		}
		if c.v < c.w {
			c.check()
			if c.r < c.v || c.st == stRefused || c.st == stHold {
				continue
			}
		}
		// Nothing has passed that is not read. Data of a known length
		// goes from the connection to p without a copy.
		if c.v == c.w {
			c.release()
			switch c.st {
			case stRaw:
				return c.Conn.Read(p)
			case stBody, stChunkData:
				k, err := c.Conn.Read(p[:min(int64(len(p)), c.n)])
				c.n -= int64(k)
				if c.n == 0 {
					c.endData()
				}
				return k, err
			}
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
}

// drain reads what the client sends after the poison, and passes on
// nothing of it but the connection's end or failure. Ending the stream at
// once, with io.EOF, would fail the request net/http may still be
// serving, whose context it cancels when its background read meets the
// end of the stream; a client that keeps quiet blocks that read instead,
// and so does a Conn, until net/http closes the connection after the
// refusal's answer.
func (c *Conn) drain() (int, error) {
	if len(c.buf) == 0 {
		c.buf = make([]byte, bufSize)
	}
	for {
		if _, err := c.Conn.Read(c.buf); err != nil {
			return 0, err
		}
	}
}

// release gives the buffer back once everything in it is read.
func (c *Conn) release() {
	c.r, c.v, c.w = 0, 0, 0
	switch {
	case c.bufp != nil && len(c.buf) == bufSize && &c.buf[0] == &(*c.bufp)[0]:
		bufs.Put(c.bufp) // the handle it came with: no allocation
	case len(c.buf) == bufSize:
		putBuf(c.buf)
	}
	c.buf, c.bufp = nil, nil
}

// putBuf gives the pool a buffer of bufSize it did not hand out (drain's).
func putBuf(b []byte) {
	bufs.Put(&b)
}

// fill reads more of the connection into buf[w:], making room first.
func (c *Conn) fill() error {
	if c.buf == nil {
		c.bufp = bufs.Get().(*[]byte)
		c.buf = *c.bufp
	}
	if c.r > 0 && c.w == len(c.buf) {
		n := copy(c.buf, c.buf[c.r:c.w])
		c.v -= c.r
		c.w = n
		c.r = 0
	}
	if c.w == len(c.buf) {
		// A line longer than the buffer: grow it as far as a line may
		// be long in this state (check refuses a line past that).
		size := max(2*len(c.buf), bufSize)
		switch c.st {
		case stHead:
			size = min(size, c.maxHead+2)
		case stHold:
			size = min(size, maxHold)
		default:
			size = min(size, maxChunkLine+maxTrailer)
		}
		if size <= len(c.buf) {
			// check refuses such a line before the buffer is full.
			panic("framing: a line outgrew the buffer")
		}
		nb := make([]byte, size)
		copy(nb, c.buf[:c.w])
		c.buf = nb
	}
	k, err := c.Conn.Read(c.buf[c.w:])
	c.w += k
	if k > 0 {
		return nil
	}
	return err
}

// check checks buf[v:w] as far as it can, moving v past what passes.
func (c *Conn) check() {
	for c.v < c.w && c.st != stRefused {
		switch c.st {
		case stHead:
			if !c.headLine() {
				return
			}
		case stBody, stChunkData:
			k := min(int64(c.w-c.v), c.n)
			c.v += int(k)
			c.n -= k
			if c.n == 0 {
				c.endData()
			}
		case stChunkEnd:
			if c.w-c.v < 2 {
				return
			}
			if c.buf[c.v] != '\r' || c.buf[c.v+1] != '\n' {
				c.refuse(http.StatusBadRequest, "chunk_data_end", chunkPoison)
				return
			}
			c.v += 2
			c.st = stChunkLine
		case stChunkLine:
			if !c.chunkLine() {
				return
			}
		case stTrailer:
			if !c.trailerLine() {
				return
			}
		case stRaw:
			c.v = c.w
		case stHold:
			return
		}
	}
}

// endData follows the end of a body of known length or of a chunk's data.
func (c *Conn) endData() {
	if c.st == stChunkData {
		c.st = stChunkEnd
		return
	}
	c.endBody()
}

// endBody follows the end of a request's body: the next head, or the rest
// of the connection as it is after a request to switch protocols.
func (c *Conn) endBody() {
	c.head = head{cl: c.head.cl[:0]}
	c.st = stHead
	if c.raw {
		c.st = stHold
		c.holdAt.Store(c.heads)
	}
}

// refuse hands poison on in place of everything from buf[v:], and nothing
// after it.
func (c *Conn) refuse(status int, reason string, poison []byte) {
	c.refusal = &Error{Status: status, Reason: reason}
	c.st = stRefused
	c.w = c.v
	if len(c.buf)-c.v < len(poison) {
		nb := make([]byte, c.v+len(poison))
		copy(nb, c.buf[:c.v])
		c.buf = nb
	}
	c.w += copy(c.buf[c.v:], poison)
	c.v = c.w
}

// line returns the line at buf[v:], without its CRLF, and its length with
// it; ok is false when the line is not all there yet. A line that does not
// end in CRLF, or holds a CR elsewhere, is refused (refusal set).
func (c *Conn) line(poison []byte) (content []byte, n int, ok bool) {
	b := c.buf[c.v:c.w]
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, 0, false
	}
	line := b[:i+1]
	if i == 0 || line[i-1] != '\r' {
		c.refuse(http.StatusBadRequest, "bare_lf", poison)
		return nil, 0, false
	}
	content = line[:i-1]
	if bytes.IndexByte(content, '\r') >= 0 {
		c.refuse(http.StatusBadRequest, "bare_cr", poison)
		return nil, 0, false
	}
	return content, len(line), true
}

// headLine checks the next line of a head and passes it, except for the
// empty line that ends the head, which passes only with the whole head.
// It returns false when it needs more bytes or refused the request.
func (c *Conn) headLine() bool {
	content, n, ok := c.line(headPoison)
	if !ok {
		if c.st != stRefused && c.head.bytes+c.w-c.v > c.maxHead {
			c.refuse(http.StatusRequestHeaderFieldsTooLarge, "head_too_large", headPoison)
		}
		return false
	}
	if len(content) == 0 && c.head.lines == 0 {
		// An empty line before a request line is ignored (RFC 9112
		// §2.2): a client may end a body with an extra CRLF. net/http
		// would refuse it, so it does not pass: it is skipped once what
		// passed before it is read, and counts to the head's bound.
		if c.r < c.v {
			return false
		}
		if c.head.bytes += n; c.head.bytes > c.maxHead {
			c.refuse(http.StatusRequestHeaderFieldsTooLarge, "head_too_large", headPoison)
			return false
		}
		c.r += n
		c.v += n
		return true
	}
	if c.head.bytes += n; c.head.bytes > c.maxHead {
		c.refuse(http.StatusRequestHeaderFieldsTooLarge, "head_too_large", headPoison)
		return false
	}
	var e *Error
	switch {
	case len(content) == 0:
		e = c.endHead()
	case c.head.lines == 0:
		e = c.requestLine(content)
	default:
		e = c.fieldLine(content)
	}
	if e != nil {
		c.refuse(e.Status, e.Reason, headPoison)
		return false
	}
	c.head.lines++
	c.v += n
	if len(content) == 0 {
		c.heads++
		c.startBody()
	}
	return true
}

// startBody sets the state for the body of the head just passed.
func (c *Conn) startBody() {
	h := &c.head
	c.raw = h.connUp && h.upgrade
	switch {
	case h.teLines > 0:
		c.st = stChunkLine
	case h.hasCL:
		c.n = parseDigits(h.cl)
		c.st = stBody
		if c.n == 0 {
			c.endBody()
		}
	default:
		c.endBody()
	}
}

// chunkLine checks a chunk-size line with its extensions.
func (c *Conn) chunkLine() bool {
	content, n, ok := c.line(chunkPoison)
	if !ok {
		if c.st != stRefused && c.w-c.v > maxChunkLine {
			c.refuse(http.StatusBadRequest, "chunk_line_too_long", chunkPoison)
		}
		return false
	}
	size, reason := chunkSize(content)
	if reason != "" {
		c.refuse(http.StatusBadRequest, reason, chunkPoison)
		return false
	}
	c.v += n
	if size == 0 {
		c.st, c.trailer = stTrailer, 0
	} else {
		c.st, c.n = stChunkData, size
	}
	return true
}

// trailerLine checks a line of the trailer section; the empty line ends
// the body.
func (c *Conn) trailerLine() bool {
	content, n, ok := c.line(chunkPoison)
	if !ok {
		if c.st != stRefused && c.trailer+c.w-c.v > maxTrailer {
			c.refuse(http.StatusBadRequest, "trailer_too_long", chunkPoison)
		}
		return false
	}
	if c.trailer += n; c.trailer > maxTrailer {
		c.refuse(http.StatusBadRequest, "trailer_too_long", chunkPoison)
		return false
	}
	if len(content) > 0 {
		if reason := trailerField(content); reason != "" {
			c.refuse(http.StatusBadRequest, reason, chunkPoison)
			return false
		}
	}
	c.v += n
	if len(content) == 0 {
		c.endBody()
	}
	return true
}

// CloseWrite half-closes the connection when it can, as net/http does
// after an answer it closes the connection with.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
