//go:build unix

package h1

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection can still carry a request: the
// server has neither closed it nor sent anything on it (an unasked answer,
// such as a 408 before a close, leaves it out of step). It peeks without
// waiting, so the kernel answers at once from what it already holds.
func alive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	live := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		live = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for readiness: the answer is the peek's
	})
	return err == nil && live
}
