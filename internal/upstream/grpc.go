package upstream

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/floodgate-gw/floodgate/internal/answer"
)

// A proxied gRPC call is judged by its grpc-status (grpcFailure), from
// the trailers-only head or the trailers, since its HTTP status is 200
// however it went; a grpc-timeout that ran out counts for neither, nor
// does a request stream that failed on the client's side (endGRPCClient).
// An answer that breaks off after its head ends with a status in the
// trailers (endGRPC) rather than a reset, which the client would read as
// INTERNAL.

// grpcFailure is the HTTP status the breaker and passive ejection judge
// a proxied gRPC call by when its grpc-status (v) says the upstream
// failed, as Envoy maps gRPC statuses for outlier detection: UNKNOWN,
// INTERNAL and DATA_LOSS 500, UNAVAILABLE 503, DEADLINE_EXCEEDED 504
// (unless the call's own grpc-timeout may be what ran out, in its last
// tenth: the client's deadline, passed on to the upstream, is not the
// upstream's fault). 0 for any other status: the application's answer, which says
// nothing of the upstream's health (RESOURCE_EXHAUSTED is as often the
// application's own limit).
func grpcFailure(v string, resp *http.Response) int {
	switch v {
	case "2", "13", "15":
		return http.StatusInternalServerError
	case "14":
		return http.StatusServiceUnavailable
	case "4":
		if hb, ok := resp.Body.(*h2Body); !ok || !hb.nearDeadline() {
			return http.StatusGatewayTimeout
		}
	}
	return 0
}

// endGRPC ends a gRPC call whose answer broke off after its head was
// sent with a status in the trailers, which net/http's HTTP/2 server
// sends after the body: DEADLINE_EXCEEDED when the call's grpc-timeout ran
// out, UNAVAILABLE otherwise.
func endGRPC(h http.Header, err error) {
	code, msg := answer.GRPCUnavailable, "upstream broke off: "+err.Error()
	if errors.Is(err, errGRPCDeadline) {
		code, msg = answer.GRPCDeadlineExceeded, "the call's grpc-timeout ran out"
	}
	h[http.TrailerPrefix+"Grpc-Status"] = []string{strconv.Itoa(int(code))}
	h[http.TrailerPrefix+"Grpc-Message"] = []string{answer.EncodeGRPCMessage(msg)}
}

// endGRPCClient ends a gRPC call whose request stream failed on the
// client's side after the answer's head was sent (status: 408 for
// server.body_timeout, 413 for server.max_body_bytes, 400 for a stream
// that broke its framing) with the status the gateway answers that with
// before the head.
func endGRPCClient(h http.Header, status int) {
	msg := "the request stream broke off"
	switch status {
	case http.StatusRequestTimeout:
		msg = "the request stream was silent for server.body_timeout"
	case http.StatusRequestEntityTooLarge:
		msg = "the request stream went over server.max_body_bytes"
	}
	h[http.TrailerPrefix+"Grpc-Status"] = []string{strconv.Itoa(int(answer.GRPCCodeOf(status)))}
	h[http.TrailerPrefix+"Grpc-Message"] = []string{msg}
}

// clientCancelled records in h, for the access log and metrics, that the
// client cancelled a gRPC call (its stream reset, its deadline passed):
// CANCELLED, which is what the client's own library reports. Nothing of
// it is sent, as the stream is gone; trailer says the answer's head went
// out already.
func clientCancelled(h http.Header, trailer bool) {
	if trailer {
		h[http.TrailerPrefix+"Grpc-Status"] = grpcCancelled
	} else {
		h["Grpc-Status"] = grpcCancelled
	}
}

var grpcCancelled = []string{strconv.Itoa(int(answer.GRPCCanceled))}
