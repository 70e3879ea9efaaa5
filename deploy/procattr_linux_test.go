package deploy_test

import (
	"os/exec"
	"syscall"
)

// setProcAttr has the kernel kill the child if the test binary dies
// without running its cleanups (a panic, a -timeout), so that no
// floodgate or Prometheus outlives go test. Pdeathsig fires when the
// thread that started the child exits; the Go runtime retires threads
// only of goroutines locked with runtime.LockOSThread, which the test
// does not use.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
