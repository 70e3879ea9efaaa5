//go:build unix

package h1

import (
	"net"
	"syscall"
)

// peeker tells whether an idle connection can still carry a request: the
// server has neither closed it nor sent anything on it (an unasked answer,
// such as a 408 before a close, leaves it out of step).
type peeker struct {
	rc   syscall.RawConn
	recv func(fd uintptr) // p.peek, bound once: a closure made per call would allocate
	live bool
}

func (p *peeker) init(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.rc, p.recv = rc, p.peek
}

// alive peeks without waiting, so the kernel answers at once from what it
// already holds. It goes through Control, not Read, which would first fail
// on a read deadline left from the connection's last answer.
func (p *peeker) alive() bool {
	if p.rc == nil {
		return true
	}
	p.live = false
	return p.rc.Control(p.recv) == nil && p.live
}

func (p *peeker) peek(fd uintptr) {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	p.live = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
}
