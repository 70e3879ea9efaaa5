package main

import (
	"strings"
	"testing"
)

func TestDemo(t *testing.T) {
	out, errOut, code := floodgate(t, "demo", "--duration", "5s", "--rate", "1000")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"t    sent       2xx", "CLOSED", "the coupon API saw at most", "tokens not accepted: 0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 9 && f[0] >= "0" && f[0] <= "9" {
			lines++
		}
	}
	if lines < 5 {
		t.Errorf("%d per-second lines, want 5:\n%s", lines, out)
	}
	if _, _, code := floodgate(t, "demo", "--duration", "1s"); code != 2 {
		t.Errorf("--duration 1s: exit %d, want 2", code)
	}
	// A demo of a Redis it cannot reach says so, rather than run on the
	// memory store it would fall back to.
	addr := freeAddr(t)
	if _, errOut, code := floodgate(t, "demo", "--redis", addr, "--duration", "5s"); code != 1 || !strings.Contains(errOut, "redis at "+addr+" does not answer") {
		t.Errorf("--redis %s with nothing there: exit %d, stderr %q; want 1 and the reason", addr, code, errOut)
	}
}
