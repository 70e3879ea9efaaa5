//go:build unix

package config

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// server.access_log must end at a regular file (or none yet) that no
// other setting reads: check refuses what it can see of the rest.
func TestAccessLogFiles(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "self.yaml")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "access.log")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dir, "events.jsonl")
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, l := range []struct{ link, target string }{
		{"to-fifo", fifo}, {"to-regular", regular}, {"to-self", self}, {"to-nothing", filepath.Join(dir, "later.log")},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.link)); err != nil {
			t.Fatal(err)
		}
	}
	src := func(access, extra string) string {
		return "server: {access_log: \"" + access + "\"}\n" + extra + okRoute
	}
	for _, tt := range []struct {
		name, access, extra, want string // want "": accepted
	}{
		{"a named pipe", fifo, "", `server.access_log: "` + fifo + `" is a named pipe (FIFO); write the path of a regular file`},
		{"a link to a named pipe", filepath.Join(dir, "to-fifo"), "", "is a named pipe (FIFO)"},
		{"a directory written with /.", dir + "/.", "", "is a directory"},
		{"a socket", sock, "", "is a socket"},
		{"the config itself", self, "", `server.access_log: "` + self + `" is this config file; write the path of a file of its own`},
		{"the config, by another path", filepath.Join(dir, "sub", "..", "self.yaml"), "", "is this config file"},
		{"a link to the config", filepath.Join(dir, "to-self"), "", "is this config file"},
		{"the events file", events, "events: {sink: file, file: {path: " + events + "}}\n",
			`server.access_log: "` + events + `" is the file of events.file.path (line 2); write the path of a file of its own`},
		{"the events file of no sink", events, "events: {file: {path: " + events + "}}\n", ""},
		{"a regular file", regular, "", ""},
		{"a link to a regular file", filepath.Join(dir, "to-regular"), "", ""},
		{"a dangling link", filepath.Join(dir, "to-nothing"), "", ""},
		{"stdout", "stdout", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(self, []byte(src(tt.access, tt.extra)), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.name == "the config, by another path" {
				os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			}
			cfg, err := Load(self)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want == "":
				if cfg.Server.AccessLog != tt.access {
					t.Errorf("access_log %q, want %q", cfg.Server.AccessLog, tt.access)
				}
			case err == nil:
				t.Errorf("accepted, want %s", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Errorf("%v\nwant %s", err, tt.want)
			}
		})
	}
}
