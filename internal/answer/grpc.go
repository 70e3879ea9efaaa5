package answer

import (
	"net/http"
	"strconv"
	"strings"
)

// GRPCCode is a gRPC status code, numbered as google.golang.org/grpc/codes
// numbers them (that package would bring grpc's logger and its settings
// into every importer of this one, the HTTP middleware's users among them).
type GRPCCode uint32

// The gRPC status codes the gateway answers with.
const (
	GRPCCanceled           GRPCCode = 1
	GRPCUnknown            GRPCCode = 2
	GRPCInvalidArgument    GRPCCode = 3
	GRPCDeadlineExceeded   GRPCCode = 4
	GRPCPermissionDenied   GRPCCode = 7
	GRPCResourceExhausted  GRPCCode = 8
	GRPCFailedPrecondition GRPCCode = 9
	GRPCAborted            GRPCCode = 10
	GRPCUnimplemented      GRPCCode = 12
	GRPCInternal           GRPCCode = 13
	GRPCUnavailable        GRPCCode = 14
	GRPCUnauthenticated    GRPCCode = 16
)

// IsGRPC reports a gRPC request: HTTP/2 (gRPC has no other transport, and
// the check costs an HTTP/1 request one comparison) with a content type of
// application/grpc, alone or with a subtype (application/grpc+proto) or
// parameters. gRPC-Web (application/grpc-web) is not gRPC: its status
// travels in the body.
func IsGRPC(r *http.Request) bool {
	if r.ProtoMajor < 2 {
		return false
	}
	ct := r.Header["Content-Type"]
	return len(ct) > 0 && IsGRPCType(ct[0])
}

// IsGRPCType reports whether a content type is gRPC's.
func IsGRPCType(ct string) bool {
	const base = "application/grpc"
	if len(ct) < len(base) || !strings.EqualFold(ct[:len(base)], base) {
		return false
	}
	return len(ct) == len(base) || ct[len(base)] == '+' || ct[len(base)] == ';'
}

// grpcCodes is the gRPC status of an answer by its HTTP status, when the
// situation does not decide it (a limit's rejection is always
// RESOURCE_EXHAUSTED, whatever its reject.status; see WithGRPC). It
// follows gRPC's own mapping of HTTP statuses
// (doc/http-grpc-status-mapping.md) where the gateway's answer means the
// same, and departs from it where the gateway knows more: its 400 is a
// malformed request, not a broken proxy, so INVALID_ARGUMENT; its 429 and
// 413 a quota or size the client went over, so RESOURCE_EXHAUSTED.
var grpcCodes = map[int]GRPCCode{
	http.StatusBadRequest:                  GRPCInvalidArgument,
	http.StatusUnauthorized:                GRPCUnauthenticated,
	http.StatusForbidden:                   GRPCPermissionDenied,
	http.StatusNotFound:                    GRPCUnimplemented,
	http.StatusRequestTimeout:              GRPCDeadlineExceeded,
	http.StatusConflict:                    GRPCAborted,
	http.StatusPreconditionFailed:          GRPCFailedPrecondition,
	http.StatusRequestEntityTooLarge:       GRPCResourceExhausted,
	http.StatusTooManyRequests:             GRPCResourceExhausted,
	http.StatusRequestHeaderFieldsTooLarge: GRPCResourceExhausted,
	499:                                    GRPCCanceled,
	http.StatusInternalServerError:         GRPCInternal,
	http.StatusNotImplemented:              GRPCUnimplemented,
	http.StatusBadGateway:                  GRPCUnavailable,
	http.StatusServiceUnavailable:          GRPCUnavailable,
	http.StatusGatewayTimeout:              GRPCDeadlineExceeded,
}

// GRPCCodeOf is the gRPC status of an answer with HTTP status status, as
// an answer without WithGRPC gets: UNKNOWN for a status the table lacks.
func GRPCCodeOf(status int) GRPCCode {
	if c, ok := grpcCodes[status]; ok {
		return c
	}
	return GRPCUnknown
}

// WithGRPC sets the gRPC status a answers a gRPC request with, in place
// of the one its HTTP status maps to, and returns a. It is called before
// a is used.
func (a *Answer) WithGRPC(c GRPCCode) *Answer {
	a.grpcCode, a.grpcStatus = c, []string{strconv.Itoa(int(c))}
	return a
}

// GRPCStatus is the gRPC status a answers a gRPC request with.
func (a *Answer) GRPCStatus() GRPCCode { return a.grpcCode }

// WriteGRPC sends the answer to a gRPC request, as gRPC reads a status:
// HTTP 200 with grpc-status and grpc-message in a trailers-only response
// (a HEADERS frame that ends the stream, since nothing is written after
// it). The fields already in the header map (the request id, the
// rate-limit fields, Retry-After) go with it, as metadata the client can
// read. The request id the JSON answer carries is in its own field.
func (a *Answer) WriteGRPC(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = grpcType
	h["Grpc-Status"] = a.grpcStatus
	if a.grpcMessage != nil {
		h["Grpc-Message"] = a.grpcMessage
	}
	w.WriteHeader(http.StatusOK)
}

var grpcType = []string{"application/grpc"}

// EncodeGRPCMessage percent-encodes a grpc-message value as the gRPC
// protocol asks: every byte outside printable ASCII, and '%', as %XX.
func EncodeGRPCMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(msg) + 8)
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}
