package main

import (
	"net"
	"strings"
	"syscall"
	"testing"
)

// startMock starts "floodgate upstream" on a free port with args and waits
// until it answers; it returns the process and the base URL.
func startMock(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	addr := freeAddr(t)
	p := startProc(t, append([]string{"upstream", "--listen", addr}, args...)...)
	base := "http://" + addr
	p.waitFor("the mock upstream to answer", func() bool {
		resp, err := client.Get(base + "/stats")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p, base
}

// mockStats reads the mock's GET /stats.
func mockStats(t *testing.T, base string) map[string]any {
	t.Helper()
	return request(t, "GET", base+"/stats").json(t)
}

func TestUpstreamCommand(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	p, base := startMock(t, "--latency", "5ms", "--status", "201", "--body", `{"coupon":"ok"}`, "-v")
	for range 3 {
		r := request(t, "POST", base+"/api/activities/lucky-meal/receive")
		if r.code != 201 || r.body != `{"coupon":"ok"}` || r.header.Get("X-Upstream-Reason") != "ok" {
			t.Errorf("answer %d %q %v", r.code, r.body, r.header)
		}
	}
	s := mockStats(t, base)
	if s["requests"] != 3.0 || s["status"].(map[string]any)["201"] != 3.0 || s["outage"] != false {
		t.Errorf("/stats = %v", s)
	}
	if lat := s["latency_ms"].(map[string]any); lat["p50"] != 5.0 {
		t.Errorf("/stats latency_ms = %v, want p50 5", lat)
	}
	// -v logs a line a second.
	p.waitLog(`floodgate upstream: t=\d+s rate=\d+/s normal added p50=[0-9.]+ms p99=[0-9.]+ms answered `)
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != exitOK {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(p.stderr.String(), "stopped after 3 requests (201:3)") {
		t.Errorf("no closing line on stderr:\n%s", p.stderr)
	}
}

func TestUpstreamCommandOutage(t *testing.T) {
	t.Parallel()
	skipWithoutSignals(t)
	// An outage that starts at once and never ends, and a capacity the
	// test does not reach.
	p, base := startMock(t, "--fail-after", "1ns", "--capacity", "1000")
	r := request(t, "GET", base+"/")
	if r.code != 503 || r.header.Get("X-Upstream-Reason") != "outage" {
		t.Errorf("in the outage: %d %v", r.code, r.header)
	}
	if s := mockStats(t, base); s["outage"] != true || s["status"].(map[string]any)["503"] != 1.0 {
		t.Errorf("/stats in the outage = %v", s)
	}
	// Without -v the mock says nothing per second.
	p.signal(syscall.SIGINT)
	p.wait()
	if strings.Contains(p.stderr.String(), "t=") {
		t.Errorf("per-second lines without -v:\n%s", p.stderr)
	}
}

func TestUpstreamCommandUsage(t *testing.T) {
	t.Parallel()
	stdout, _, code := floodgate(t, "upstream", "-h")
	if code != exitOK || !strings.HasPrefix(stdout, "Usage: floodgate upstream") ||
		!strings.Contains(stdout, "-capacity N") || !strings.Contains(stdout, "GET /stats") {
		t.Errorf("upstream -h: exit %d, stdout:\n%s", code, stdout)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--latency", "fast"}, `invalid value "fast" for flag -latency`},
		{[]string{"--error-rate", "1.5"}, "--error-rate 1.5: must be between 0 and 1"},
		{[]string{"--capacity", "-1", "--status", "42"}, "--capacity -1: must not be negative (0 is no limit); --status 42"},
		{[]string{"--recover-after", "5s"}, "--recover-after needs fail-after"},
		{[]string{"--fail-after", "0s"}, "--fail-after 0s: must be positive"},
	}
	for _, tt := range tests {
		stdout, stderr, code := floodgate(t, append([]string{"upstream"}, tt.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "floodgate upstream -h") || stdout != "" {
			t.Errorf("floodgate upstream %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, stderr, exitUsage, tt.want)
		}
	}
}

func TestUpstreamCommandListenError(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, stderr, code := floodgate(t, "upstream", "--listen", busy.Addr().String())
	if code != exitFailure || !strings.Contains(stderr, "address already in use") {
		t.Errorf("exit %d, stderr %q; want 1 and address already in use", code, stderr)
	}
}
