package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/runner"
)

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("serve", "[-c FILE] [--listen ADDR] [--admin ADDR] [--watch=false]",
		"Run the gateway, and the admin listener the configuration names.\n\n"+
			"The configuration reloads on SIGHUP, on POST /admin/reload, and when the file changes;\n"+
			"a file that does not load is refused and the running configuration stays.\n"+
			"SIGINT or SIGTERM stops accepting, drains in-flight requests for up to\n"+
			"server.shutdown_timeout and exits 0; a second signal exits at once with 1.")
	file := fs.String("c", "floodgate.yaml", "the configuration `FILE`")
	watch := fs.Bool("watch", true, "reload when the configuration file changes")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof), for measuring floodgate itself")
	var flags config.Flags
	fs.Func("listen", "serve the gateway on `ADDR` in place of server.listen", func(addr string) error {
		flags.Listen = &config.Flag{Name: "--listen", Value: addr}
		return nil
	})
	fs.Func("admin", "serve the admin listener on `ADDR` in place of admin.listen (\"\": none); "+
		"beyond loopback it needs admin.token, admin.token_env or admin.allow_open", func(addr string) error {
		flags.AdminListen = &config.Flag{Name: "--admin", Value: addr}
		return nil
	})
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q; the config file is given with -c FILE", fs.Arg(0))
	}

	// The flags are applied on every load, the first and each reload, and
	// checked with the file: a reload cannot drop the token that an open
	// --admin address needs.
	cfg, sum, err := config.LoadWithFlags(*file, flags)
	if err != nil {
		// Before the gateway runs, the user is at a terminal or reading a
		// unit's output: print the problems as check does, not as JSON.
		for _, line := range admin.ErrorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return exitFailure
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate serve: --cpuprofile: %v\n", err)
			return exitFailure
		}
		defer stop()
	}
	info, _ := debug.ReadBuildInfo()
	v, c := buildVersion(version, commit, info)
	err = runner.Run(cfg, sum, runner.Options{
		File: *file, Flags: flags, Watch: *watch,
		Log:    slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Stdout: stdout, Stderr: stderr, Version: v, Commit: c,
	})
	if err != nil {
		return exitFailure
	}
	return exitOK
}

// startCPUProfile starts a CPU profile into the file path; stop ends it
// and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
