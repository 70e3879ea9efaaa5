package testredis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cmdTimeout bounds one Do/DoValue round trip. It is generous because tests
// deliberately block the server (DEBUG SLEEP, CLIENT PAUSE) and Do must wait
// that out; it exists only so a wedged server fails the test instead of
// hanging it until go test's global timeout.
const cmdTimeout = time.Minute

// ReplyError is an error reply from Redis, such as "WRONGTYPE Operation
// against a key holding the wrong kind of value". DoValue returns it as its
// error, and it appears as an element where a nested reply (EXEC) failed.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// Do sends one command on a fresh connection and returns the reply as text.
// It fails the test on connection errors and on error replies; use DoValue
// to inspect those. Replies are rendered as: simple and bulk strings as-is,
// integers in decimal, a nil reply as "(nil)", arrays as "[a b c]" (nested
// the same way), so Do(t, "GET", "k") == "v" and Do(t, "PTTL", "k") == "-1"
// read naturally.
func (s *Server) Do(tb testing.TB, args ...string) string {
	tb.Helper()
	v, err := s.DoValue(tb, args...)
	if err != nil {
		tb.Fatalf("testredis: %s %s: %v", s.Addr(), strings.Join(args, " "), err)
	}
	return formatReply(v)
}

// DoValue sends one command on a fresh connection and returns the parsed
// reply: string for simple and bulk strings, int64 for integers, nil for nil
// replies, []any for arrays. An error reply is returned as a ReplyError;
// any other error (the server is down, a timeout) as a plain error, so tests
// can also use DoValue to observe a stopped server.
//
// A fresh connection per call means connection state (SELECT, CLIENT
// REPLY, MULTI) does not carry over between calls, and a blocked command only
// blocks that call.
func (s *Server) DoValue(tb testing.TB, args ...string) (any, error) {
	tb.Helper()
	if len(args) == 0 {
		tb.Fatalf("testredis: Do called without a command")
	}
	c, err := s.dial(cmdTimeout)
	if err != nil {
		return nil, err
	}
	defer c.close()
	v, err := c.do(args...)
	if err != nil {
		return nil, err
	}
	if e, ok := v.(ReplyError); ok {
		return nil, e
	}
	return v, nil
}

func formatReply(v any) string {
	switch v := v.(type) {
	case nil:
		return "(nil)"
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case ReplyError:
		return "(error) " + string(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = formatReply(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	default:
		return fmt.Sprint(v)
	}
}

// conn is a minimal RESP2 client. The package avoids depending on a Redis
// client library so that it checks the code under test against the server,
// not against another client's interpretation of it.
type conn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// dial connects and authenticates; the whole exchange on the returned
// connection must finish within timeout.
func (s *Server) dial(timeout time.Duration) (*conn, error) {
	nc, err := net.DialTimeout("tcp", s.Addr(), min(timeout, 2*time.Second))
	if err != nil {
		return nil, err
	}
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		nc.Close()
		return nil, err
	}
	c := &conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}
	if s.password != "" {
		v, err := c.do("AUTH", s.password)
		if err == nil {
			if e, ok := v.(ReplyError); ok {
				err = fmt.Errorf("AUTH: %w", e)
			}
		}
		if err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

func (c *conn) close() { c.nc.Close() }

// do returns error replies as ReplyError values, not errors, so callers can
// tell a misbehaving connection from a server that said no.
func (c *conn) do(args ...string) (any, error) {
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return readReply(c.r)
}

// Sanity limits, so that talking to something that is not Redis fails
// instead of allocating gigabytes.
const (
	maxBulkLen  = 512 << 20
	maxArrayLen = 1 << 24
)

var errProtocol = errors.New("testredis: RESP protocol error")

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: bad line %q", errProtocol, line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return ReplyError(body), nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad integer %q", errProtocol, body)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulkLen {
			return nil, fmt.Errorf("%w: bad bulk length %q", errProtocol, body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, fmt.Errorf("%w: bulk string not terminated by CRLF", errProtocol)
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxArrayLen {
			return nil, fmt.Errorf("%w: bad array length %q", errProtocol, body)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("%w: unsupported reply type %q (only RESP2 is understood)", errProtocol, kind)
	}
}

// Keys lists every key of the server's database 0, by SCAN.
func (s *Server) Keys(tb testing.TB) []string {
	tb.Helper()
	var all []string
	cursor := "0"
	for {
		v, err := s.DoValue(tb, "SCAN", cursor, "COUNT", "1000")
		if err != nil {
			tb.Fatal(err)
		}
		page := v.([]any)
		cursor = page[0].(string)
		for _, k := range page[1].([]any) {
			all = append(all, k.(string))
		}
		if cursor == "0" {
			return all
		}
	}
}

// CheckExpiry fails tb for each key of the server that would never
// expire: a store or a bus that writes every key with an expiry, on every
// path of every script, never leaves one that lives forever.
func (s *Server) CheckExpiry(tb testing.TB) {
	tb.Helper()
	for _, k := range s.Keys(tb) {
		v, err := s.DoValue(tb, "PTTL", k)
		if err != nil {
			tb.Fatal(err)
		}
		if ttl := v.(int64); ttl == -1 {
			tb.Errorf("key %q has no expiry", k)
		}
	}
}
