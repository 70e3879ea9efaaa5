//go:build unix

package gateway

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A path that becomes a named pipe after check passed it (or was one all
// along, where check did not look) is refused at once by New, by a reload
// and by a reload of an unchanged file: opening a pipe for writing would
// wait for a reader, and every reload after it would wait too.
func TestAccessLogNamedPipe(t *testing.T) {
	t.Parallel()
	up := newBackend(t, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "access.log")
	fifo := filepath.Join(dir, "fifo")
	yaml := func(file string) string {
		return `
admin: {listen: ""}
server:
  access_log: ` + file + `
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["` + up.URL + `"]}
`
	}
	// Parsed while nothing is at the path: check has nothing to see.
	fifoCfg := mustParseT(t, yaml(fifo))
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// returns runs f and fails the test if it does not return: a hang is
	// the bug, so the deadline is generous and no measure of speed.
	returns := func(what string, f func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waits on the named pipe after 10s", what)
			return nil
		}
	}
	const want = `test.yaml:4: server.access_log: "` + "%s" + `" is a named pipe (FIFO); write the path of a regular file`
	wantErr := func(what string, err error) {
		t.Helper()
		if w := strings.Replace(want, "%s", fifo, 1); err == nil || err.Error() != w {
			t.Errorf("%s: %v, want %s", what, err, w)
		}
	}

	err := returns("New", func() error {
		gw, err := New(fifoCfg, Options{Logger: discardLogger()})
		if err == nil {
			gw.Close()
		}
		return err
	})
	wantErr("New without a reader", err)

	h := newHarness(t, yaml(file), up)
	wantErr("Reload without a reader", returns("Reload", func() error { return h.gw.Reload(fifoCfg) }))
	// With a reader, the open itself would not wait, but writes would
	// once the pipe is full: refused all the same.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wantErr("Reload with a reader", returns("Reload", func() error { return h.gw.Reload(fifoCfg) }))

	// The running file replaced by a pipe, then SIGHUP: the log goes on
	// in the file it was in.
	resp := h.do("GET", "/api/1", nil, nil)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	readAccess(t, file, 1)
	if err := os.Rename(file, file+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(file, 0o600); err != nil {
		t.Fatal(err)
	}
	returns("ReloadUnchanged", func() error { h.gw.ReloadUnchanged(); return nil })
	resp = h.do("GET", "/api/2", nil, nil)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if l := readAccess(t, file+".1", 2); l[1].Path != "/api/2" {
		t.Errorf("after the refused reopen: %+v", l[1])
	}
}

// A character device is refused as a pipe is: the process's own streams
// are written as stdout and stderr.
func TestAccessLogDevice(t *testing.T) {
	t.Parallel()
	cfg := mustParseT(t, `
admin: {listen: ""}
server: {access_log: stdout}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UP}}"]}
`)
	cfg.Server.AccessLog = "/dev/null" // as if check had not looked
	_, err := New(cfg, Options{Logger: discardLogger()})
	if want := `server.access_log: "/dev/null" is a character device`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("New: %v, want %s", err, want)
	}
}
