package filewatch

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fires counts the calls of a watch, and waits for them.
type fires chan struct{}

func (f fires) fire() { f <- struct{}{} }

func (f fires) want(t *testing.T, what string) {
	t.Helper()
	select {
	case <-f:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no call", what)
	}
}

// none waits a few debounces and fails on a call.
func (f fires) none(t *testing.T, what string) {
	t.Helper()
	select {
	case <-f:
		t.Fatalf("%s: called", what)
	case <-time.After(5 * Debounce):
	}
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A file written, or replaced by a rename over it, is a change; a chmod,
// or another file of the directory, is none.
func TestFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tls.crt")
	write(t, path, "one")
	f := make(fires, 10)
	stop, err := Files([]string{path, ""}, f.fire, func(dir string, err error) { t.Errorf("%s: %v", dir, err) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	write(t, path, "two")
	f.want(t, "a write")
	tmp := filepath.Join(dir, ".tls.crt.tmp")
	write(t, tmp, "three")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	f.want(t, "a rename over the file")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "other"), "x")
	f.none(t, "a chmod, and another file")
}

// Kubernetes mounts a secret as links through "..data", which it swaps:
// a swap is a change of every file it mounts.
func TestDataSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, v, "tls.key"), v)
	}
	if err := os.Symlink("v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tls.key")
	if err := os.Symlink(filepath.Join("..data", "tls.key"), path); err != nil {
		t.Fatal(err)
	}
	f := make(fires, 10)
	stop, err := Files([]string{path}, f.fire, func(dir string, err error) { t.Errorf("%s: %v", dir, err) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := os.Symlink("v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	f.want(t, "a swap of ..data")
	if b, err := os.ReadFile(path); err != nil || string(b) != "v2" {
		t.Fatalf("after the swap the file reads %q, %v", b, err)
	}
}

// A directory that does not exist cannot be watched: the error says so,
// and nothing is left running.
func TestMissingDir(t *testing.T) {
	t.Parallel()
	if _, err := Files([]string{filepath.Join(t.TempDir(), "nope", "tls.crt")}, func() {}, nil); err == nil {
		t.Fatal("watching a directory that does not exist: no error")
	}
}
