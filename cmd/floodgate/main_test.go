package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// The tests run the CLI as a user does: TestMain builds the floodgate binary
// once, with the link-time version a release build sets, and each test
// executes it.
const (
	testVersion = "v0.0.0-test"
	testCommit  = "0123abc"
)

var floodgateBin string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "floodgate-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	floodgateBin = filepath.Join(dir, "floodgate")
	if runtime.GOOS == "windows" {
		floodgateBin += ".exe"
	}
	// go test puts its own toolchain first on PATH, so this "go" is the one
	// running the tests.
	build := exec.Command("go", "build",
		"-ldflags", fmt.Sprintf("-X main.version=%s -X main.commit=%s", testVersion, testCommit),
		"-o", floodgateBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building floodgate: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// floodgate runs the built binary with args and returns what it printed and
// its exit code.
func floodgate(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var outBuf, errBuf bytes.Buffer
	cmd := exec.Command(floodgateBin, args...)
	cmd.Stdout, cmd.Stderr = &outBuf, &errBuf
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("running floodgate %s: %v", strings.Join(args, " "), err)
	}
	return outBuf.String(), errBuf.String(), code
}

func TestVersion(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := floodgate(t, "version")
	if code != exitOK {
		t.Fatalf("floodgate version: exit %d, want %d; stderr:\n%s", code, exitOK, stderr)
	}
	want := regexp.MustCompile(`^floodgate ` + regexp.QuoteMeta(testVersion) +
		` \(commit ` + regexp.QuoteMeta(testCommit) + `, go[0-9][^)]*\)\n$`)
	if !want.MatchString(stdout) {
		t.Errorf("floodgate version printed %q, want a match for %s", stdout, want)
	}
	if stderr != "" {
		t.Errorf("floodgate version wrote to stderr: %q", stderr)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help", "help"} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := floodgate(t, arg)
			if code != exitOK {
				t.Fatalf("floodgate %s: exit %d, want %d; stderr:\n%s", arg, code, exitOK, stderr)
			}
			if !strings.Contains(stdout, "Usage:") {
				t.Errorf("floodgate %s: no usage on stdout:\n%s", arg, stdout)
			}
			for _, c := range commands {
				if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(c.name) + `\s+` + regexp.QuoteMeta(c.summary) + `$`).MatchString(stdout) {
					t.Errorf("floodgate %s: command %q and its summary not listed:\n%s", arg, c.name, stdout)
				}
			}
		})
	}
}

func TestNoArguments(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := floodgate(t)
	if code != exitUsage {
		t.Errorf("floodgate: exit %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr, "Usage:") {
		t.Errorf("floodgate: no usage on stderr:\n%s", stderr)
	}
	if stdout != "" {
		t.Errorf("floodgate: wrote to stdout: %q", stdout)
	}
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"bogus"}, {"help", "bogus"}} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := floodgate(t, args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if want := `floodgate: unknown command "bogus"`; !strings.Contains(stderr, want) {
				t.Errorf("stderr %q does not contain %q", stderr, want)
			}
			if stdout != "" {
				t.Errorf("wrote to stdout: %q", stdout)
			}
		})
	}
}

func TestVersionUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version", "-h"}, {"version", "--help"}, {"help", "version"}} {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := floodgate(t, args...)
			if code != exitOK {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitOK, stderr)
			}
			if !strings.HasPrefix(stdout, "Usage: floodgate version\n") {
				t.Errorf("stdout does not start with the usage line:\n%s", stdout)
			}
			if stderr != "" {
				t.Errorf("wrote to stderr: %q", stderr)
			}
		})
	}
}

func TestVersionBadUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"version", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := floodgate(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "floodgate version -h") {
				t.Errorf("stderr %q does not contain %q and a pointer to 'floodgate version -h'", stderr, tt.want)
			}
			if stdout != "" {
				t.Errorf("wrote to stdout: %q", stdout)
			}
		})
	}
}

func TestBuildVersion(t *testing.T) {
	t.Parallel()
	module := func(version string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/floodgate-gw/floodgate", Version: version}, Settings: settings}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "9f86d081884c"}
	clean := debug.BuildSetting{Key: "vcs.modified", Value: "false"}
	dirty := debug.BuildSetting{Key: "vcs.modified", Value: "true"}
	tests := []struct {
		name                    string
		linkVersion, linkCommit string
		info                    *debug.BuildInfo
		wantVersion, wantCommit string
	}{
		{"link-time values win", "v1.2.0", "3f2a9c1", module("v1.1.0", rev), "v1.2.0", "3f2a9c1"},
		{"go install of a tagged version", "", "", module("v1.1.0"), "v1.1.0", "unknown"},
		{"build from a clean checkout", "", "", module("(devel)", rev, clean), "dev", "9f86d081884c"},
		{"build from a modified checkout", "", "", module("(devel)", rev, dirty), "dev", "9f86d081884c-dirty"},
		{"no VCS information", "", "", module("(devel)"), "dev", "unknown"},
		{"no build information", "", "", nil, "dev", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, c := buildVersion(tt.linkVersion, tt.linkCommit, tt.info)
			if v != tt.wantVersion || c != tt.wantCommit {
				t.Errorf("buildVersion = %q, %q; want %q, %q", v, c, tt.wantVersion, tt.wantCommit)
			}
		})
	}
}
