package main

import (
	"fmt"
	"io"

	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/ctl"
)

// Exit codes, the same for every command (package cli).
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
)

// A command is one floodgate subcommand. run receives the arguments after
// the command's name and returns the process exit code.
type command struct {
	name    string
	summary string // one line for the command list in "floodgate -h"
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order "floodgate -h" shows them.
// Each lives in its own file; adding one is adding a line here.
var commands = []command{
	{"serve", "run the gateway and its admin listener", runServe},
	{"check", "validate a configuration file offline", runCheck},
	{"demo", "rehearse a flash sale in one process: mock API, gateway and surge", runDemo},
	{"upstream", "run a mock downstream that slows down and fails on cue", runUpstream},
	{"load", "offer open-loop load to a URL and measure the answers", runLoad},
	{"ctl", "operate a running gateway or fleet through its admin listener: overrides, reset, breaker, breakers, fleet, status", ctl.Run},
	{"events", "replay recorded requests to a route's upstream (events replay)", runEvents},
	{"token", "sign a JWT with a private key, or make a key pair, for trying jwt: key parts", runToken},
	{"version", "print the version, the commit and the Go version", runVersion},
}

// run is the whole command line: main only exits with what it returns, so
// tests can drive the CLI without a process when they need to.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		// "floodgate help CMD" is "floodgate CMD -h".
		if name == "help" && len(rest) > 0 {
			if c, ok := lookup(rest[0]); ok {
				return c.run([]string{"-h"}, stdout, stderr)
			}
			return unknownCommand(rest[0], stderr)
		}
		printUsage(stdout)
		return exitOK
	}
	c, ok := lookup(name)
	if !ok {
		return unknownCommand(name, stderr)
	}
	return c.run(rest, stdout, stderr)
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func unknownCommand(name string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "floodgate: unknown command %q\nRun 'floodgate -h' for the list of commands.\n", name)
	return exitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "floodgate is an API gateway and distributed rate-limit service.\n\n")
	fmt.Fprint(w, "Usage:\n\n\tfloodgate <command> [flags] [arguments]\n\nCommands:\n\n")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'floodgate <command> -h' for the flags of a command.\n")
}
