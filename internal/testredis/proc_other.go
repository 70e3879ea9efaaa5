//go:build !linux

package testredis

import "os/exec"

// setProcAttr has no portable way to tie the server's lifetime to the test
// binary outside Linux; tb.Cleanup is the only guard there.
func setProcAttr(*exec.Cmd) {}
