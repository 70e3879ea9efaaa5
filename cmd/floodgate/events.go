package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/floodgate-gw/floodgate/admin"
	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/replay"
	"github.com/floodgate-gw/floodgate/limit"
)

// runEvents dispatches "floodgate events SUBCOMMAND"; replay is the only
// one.
func runEvents(args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprint(w, "Usage: floodgate events <subcommand> [flags]\n\n"+
			"Work with the events the gateway recorded (see events in docs/configuration.md).\n\n"+
			"Subcommands:\n\n"+
			"\treplay  re-send a route's recorded breaker_rejected requests to its upstream\n\n"+
			"Run 'floodgate events replay -h' for its flags.\n")
	}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	case "replay":
		return runReplay(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "floodgate events: unknown subcommand %q\nRun 'floodgate events -h' for usage.\n", args[0])
	return exitUsage
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("events replay", "-c FILE --route ID [--rate 50/s] [--parallel 1] [--all] [--dry-run]",
		"Re-send the requests an open breaker turned away on a route, as recorded in the configured\n"+
			"events sink, to the route's upstream targets at a steady pace, each with the header\n"+
			"Idempotency-Key: <event id>. One request is in flight at a time unless --parallel allows\n"+
			"more; when the upstream answers too slowly for --rate, the run says so.\n\n"+
			"Replay keeps the route's limits (see events in docs/configuration.md):\n"+
			"  - collapse: each event is decided at the time it was recorded against the route's limits\n"+
			"    whose key tells clients apart (any part besides global and route; not concurrency),\n"+
			"    in a store of the replay's own: an event they would have refused is collapsed (with\n"+
			"    user: 1/10s, a user's retries in one 10 s window are one request). The route's\n"+
			"    admissions the sink holds (events.audit: all) count there too, at their recorded\n"+
			"    time, and are marked done, never sent: a user admitted live in a window gets no more;\n"+
			"  - live: each event left is decided now against every limit of the route, global ones\n"+
			"    included, in the configured store (Redis: the fleet's own, so a replayed request\n"+
			"    counts against the user's live quota). Refused by a client-keyed limit, it is limited;\n"+
			"    refused only by a global, route-keyed or concurrency limit, it waits for that limit's\n"+
			"    retry-after (at most the limit's window each time) and is decided again;\n"+
			"  - an event without the key a limit needs (on_missing: deny) is skipped, said so;\n"+
			"  - --all sends every event, as recorded: nothing collapsed, nothing decided, no\n"+
			"    admission read.\n\n"+
			"Each event is marked done in the sink once handled, in the order the events were recorded,\n"+
			"so a replay that stops (Ctrl-C, a crash) resumes where it was and sends again at most the\n"+
			"requests that were in flight (--parallel of them):\n"+
			"  - a 2xx answer counts as succeeded; any other answer, or an event that makes no valid\n"+
			"    request, as failed; all are marked done, so a replay always ends (the idempotency\n"+
			"    key makes a later manual retry safe);\n"+
			"  - an event whose body was truncated is skipped (it cannot be sent as it was), said so,\n"+
			"    and marked done; so is one the gateway cannot have recorded for the route (a path\n"+
			"    that is not clean or that the route does not take, a body over events.max_body, key\n"+
			"    values the recorded headers or token contradict); collapsed and limited events are\n"+
			"    marked done too; Forwarded and X-Forwarded-* are never replayed;\n"+
			"  - an upstream that does not answer at all, or a store that fails, stops the replay with\n"+
			"    exit 1, leaving that event (and any sent after it) for the next run.\n"+
			"  - an event the sink holds more than once (delivery to it is at least once) is handled\n"+
			"    once in a run, which says how many copies it skipped; a copy of an id with other\n"+
			"    contents than the first is failed, said so;\n"+
			"The last line is: succeeded N, failed N, skipped N, collapsed N, limited N, remaining N\n"+
			"(remaining: not handled). Ctrl-C lets the requests in flight finish, then stops.")
	file := fs.String("c", "floodgate.yaml", "the configuration `FILE`")
	routeID := fs.String("route", "", "the `ID` of the route whose events to replay (required)")
	rateFlag := fs.String("rate", "50/s", "the pace, as a `RATE` like 50/s or 600/min")
	parallel := fs.Int("parallel", 1, "the most requests `N` in flight at once")
	dryRun := fs.Bool("dry-run", false, "list what would be sent, collapsed or limited; send nothing, consume no quota, mark nothing done")
	all := fs.Bool("all", false, "send every event: collapse nothing, decide nothing against the limits")
	collapseKeys := fs.Int("collapse-keys", replay.DefaultCollapseKeys, "the most keys `N` the collapse step remembers at once; beyond, events are decided live only")
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if *routeID == "" {
		return cli.UsageError(fs, stderr, "--route is required")
	}
	rate, err := limit.ParseRate(*rateFlag)
	if err != nil || rate.Count <= 0 {
		if err == nil {
			err = fmt.Errorf("rate %q: the count must be positive", *rateFlag)
		}
		return cli.UsageError(fs, stderr, "--rate: %v", err)
	}
	if *parallel < 1 || *parallel > replay.MaxParallel {
		return cli.UsageError(fs, stderr, "--parallel: %d: want 1 to %d", *parallel, replay.MaxParallel)
	}
	if *collapseKeys < 1 || *collapseKeys > replay.MaxCollapseKeys {
		return cli.UsageError(fs, stderr, "--collapse-keys: %d: want 1 to %d", *collapseKeys, replay.MaxCollapseKeys)
	}

	cfg, _, err := config.LoadWithFlags(*file, config.Flags{})
	if err != nil {
		for _, line := range admin.ErrorLines(err) {
			fmt.Fprintln(stderr, line)
		}
		return exitFailure
	}
	// Ctrl-C stops after the request in flight: its answer is then known
	// and marked, so nothing is left half done.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = replay.Run(ctx, replay.Options{
		Config: cfg, Route: *routeID, Rate: rate, Parallel: *parallel,
		All: *all, DryRun: *dryRun, CollapseKeys: *collapseKeys,
		Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		if !errors.Is(err, replay.ErrFailed) {
			fmt.Fprintf(stderr, "floodgate events replay: %v\n", err)
		}
		return exitFailure
	}
	return exitOK
}
