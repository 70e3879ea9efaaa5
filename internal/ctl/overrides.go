package ctl

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-gw/floodgate/internal/cli"
)

// runOverrides is "floodgate ctl overrides set|list|rm".
func runOverrides(args []string, stdout, stderr io.Writer) int {
	usage := "Usage: floodgate ctl overrides set|list|rm [flags]\n\n" +
		"A runtime override changes a running limit without editing the config: its\n" +
		"rate and burst, whether it is shadow, or whether it is decided at all. With the\n" +
		"redis store it reaches every instance within a second and outlives restarts;\n" +
		"it wins over the file until removed or its --ttl ends.\n\n" +
		"\tset   set one (PUT /admin/overrides/ROUTE/LIMIT)\n" +
		"\tlist  list those in force (GET /admin/overrides)\n" +
		"\trm    remove one (DELETE /admin/overrides/ROUTE/LIMIT)\n\n" +
		"Run 'floodgate ctl overrides <command> -h' for its flags.\n"
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cli.ExitUsage
	}
	switch args[0] {
	case "set":
		return runOverrideSet(args[1:], stdout, stderr)
	case "list", "ls":
		return runOverrideList(args[1:], stdout, stderr)
	case "rm", "remove", "delete":
		return runOverrideRm(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return cli.ExitOK
	}
	fmt.Fprintf(stderr, "floodgate ctl overrides: unknown command %q: want set, list or rm\n", args[0])
	return cli.ExitUsage
}

// boolFlag is a flag that is unset, true or false.
type boolFlag struct{ v *bool }

func (b *boolFlag) String() string {
	if b == nil || b.v == nil {
		return ""
	}
	return strconv.FormatBool(*b.v)
}

func (b *boolFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("want true or false")
	}
	b.v = &v
	return nil
}

func (b *boolFlag) IsBoolFlag() bool { return true }

func targetFlags(fs *flag.FlagSet) (route, name *string) {
	route = fs.String("route", "", "the route `ID`, or global for a global limit (required)")
	name = fs.String("limit", "", "the limit's `NAME`, or protect for the route's protection (required)")
	return route, name
}

func checkTarget(fs *flag.FlagSet, route, name string, stderr io.Writer) (int, bool) {
	switch {
	case route == "":
		return cli.UsageError(fs, stderr, "--route is required"), false
	case name == "":
		return cli.UsageError(fs, stderr, "--limit is required"), false
	case strings.Contains(route, "/") || strings.Contains(name, "/"):
		return cli.UsageError(fs, stderr, "--route and --limit hold no /"), false
	}
	return cli.ExitOK, true
}

func overridePath(route, name string) string {
	return "/admin/overrides/" + url.PathEscape(route) + "/" + url.PathEscape(name)
}

func runOverrideSet(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl overrides set", "--route ID --limit NAME [--rate R] [--burst N] [--in-flight N] [--shadow=B] [--enabled=B] [--ttl D] [flags]",
		"Set a runtime override of one limit, in place of the one it has: an override\n"+
			"is replaced as a whole, so give every value it should change, and --ttl again.\n"+
			"Give at least one of --rate (a rate\n"+
			"limit), --in-flight (a concurrency limit), --burst (a token bucket),\n"+
			"--shadow and --enabled. A new rate brings its own count as the burst when\n"+
			"the file's burst is the file rate's count; give --burst to say otherwise.\n"+
			"--limit protect pins a protected route's limit (--rate), or turns its\n"+
			"protection off (--enabled=false).\n\n"+
			"  floodgate ctl overrides set --route api --limit user --rate 20/10s --ttl 30m \\\n"+
			"      --reason \"sale: raise for the first half hour\" --token-env FLOODGATE_ADMIN_TOKEN\n"+
			"  floodgate ctl overrides set --route coupon --limit protect --rate 300/s --ttl 10m")
	c := newClient(fs)
	route, name := targetFlags(fs)
	rate := fs.String("rate", "", "the new `RATE` of a rate limit (800/s, 1/10s)")
	burst := fs.Int64("burst", 0, "the new burst of a token bucket, `N`")
	inFlight := fs.Int64("in-flight", 0, "the new limit of a concurrency limit, `N` requests in flight")
	var shadow, enabled boolFlag
	fs.Var(&shadow, "shadow", "true: decide and report the limit, never reject; false: reject again")
	fs.Var(&enabled, "enabled", "false: do not decide the limit at all")
	ttl := fs.Duration("ttl", 0, "end the override after `D` (at least 1s); default: until removed")
	reason := fs.String("reason", "", "why, kept with the override and logged")
	by := fs.String("by", "", "who sets it, kept with the override and logged (a named token names its holder instead)")
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := c.check(stderr); !ok {
		return code
	}
	if code, ok := checkTarget(fs, *route, *name, stderr); !ok {
		return code
	}
	set := cli.SetFlags(fs)
	body := map[string]any{}
	if set["rate"] {
		body["rate"] = *rate
	}
	if set["burst"] {
		body["burst"] = *burst
	}
	if set["in-flight"] {
		body["limit"] = *inFlight
	}
	if shadow.v != nil {
		body["shadow"] = *shadow.v
	}
	if enabled.v != nil {
		body["enabled"] = *enabled.v
	}
	if len(body) == 0 {
		return cli.UsageError(fs, stderr, "nothing to set: give --rate, --in-flight, --burst, --shadow or --enabled")
	}
	if set["ttl"] {
		body["ttl"] = ttl.String()
	}
	if *reason != "" {
		body["reason"] = *reason
	}
	if *by != "" {
		body["by"] = *by
	}
	b, _ := json.Marshal(body)
	a, ok := c.doBody(http.MethodPut, overridePath(*route, *name), b, stderr)
	if !ok {
		return cli.ExitFailure
	}
	return c.finish(a, stdout, stderr, func(body []byte) (string, error) {
		var st struct {
			overrideJSON
			Version  int64
			Replaced *struct{ Override changeJSON }
		}
		if err := json.Unmarshal(body, &st); err != nil {
			return "", err
		}
		line := fmt.Sprintf("override %s/%s: %s (file: %s)", printable(st.Route), printable(st.Limit), st.Override.describe(), st.File.describe())
		if st.Replaced != nil {
			// PUT replaces the whole override: say what went.
			line += "; replaced " + st.Replaced.Override.describe()
		}
		if st.TTLLeft > 0 {
			line += ", for " + seconds(st.TTLLeft)
		}
		if !st.Applied {
			line += "; not applied here: " + printable(st.Why)
		}
		return line + fmt.Sprintf(" (version %d)", st.Version), nil
	})
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

// overrideJSON is one override as GET /admin/overrides lists it.
type overrideJSON struct {
	Route, Limit string
	Override     changeJSON
	File         changeJSON
	By, Reason   string
	TTLLeft      float64 `json:"ttl_left"`
	Applied      bool
	Why          string `json:"not_applied"`
}

type changeJSON struct {
	Rate    string
	Limit   int64
	Burst   int64
	Shadow  *bool
	Enabled *bool
}

func (c changeJSON) describe() string {
	var parts []string
	if c.Rate != "" {
		parts = append(parts, "rate "+printable(c.Rate))
	}
	if c.Limit != 0 {
		parts = append(parts, fmt.Sprintf("limit %d", c.Limit))
	}
	if c.Burst != 0 {
		parts = append(parts, fmt.Sprintf("burst %d", c.Burst))
	}
	if c.Shadow != nil {
		parts = append(parts, "shadow "+strconv.FormatBool(*c.Shadow))
	}
	if c.Enabled != nil {
		parts = append(parts, "enabled "+strconv.FormatBool(*c.Enabled))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func runOverrideList(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl overrides list", "[flags]",
		"List the runtime overrides in force, with the file's values beside them.")
	c, a, code, ok := getCommand(fs, args, "/admin/overrides", stdout, stderr)
	if !ok {
		return code
	}
	return c.finish(a, stdout, stderr, func(body []byte) (string, error) {
		var r struct {
			Scope     string
			Version   int64
			Overrides []overrideJSON
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return "", err
		}
		if len(r.Overrides) == 0 {
			return fmt.Sprintf("no overrides (version %d, scope %s)", r.Version, printable(r.Scope)), nil
		}
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROUTE\tLIMIT\tOVERRIDE\tFILE\tTTL\tBY\tREASON")
		for _, o := range r.Overrides {
			ttl := "-"
			if o.TTLLeft > 0 {
				ttl = seconds(o.TTLLeft)
			}
			what := o.Override.describe()
			if !o.Applied {
				what += " (not applied here: " + printable(o.Why) + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", printable(o.Route), printable(o.Limit), what, o.File.describe(), ttl, printable(o.By), printable(o.Reason))
		}
		tw.Flush()
		fmt.Fprintf(&b, "version %d, scope %s", r.Version, printable(r.Scope))
		return b.String(), nil
	})
}

func runOverrideRm(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl overrides rm", "--route ID --limit NAME [flags]",
		"Remove the runtime override of one limit: the file's values apply again.")
	c := newClient(fs)
	route, name := targetFlags(fs)
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := c.check(stderr); !ok {
		return code
	}
	if code, ok := checkTarget(fs, *route, *name, stderr); !ok {
		return code
	}
	a, ok := c.do(http.MethodDelete, overridePath(*route, *name), stderr)
	if !ok {
		return cli.ExitFailure
	}
	return c.finish(a, stdout, stderr, func(body []byte) (string, error) {
		var r struct {
			Scope   string
			Version int64
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return "", err
		}
		return fmt.Sprintf("override %s/%s removed (version %d, scope %s)", printable(*route), printable(*name), r.Version, printable(r.Scope)), nil
	})
}

func runFleet(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl fleet", "[flags]",
		"List the gateway instances that share the store (GET /admin/fleet): version,\n"+
			"config digest, overrides version, store health and uptime, and whether\n"+
			"they agree. The exit code is 1 when they do not.")
	c, a, code, ok := getCommand(fs, args, "/admin/fleet", stdout, stderr)
	if !ok {
		return code
	}
	var r struct {
		Instances []struct {
			ID, Version, Config, Store string
			Self                       bool
			OverridesVersion           *int64  `json:"overrides_version"`
			Uptime                     float64 `json:"uptime_seconds"`
		}
		Agree       struct{ Config, Version, Overrides bool }
		Disagreeing []string
	}
	if err := json.Unmarshal(a.body, &r); err != nil {
		fmt.Fprintf(stderr, "floodgate %s: the answer does not read as floodgate's: %v\n", fs.Name(), err)
		return cli.ExitFailure
	}
	code = c.finish(a, stdout, stderr, func([]byte) (string, error) {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tVERSION\tCONFIG\tOVERRIDES\tSTORE\tUPTIME")
		for _, i := range r.Instances {
			id := printable(i.ID)
			if i.Self {
				id += " (this)"
			}
			cfg := printable(i.Config)
			if len(cfg) > 12 {
				cfg = cfg[:12]
			}
			ov := "-"
			if i.OverridesVersion != nil {
				ov = strconv.FormatInt(*i.OverridesVersion, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, printable(i.Version), cfg, ov, printable(i.Store), seconds(i.Uptime))
		}
		tw.Flush()
		yes := func(v bool) string {
			if v {
				return "yes"
			}
			return "no"
		}
		fmt.Fprintf(&b, "agree: config %s, version %s, overrides %s", yes(r.Agree.Config), yes(r.Agree.Version), yes(r.Agree.Overrides))
		if len(r.Disagreeing) > 0 {
			fmt.Fprintf(&b, "; disagreeing: %s", printable(strings.Join(r.Disagreeing, ", ")))
		}
		return b.String(), nil
	})
	if code == cli.ExitOK && (!r.Agree.Config || !r.Agree.Version || !r.Agree.Overrides) {
		return cli.ExitFailure
	}
	return code
}

// getCommand parses the flags of a ctl command that only reads path, and
// makes its call; when ok is false the command returns code.
func getCommand(fs *flag.FlagSet, args []string, path string, stdout, stderr io.Writer) (c *client, a reply, code int, ok bool) {
	c = newClient(fs)
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return nil, a, code, false
	}
	if code, ok := c.check(stderr); !ok {
		return nil, a, code, false
	}
	if a, ok = c.do(http.MethodGet, path, stderr); !ok {
		return nil, a, cli.ExitFailure, false
	}
	return c, a, cli.ExitOK, true
}
