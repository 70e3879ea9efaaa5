package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/floodgate-gw/floodgate/internal/cli"
	"github.com/floodgate-gw/floodgate/internal/demo"
)

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("demo", "[--redis ADDR] [--rate N] [--duration D] [--hold]",
		"Rehearse a flash sale in one process, with no outside services: a mock coupon API that\n"+
			"serves 500 requests a second (3 s each beyond), floodgate in front of it with the limits\n"+
			"of examples/flash-sale.yaml, and a crowd of users who retry at once when refused.\n\n"+
			"The script, each phase announced: a warm-up at 200 requests/s; the sale opens at 3s with\n"+
			"a surge to --rate that settles at 250/s; the coupon API fails from 8s to 12s, the circuit\n"+
			"breaker opens and records every request it turns away; the API recovers and the breaker's\n"+
			"trial calls close it; at the end, the recorded requests are replayed to the API, for 20s at\n"+
			"most. On a machine too busy to keep up, the outage lasts until the breaker has opened, and\n"+
			"the traffic until it has closed again (up to 30s longer each).\n"+
			"A line per second shows what was sent (retries included), the users new that second,\n"+
			"what was admitted, refused by each limit (429), 503, the latency, what reached the\n"+
			"coupon API and the breaker's state. It takes about 30 seconds.\n\n"+
			"--redis runs the limits on a Redis server; --hold keeps the gateway, its dashboard and\n"+
			"the coupon API up afterwards, until Ctrl-C.")
	var o demo.Options
	fs.StringVar(&o.Redis, "redis", "", "decide the limits on the Redis server at `ADDR` instead of in memory")
	fs.Float64Var(&o.Peak, "rate", 5000, "the peak of the surge, in requests `per second`")
	fs.DurationVar(&o.Duration, "duration", 16*time.Second, "how long the traffic runs, the recovery included (at least "+
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
