//go:build unix

package testnet

import (
	"fmt"
	"syscall"
	"testing"
)

// RefusedURL is an http:// URL on 127.0.0.1 that refuses connections for
// the whole test: a socket bound to the port, never listening, holds it,
// so that no server a parallel test starts can take the port over (as it
// can the port of a server closed at once), and a connection to it is
// reset.
func RefusedURL(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
