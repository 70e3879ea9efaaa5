package gateway

import (
	"net/http"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/answer"
	"github.com/floodgate-gw/floodgate/internal/upstream"
)

// gRPC requests (answer.IsGRPC) pass through routes of protocol h2c and h2
// as any request does, trailers and all. What changes is the gateway's own
// answers, which a gRPC client reads only as a status: each is sent as
// HTTP 200 with grpc-status and grpc-message and no body (a trailers-only
// response), with the fields the JSON answer would carry (the request id,
// the rate-limit fields, Retry-After) as metadata. Metrics and logs count
// the answer by the HTTP status its JSON form has, so that a rejection is
// a 429 there whichever way it was sent.
//
// Two things differ for a proxied call. An answer that breaks off after
// its head ends with a status in the trailers (endGRPC) rather than a
// reset, which the client would read as INTERNAL. And the breaker and
// passive ejection judge the call by its grpc-status (grpcFailure), from
// the trailers-only head or the trailers, since its HTTP status is 200
// however it went; a grpc-timeout that ran out counts for neither, nor
// does a request stream that failed on the client's side (endGRPCClient).

// reply writes one of the gateway's own answers to x's request: JSON, or
// a gRPC status. extra goes in the JSON alone.
func (x *exchange) reply(w http.ResponseWriter, a *answer.Answer, extra string) {
	if x.grpc {
		a.WriteGRPC(w)
		return
	}
	a.Write(w, x.rid, extra)
}

// refuseGRPC is the answer to a gRPC request the route cannot take, or
// nil: a route of protocol http1 would send it upstream over HTTP/1.1,
// which cannot carry gRPC (no trailers for its status); a grpc-timeout
// that is not one is the client's mistake, and one of 0 a deadline
// already passed, which the upstream would answer too, but only after
// the limits counted the request.
func (x *exchange) refuseGRPC() *answer.Answer {
	if x.route.grpcRefused != nil {
		return x.route.grpcRefused
	}
	if vv := x.r.Header["Grpc-Timeout"]; len(vv) > 0 {
		d, ok := upstream.ParseGRPCTimeout(vv[0])
		if !ok || len(vv) > 1 {
			return x.gen.badGRPCTimeout
		}
		if d == 0 {
			// The call's deadline has passed: the upstream could only
			// answer DEADLINE_EXCEEDED too.
			return x.gen.grpcDeadlinePassed
		}
	}
	return nil
}

// grpcRefusal is the answer of a route of protocol http1 to gRPC
// requests: UNIMPLEMENTED, naming the route and what it needs. Its JSON
// form (501, for metrics and logs) is never sent.
func grpcRefusal(routeID string, p config.Protocol) *answer.Answer {
	if p.HTTP2() {
		return nil
	}
	return answer.NewAnswer(http.StatusNotImplemented, codeGRPCUnsupported,
		"route "+routeID+" proxies over HTTP/1.1 and cannot carry gRPC: it needs upstream.protocol h2c or h2",
	).WithGRPC(answer.GRPCUnimplemented)
}

// codeGRPCUnsupported is the code of grpcRefusal's answer, in logs.
const codeGRPCUnsupported = "grpc_unsupported"

// grpcStatusOf is the grpc-status of the answer w carries, as the
// access log reports it: the gateway's own, the upstream's trailer (or
// its trailers-only head); "" when there is none.
func grpcStatusOf(h http.Header) string {
	if v := h["Grpc-Status"]; len(v) > 0 {
		return v[0]
	}
	if v := h[http.TrailerPrefix+"Grpc-Status"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// grpcCodeNames name the gRPC status codes as gateway_grpc_responses_total
// labels them; grpcOther is any other value, or none.
var grpcCodeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
	"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

const grpcOther = len(grpcCodeNames)

// grpcCodeIndex is the index in grpcCodeNames of a grpc-status value, or
// grpcOther.
func grpcCodeIndex(v string) int {
	if len(v) == 0 || len(v) > 2 {
		return grpcOther
	}
	n := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return grpcOther
		}
		n = n*10 + int(c-'0')
	}
	if n >= len(grpcCodeNames) || len(v) == 2 && v[0] == '0' {
		return grpcOther
	}
	return n
}
