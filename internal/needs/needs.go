// Package needs finds the programs the tests run beside floodgate
// (redis-server, promtool, chromium, curl…) and fails a test that needs
// one this machine lacks, saying which and how to get it: make check
// installs every one of them first (scripts/deps), so a test never skips
// for want of one. The one exception, a Docker daemon, is the image
// test's own to judge.
package needs

import (
	"os/exec"
	"strings"
	"testing"
)

// Program returns the path of the first of names found on PATH, or fails
// the test, naming the Debian package that brings it.
func Program(tb testing.TB, pkg string, names ...string) string {
	tb.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	tb.Fatalf("%s is not installed; make deps installs what the tests need (on Debian or Ubuntu: apt-get install %s)",
		strings.Join(names, " or "), pkg)
	return ""
}
