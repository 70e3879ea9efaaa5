package testredis

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the kernel kill the server if the test binary dies
// without running its cleanups (a panic, a -timeout, kill -9), so no orphaned
// redis-server keeps running after go test.
//
// Pdeathsig fires when the OS thread that started the child exits, not the
// process. The Go runtime only retires threads of goroutines that exit while
// locked with runtime.LockOSThread, so do not call Start from such a goroutine.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
