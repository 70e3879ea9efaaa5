package main

import (
	"strings"
	"testing"
)

func TestDemoUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--duration", "1s"},
		{"--rate", "100"},
		{"--redis", "nonsense"},
		{"extra"},
	} {
		if _, errOut, code := floodgate(t, append([]string{"demo"}, args...)...); code != exitUsage {
			t.Errorf("demo %v: exit %d, want %d; stderr %q", args, code, exitUsage, errOut)
		}
	}
	out, _, code := floodgate(t, "demo", "-h")
	if code != exitOK || !strings.Contains(out, "--hold") {
		t.Errorf("demo -h: exit %d\n%s", code, out)
	}
	// A demo of a Redis it cannot reach says so, rather than run on what
	// on_error would decide.
	addr := freeAddr(t)
	if _, errOut, code := floodgate(t, "demo", "--redis", addr); code != exitFailure || !strings.Contains(errOut, "redis at "+addr+" does not answer") {
		t.Errorf("--redis %s with nothing there: exit %d, stderr %q; want 1 and the reason", addr, code, errOut)
	}
}
