package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/rlsserver"
	"github.com/floodgate-gw/floodgate/rls"
)

// runCheck validates a config offline, through the same path serve and a
// reload take, so a config that passes check is one serve accepts.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("check", "[-c FILE]",
		"Validate a configuration file without starting anything. Print a one-line summary and exit 0,\n"+
			"or print every problem as FILE:LINE: message and exit 1. Warnings (a valid config that is\n"+
			"probably not what was meant) go to stderr as FILE:LINE: warning: message.")
	file := fs.String("c", "floodgate.yaml", "the configuration `FILE`")
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q; the config file is given with -c FILE", fs.Arg(0))
	}
	cfg, err := config.Load(*file)
	if err != nil {
		var errs config.Errors
		if !errors.As(err, &errs) {
			fmt.Fprintf(stderr, "%s: %v\n", *file, err)
			return exitFailure
		}
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
		}
		return exitFailure
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintln(stderr, w.Warning())
	}
	// serve would refuse a JWKS file that does not load; so does check.
	jwksWarnings, err := gateway.CheckJWKSFile(cfg)
	for _, w := range jwksWarnings {
		fmt.Fprintln(stderr, w.Warning())
	}
	if err != nil {
		for _, line := range errorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return exitFailure
	}
	var rules *rls.Rules
	if cfg.RLS.Listen != "" {
		// serve would refuse rules that do not load; so does check.
		if rules, err = rlsserver.LoadRules(cfg); err != nil {
			for _, line := range errorLines(err) {
				fmt.Fprintln(stderr, line)
			}
			return exitFailure
		}
	}
	fmt.Fprintln(stdout, cfg.Summary())
	switch x := cfg.RLS.XDS; {
	case x != nil:
		// The rules are the management server's; check does not dial it.
		over := ""
		switch {
		case x.TLS != nil && x.TLS.Cert != "":
			over = ", over TLS with a client certificate"
		case x.TLS != nil:
			over = ", over TLS"
		}
		fmt.Fprintf(stdout, "%s: rls: rules from xDS %s, node %s%s\n", *file, x.Addr, x.NodeID, over)
	case rules != nil:
		fmt.Fprintf(stdout, "%s: rls: %d domains %v\n", *file, len(rules.Domains()), rules.Domains())
	}
	return exitOK
}

// errorLines splits an error made by errors.Join into its lines.
func errorLines(err error) []string {
	return strings.Split(err.Error(), "\n")
}
