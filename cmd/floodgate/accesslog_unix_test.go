//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// withAccessLog is baseConfig writing its access log to target.
func withAccessLog(target string) string {
	return strings.Replace(baseConfig, "  shutdown_timeout: 5s\n", "  shutdown_timeout: 5s\n  access_log: \""+target+"\"\n", 1)
}

// An access log that is a named pipe, or the config file itself, is
// refused by check, by serve at start and by a reload, each at once: a
// pipe without a reader would hold serve before it listens, and a reload
// (and every reload after it) for ever.
func TestServeAccessLogNotAFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	fifo := filepath.Join(f.dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	wantPipe := f.file + `:5: server.access_log: "` + fifo + `" is a named pipe (FIFO); write the path of a regular file`
	wantSelf := f.file + `:5: server.access_log: "` + f.file + `" is this config file; write the path of a file of its own`

	f.write(withAccessLog(fifo))
	if _, stderr, code := floodgate(t, "check", "-c", f.file); code != 1 || !strings.Contains(stderr, wantPipe) {
		t.Errorf("check: %d %q, want 1 and %q", code, stderr, wantPipe)
	}
	p := startProc(t, "serve", "-c", f.file, "--watch=false")
	if code := p.wait(); code != 1 || !strings.Contains(p.stderr.String(), wantPipe) {
		t.Errorf("serve: %d %q, want 1 and %q", code, p.stderr, wantPipe)
	}

	f.write(withAccessLog(f.file))
	if _, stderr, code := floodgate(t, "check", "-c", f.file); code != 1 || !strings.Contains(stderr, wantSelf) {
		t.Errorf("check: %d %q, want 1 and %q", code, stderr, wantSelf)
	}

	f.write(baseConfig)
	p = f.serve("--watch=false")
	for _, tt := range []struct{ target, want string }{{fifo, "is a named pipe (FIFO)"}, {f.file, "is this config file"}} {
		f.write(withAccessLog(tt.target))
		before, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		if r := p.admin("POST", "/admin/reload"); r.code != 400 || !strings.Contains(r.body, tt.want) {
			t.Errorf("POST /admin/reload to %s: %d %s, want 400 and %q", tt.target, r.code, r.body, tt.want)
		}
		if r := p.get("/api/x", "X-User-Id", tt.target); r.code != 200 {
			t.Errorf("GET /api/x after the refused reload: %d %s", r.code, r.body)
		}
		if after, _ := os.ReadFile(f.file); string(after) != string(before) {
			t.Errorf("the config file changed:\n%s", after)
		}
	}
	// Nothing waits behind the refused reloads.
	f.write(withRoute("added"))
	if r := p.admin("POST", "/admin/reload"); r.code != 200 {
		t.Errorf("POST /admin/reload with a good file: %d %s", r.code, r.body)
	}
}

// "stdout" is serve's standard output, not a file named ./stdout.
func TestServeAccessLogStdout(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("stdout"); err == nil {
		t.Fatal("./stdout exists before the test")
	}
	t.Cleanup(func() { os.Remove("stdout") })
	f := newFixture(t, nil)
	f.write(withAccessLog("stdout"))
	p := f.serve("--watch=false")
	if r := p.get("/api/x", "X-User-Id", "u1"); r.code != 200 {
		t.Fatalf("GET /api/x: %d %s", r.code, r.body)
	}
	p.waitFor("the access line on stdout", func() bool {
		return strings.Contains(p.stdout.String(), `"msg":"access"`) && strings.Contains(p.stdout.String(), `"path":"/api/x"`)
	})
	if strings.Contains(p.stderr.String(), `"msg":"access"`) {
		t.Errorf("access lines on stderr:\n%s", p.stderr)
	}
	if _, err := os.Stat("stdout"); err == nil {
		t.Error("serve created a file named stdout")
	}
}
