package upstream

import "testing"

func TestGRPCHealthRequest(t *testing.T) {
	t.Parallel()
	// Field 1 (service), length-delimited: 0x0a, the length, the bytes.
	want := "\x00\x00\x00\x00\x05\x0a\x03abc"
	if got := string(grpcHealthRequest("abc")); got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := string(grpcHealthRequest("")); got != "\x00\x00\x00\x00\x00" {
		t.Errorf("service \"\": %q", got)
	}
}
