// Package cli is what every floodgate command shares: its exit codes, and
// its flags' parsing and usage, so that each says -h, a bad flag and a
// wrong argument alike.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Exit codes, the same for every command.
const (
	ExitOK      = 0 // success
	ExitFailure = 1 // runtime or validation failure
	ExitUsage   = 2 // bad usage: unknown command, bad flag, wrong arguments
)

// NewFlagSet returns the flag set of a command. synopsis follows
// "floodgate NAME" in the usage line ("" for a command without arguments);
// description is the paragraph below it.
func NewFlagSet(name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		line := "floodgate " + name
		if synopsis != "" {
			line += " " + synopsis
		}
		fmt.Fprintf(w, "Usage: %s\n\n%s\n", line, description)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// ParseFlags parses args into fs. It reports ok when the command should go
// on; otherwise the command returns code: ExitOK after -h, which prints the
// usage on stdout, or ExitUsage after a bad flag, reported on stderr.
func ParseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	// The flag package prints its errors and the usage itself, both to one
	// writer; silence it so help goes to stdout and errors to stderr.
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return ExitOK, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return ExitOK, false
	default:
		return UsageError(fs, stderr, "%v", err), false
	}
}

// UsageError reports a usage mistake in the command of fs on stderr and
// returns ExitUsage.
func UsageError(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "floodgate %s: %s\nRun 'floodgate %s -h' for usage.\n", fs.Name(), fmt.Sprintf(format, args...), fs.Name())
	return ExitUsage
}

// SetFlags returns the names of the flags given on the command line.
func SetFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}
