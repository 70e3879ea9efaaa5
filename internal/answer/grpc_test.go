package answer

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestIsGRPC(t *testing.T) {
	for _, tc := range []struct {
		ct    string
		proto int
		want  bool
	}{
		{"application/grpc", 2, true},
		{"application/grpc+proto", 2, true},
		{"application/grpc+json", 2, true},
		{"application/grpc;charset=utf-8", 2, true},
		{"Application/GRPC", 2, true},
		{"application/grpc", 1, false}, // gRPC is HTTP/2
		{"application/grpc-web", 2, false},
		{"application/grpc-web+proto", 2, false},
		{"application/grpcx", 2, false},
		{"application/json", 2, false},
		{"", 2, false},
	} {
		r := httptest.NewRequest("POST", "/s/M", nil)
		r.ProtoMajor = tc.proto
		if tc.ct != "" {
			r.Header.Set("Content-Type", tc.ct)
		}
		if got := IsGRPC(r); got != tc.want {
			t.Errorf("IsGRPC(%q over HTTP/%d) = %v", tc.ct, tc.proto, got)
		}
	}
}

func TestEncodeGRPCMessage(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "",
		"plain text, (ok)~":   "plain text, (ok)~",
		"100%":                "100%25",
		"ünready":             "%C3%BCnready",
		"line\nbreak\x7f\x00": "line%0Abreak%7F%00",
	} {
		if got := EncodeGRPCMessage(in); got != want {
			t.Errorf("EncodeGRPCMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

// The gRPC status of each of the gateway's own answers, by its HTTP
// status, unless the situation sets it.
func TestGRPCCodes(t *testing.T) {
	for status, want := range map[int]GRPCCode{
		400: GRPCInvalidArgument,
		401: GRPCUnauthenticated,
		403: GRPCPermissionDenied,
		404: GRPCUnimplemented,
		408: GRPCDeadlineExceeded,
		413: GRPCResourceExhausted,
		429: GRPCResourceExhausted,
		431: GRPCResourceExhausted,
		500: GRPCInternal,
		501: GRPCUnimplemented,
		502: GRPCUnavailable,
		503: GRPCUnavailable,
		504: GRPCDeadlineExceeded,
		418: GRPCUnknown,
		202: GRPCUnknown,
	} {
		if got := NewAnswer(status, "c", "m").GRPCStatus(); got != want {
			t.Errorf("%d: %d, want %d", status, got, want)
		}
	}
	if got := NewAnswer(403, "c", "m").WithGRPC(GRPCResourceExhausted).GRPCStatus(); got != GRPCResourceExhausted {
		t.Errorf("WithGRPC: %d", got)
	}
}

// WriteGRPC sends a trailers-only gRPC status: 200, no body, the fields
// already set kept as metadata.
func TestWriteGRPC(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Retry-After", "3")
	NewAnswer(429, "slow_down", "Slow down: 100%").WithGRPC(GRPCResourceExhausted).WriteGRPC(w)
	if w.Code != http.StatusOK || w.Body.Len() != 0 {
		t.Fatalf("%d, %d bytes", w.Code, w.Body.Len())
	}
	for k, want := range map[string]string{
		"Content-Type": "application/grpc",
		"Grpc-Status":  "8",
		"Grpc-Message": "Slow down: 100%25",
		"Retry-After":  "3",
	} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	w = httptest.NewRecorder()
	NewAnswer(404, "route_not_found", "").WriteGRPC(w)
	if _, ok := w.Header()["Grpc-Message"]; ok || w.Header().Get("Grpc-Status") != "12" {
		t.Errorf("no message: %v", w.Header())
	}
}
