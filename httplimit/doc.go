// Package httplimit is net/http middleware that applies floodgate limits to
// a Go service without the gateway, over either store, and answers as the
// gateway does: a rejected request gets its limit's status (429 by default)
// and a JSON body with a code, a message and the request id, Retry-After,
// and the RateLimit and X-RateLimit-* headers; an admitted one gets the
// headers of the limit closest to rejecting. Every limit that applies to a
// request is decided in one store call, and a rejected request consumes
// nothing.
//
// On an admitted response the rate-limit headers are the middleware's,
// whatever the handler set: the writer the handler gets puts them back
// when the response head leaves, and drops the handler's RateLimit,
// RateLimit-* and X-RateLimit-* headers, which would describe another
// limit. Retry-After and every other header of an admitted response are
// the handler's. The writer keeps the server's Flush, ReadFrom and Hijack,
// and http.ResponseController reaches the rest through its Unwrap.
//
// The request id (Options.RequestIDHeader) is the client's when it sent one
// well-formed value and a new one otherwise; the handler reads it from the
// request's header, and every response carries it back.
//
// The answers and headers are the gateway's own, made for rejections to
// be cheap: a rejection allocates nothing of its own but a request id it
// makes.
package httplimit
