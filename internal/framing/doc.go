// Package framing guards the requests an HTTP/1.1 server reads from a
// connection: it passes on a request only when where it ends is beyond
// doubt, and after the first request whose framing is in doubt it passes
// on nothing more, so no byte after a framing error is ever read as
// another request.
//
// A gateway is a request-smuggling target twice over. Behind a CDN or a
// load balancer that shares one connection among many clients, a request
// the front reads as one length and the gateway as another leaves the
// rest of it on the connection, where the gateway reads it as the next
// client's request (RFC 9112 §11.2). And in front of an upstream, a
// request passed on with framing the upstream reads differently does the
// same one hop further. net/http's server is careful, but it is liberal
// where a gateway must not be: it reads Transfer-Encoding together with
// Content-Length as chunked and keeps the connection open, ignores
// Transfer-Encoding in HTTP/1.0 (so a chunked body becomes the next
// request), unfolds obsolete line folding, takes a bare LF for a line's
// end and ignores control bytes in chunk extensions and trailers. Conn
// refuses each of these before net/http sees them.
//
// Conn sits between the connection and net/http's reader. It reads each
// request head line by line and holds back the empty line that ends it
// until the head has passed every check; it then frames the body by its
// Content-Length, or scans it chunk by chunk (RFC 9112 §7.1). Bytes pass
// on once checked; body data of a known length passes on without a copy.
// What it refuses, net/http never sees whole: in its place Read hands on
// bytes that net/http refuses at the same place, so that net/http answers
// 400 after the requests before it and closes the connection; after them
// Read passes on nothing but the connection's end. Refused tells what was
// refused and the status it deserves, which the server's Listener in
// package gateway puts in place of net/http's 400.
//
// Conn is deliberately stricter than RFC 9112 in a few places where a
// lenient reader is what makes smuggling possible, and where well-behaved
// clients never go: no bare LF or bare CR anywhere, no obsolete line
// folding, no Content-Length list, no Transfer-Encoding but a single
// "chunked", no transfer coding at all in HTTP/1.0, no framing field in a
// trailer.
package framing
