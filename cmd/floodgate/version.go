package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/floodgate-gw/floodgate/internal/cli"
)

// Set at link time by release builds (see the Makefile's build target):
//
//	go build -ldflags "-X main.version=v1.2.0 -X main.commit=3f2a9c1" ./cmd/floodgate
//
// When empty, runVersion falls back to what the Go toolchain recorded in the
// binary, which covers "go install ...@v1.2.0" and builds from a checkout.
var (
	version string
	commit  string
)

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("version", "", "Print the version, the commit and the Go version of this floodgate binary.")
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	info, _ := debug.ReadBuildInfo()
	v, c := buildVersion(version, commit, info)
	fmt.Fprintf(stdout, "floodgate %s (commit %s, %s)\n", v, c, runtime.Version())
	return exitOK
}

// buildVersion returns the version and commit to report: the link-time
// values when set, else the main module's version and the VCS revision from
// info (which may be nil), else "dev" and "unknown".
func buildVersion(linkVersion, linkCommit string, info *debug.BuildInfo) (v, c string) {
	v, c = linkVersion, linkCommit
	if info != nil {
		// "(devel)" is what the toolchain records for a build from a
		// checkout rather than from a module version; it says no more than
		// "dev" does.
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		if c == "" {
			c = vcsRevision(info)
		}
	}
	if v == "" {
		v = "dev"
	}
	if c == "" {
		c = "unknown"
	}
	return v, c
}

// vcsRevision returns the commit the binary was built from, with "-dirty"
// appended (as git describe --dirty does) when the tree had local changes,
// or "" when the build recorded no revision (go build -buildvcs=false, or a
// build outside a repository).
func vcsRevision(info *debug.BuildInfo) string {
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}
