package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-gw/floodgate/internal/cli"
)

func runProtect(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl protect", "[flags]",
		"List the protected routes (GET /admin/protect) as the instance at --admin\n"+
			"sees them: the limit learned (the fleet's with the Redis store, or a pin),\n"+
			"what this instance admits of it, the upstream's healthy latency, and how\n"+
			"many instances share it. Pin one with: floodgate ctl overrides set --route R\n"+
			"--limit protect --rate 300/s --ttl 10m.")
	c, a, code, ok := getCommand(fs, args, "/admin/protect", stdout, stderr)
	if !ok {
		return code
	}
	return c.finish(a, stdout, stderr, func(body []byte) (string, error) {
		var r struct {
			Routes []struct {
				Route                      string
				Limit, Admitting, Baseline float64
				Min, Max, Pinned           float64
				Instances                  int
			}
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return "", err
		}
		if len(r.Routes) == 0 {
			return "no route is protected", nil
		}
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROUTE\tLIMIT\tADMITTING\tHEALTHY LATENCY\tSHARED BY\tBOUNDS")
		for _, p := range r.Routes {
			limit := rate(p.Limit)
			if p.Pinned > 0 {
				limit += " (pinned)"
			}
			latency := "not learned yet"
			if p.Baseline > 0 {
				latency = time.Duration(p.Baseline * float64(time.Second)).Round(time.Millisecond).String()
			}
			shared := "this instance"
			if p.Instances > 0 {
				shared = fmt.Sprintf("%d instances", p.Instances)
			}
			bounds := rate(p.Min) + " to " + rate(p.Max)
			if p.Max == 0 {
				bounds = rate(p.Min) + " and up"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(p.Route), limit, rate(p.Admitting), latency, shared, bounds)
		}
		tw.Flush()
		return strings.TrimSuffix(b.String(), "\n"), nil
	})
}

// rate writes requests a second; a billion and more is no limit.
func rate(v float64) string {
	if v >= 1e9 {
		return "none"
	}
	return fmt.Sprintf("%.1f/s", v)
}
