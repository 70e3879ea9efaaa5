package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/demo"
)

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("demo", "[--redis ADDR] [--rate N] [--duration D] [--hold]",
		"Rehearse a flash sale in one process, with no outside services: a mock coupon API that\n"+
			"serves 500 requests a second (3 s each beyond), floodgate in front of it with the limits\n"+
			"and the protection of examples/flash-sale.yaml, and a crowd of users who retry at once\n"+
			"when refused.\n\n"+
			"The script, each phase announced: a warm-up at 200 requests/s; the sale opens at 3s with\n"+
			"a surge to --rate that settles at 300/s; from 6s to 10s the coupon API serves only 250 a\n"+
			"second, and the limit protection learns follows it down (what it cannot take is turned\n"+
			"away at once, 503 overloaded) and back up; the API fails from 19s to 23s, the circuit\n"+
			"breaker opens and records every request it turns away; the API recovers and the breaker's\n"+
			"trial calls close it; at the end, what the breaker and protection recorded is replayed to\n"+
			"the API, for 20s at most. On a machine too busy to keep up, the outage lasts until the\n"+
			"breaker has opened, and the traffic until it has closed again (up to 30s longer each).\n"+
			"A line per second shows what was sent (retries included), the users new that second,\n"+
			"what was admitted, refused by each limit (429), 503, the latency, what reached the\n"+
			"coupon API, protection's limit and the breaker's state. It takes about 45 seconds.\n\n"+
			"--redis runs the limits on a Redis server; --hold keeps the gateway, its dashboard and\n"+
			"the coupon API up afterwards, until Ctrl-C.")
	var o demo.Options
	fs.StringVar(&o.Redis, "redis", "", "decide the limits on the Redis server at `ADDR` instead of in memory")
	fs.Float64Var(&o.Peak, "rate", 5000, "the peak of the surge, in requests `per second`")
	fs.DurationVar(&o.Duration, "duration", demo.DefaultDuration, "how long the traffic runs, the recovery included (at least "+
		demo.DefaultScript.MinDuration().String()+")")
	fs.BoolVar(&o.Hold, "hold", false, "keep serving after the script, until Ctrl-C")
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return cli.UsageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if err := o.Check(); err != nil {
		return cli.UsageError(fs, stderr, "%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, stdout, o); err != nil {
		fmt.Fprintln(stderr, "floodgate demo:", err)
		return exitFailure
	}
	return exitOK
}
