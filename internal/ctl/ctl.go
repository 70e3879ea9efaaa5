// Package ctl is floodgate ctl: it operates a running gateway, or a fleet,
// through the admin listener, each subcommand one call of the admin API
// (overrides, reset, breaker, breakers, protect, fleet, status), so that an
// operator neither types curl lines with a token in them nor reads raw
// JSON. Every call bounds what it reads of the answer and prints the
// server's text escaped: the listener may not be floodgate's.
package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-gw/floodgate/internal/cli"
)

// commands are the subcommands of "floodgate ctl", in the order its
// usage lists them.
var commands = []struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}{
	{"reset", "reset one key of a limit, on the fleet or one instance", runReset},
	{"breaker", "force a route's circuit breaker open or closed, or give it back", runBreaker},
	{"breakers", "list the circuit breakers and their states", runBreakers},
	{"overrides", "set, list or remove runtime overrides of running limits", runOverrides},
	{"protect", "list the protected routes: the limit learned, and each instance's share", runProtect},
	{"fleet", "list the instances sharing the store, and whether they agree", runFleet},
	{"status", "whether the gateway is ready, and what its config runs", runStatus},
}

// Run is floodgate ctl: args are what follows "ctl" on the command line,
// and it returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return cli.ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		printUsage(stdout)
		return cli.ExitOK
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(rest, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "floodgate ctl: unknown command %q\nRun 'floodgate ctl -h' for the list of commands.\n", name)
	return cli.ExitUsage
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: floodgate ctl <command> [flags]\n\n"+
		"Operate a running gateway through its admin listener (--admin, default\n"+
		"http://127.0.0.1:9090). With the redis store, an override, a reset and a\n"+
		"forced breaker reach every instance sharing it (a reset and a breaker unless\n"+
		"--scope instance says otherwise).\n\nCommands:\n\n")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'floodgate ctl <command> -h' for the flags of a command.\n")
}

// client holds the flags every ctl command has, and sends its calls.
type client struct {
	fs       *flag.FlagSet
	admin    string
	token    string
	tokenEnv string
	timeout  time.Duration
	json     bool

	base *url.URL // the admin address, once checked
}

func newClient(fs *flag.FlagSet) *client {
	c := &client{fs: fs}
	fs.StringVar(&c.admin, "admin", "http://127.0.0.1:9090", "the admin listener's `URL` (http or https; host:port means http)")
	fs.StringVar(&c.token, "token", "", "the admin `TOKEN` (admin.token); --token-env keeps it out of the process list")
	fs.StringVar(&c.tokenEnv, "token-env", "", "read the admin token from the environment variable `NAME`")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "give up on the admin listener after `D`")
	fs.BoolVar(&c.json, "json", false, "print the server's JSON answer instead of a line")
	return c
}

// check validates the common flags, and reports ok when the command should
// go on; otherwise the command returns code.
func (c *client) check(stderr io.Writer) (code int, ok bool) {
	if c.fs.NArg() > 0 {
		return cli.UsageError(c.fs, stderr, "unexpected argument %q", c.fs.Arg(0)), false
	}
	if c.timeout <= 0 {
		return cli.UsageError(c.fs, stderr, "--timeout %v: must be positive", c.timeout), false
	}
	raw := c.admin
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return cli.UsageError(c.fs, stderr, "--admin %q: not a URL", c.admin), false
	case u.Scheme != "http" && u.Scheme != "https":
		return cli.UsageError(c.fs, stderr, "--admin %q: want an http or https URL", c.admin), false
	case u.Host == "":
		return cli.UsageError(c.fs, stderr, "--admin %q: no host", c.admin), false
	case u.User != nil:
		// A password in the URL would end up in error messages and the
		// shell's history; the token has flags of its own.
		return cli.UsageError(c.fs, stderr, "--admin: a URL with credentials; give the token with --token-env or --token"), false
	case u.RawQuery != "" || u.Fragment != "":
		return cli.UsageError(c.fs, stderr, "--admin %q: want the listener's address, without a query", c.admin), false
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	c.base = u
	if c.token != "" && c.tokenEnv != "" {
		return cli.UsageError(c.fs, stderr, "--token and --token-env: give one"), false
	}
	if c.tokenEnv != "" {
		c.token = os.Getenv(c.tokenEnv)
		if c.token == "" {
			fmt.Fprintf(stderr, "floodgate %s: --token-env %s: the variable is empty or unset\n", c.fs.Name(), c.tokenEnv)
			return cli.ExitFailure, false
		}
	}
	return cli.ExitOK, true
}

// reply is one answer of the admin listener.
type reply struct {
	status int
	body   []byte
}

// maxAnswer bounds what is read of an answer: GET /admin/config of a large
// config is well below it, and a listener that is not floodgate's cannot
// make the command hold more.
const maxAnswer = 8 << 20

// call sends one request to path (with its query) and reads the answer.
// An error is a call that got no answer; the caller judges the status.
func (c *client) call(method, path string) (reply, error) {
	return c.send(method, path, nil)
}

// send is call with a JSON body, when body is not nil.
func (c *client) send(method, path string, body []byte) (reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	target := c.base.String() + path
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	client := &http.Client{
		// A redirect would carry the token to wherever it points; the
		// admin API never redirects, so a 3xx is reported as it is.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return reply{}, fmt.Errorf("the admin listener at %s did not answer within %v", c.base, c.timeout)
		}
		return reply{}, fmt.Errorf("cannot reach the admin listener at %s: %w", c.base, unwrapURLError(err))
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return reply{}, fmt.Errorf("reading the answer of %s %s: %w", method, path, err)
	}
	if len(got) > maxAnswer {
		return reply{}, fmt.Errorf("the answer of %s %s is over %d MB: not floodgate's admin listener?", method, path, maxAnswer>>20)
	}
	return reply{resp.StatusCode, got}, nil
}

// unwrapURLError drops the "Get "URL": " of a *url.Error, which the
// message says already.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// do is call, judged: it reports the failure on stderr and returns false
// when the call got no answer or an answer that is not 2xx.
func (c *client) do(method, path string, stderr io.Writer) (reply, bool) {
	return c.doBody(method, path, nil, stderr)
}

// doBody is do with a JSON body.
func (c *client) doBody(method, path string, body []byte, stderr io.Writer) (reply, bool) {
	a, err := c.send(method, path, body)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate %s: %v\n", c.fs.Name(), err)
		return a, false
	}
	if a.status/100 != 2 {
		fmt.Fprintf(stderr, "floodgate %s: %s\n", c.fs.Name(), a.problem())
		return a, false
	}
	return a, true
}

// problem describes an answer that is not 2xx: the admin API's code and
// message, or, for an answer that is not the admin API's, the start of it.
func (a reply) problem() string {
	var e struct{ Code, Message, Detail string }
	if json.Unmarshal(a.body, &e) == nil && (e.Code != "" || e.Message != "" || e.Detail != "") {
		s := fmt.Sprintf("%d %s", a.status, printable(e.Code))
		if e.Message != "" {
			s += ": " + printable(e.Message)
		}
		if e.Detail != "" {
			s += ": " + printable(e.Detail)
		}
		return s
	}
	body := strings.TrimSpace(string(a.body))
	if len(body) > 200 {
		body = body[:200] + "…"
	}
	s := fmt.Sprintf("%d %s", a.status, http.StatusText(a.status))
	if body != "" {
		s += ": " + printable(body)
	}
	return s + " (not floodgate's admin API?)"
}

// printable keeps a server's text from writing control sequences to the
// operator's terminal: they are shown escaped.
func printable(s string) string {
	q := strconv.QuoteToGraphic(s)
	q = q[1 : len(q)-1]
	return strings.ReplaceAll(q, `\"`, `"`)
}

// printJSON prints body indented, as --json asks.
func printJSON(stdout io.Writer, body []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(body), "", "  "); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	b.WriteByte('\n')
	_, err := stdout.Write(b.Bytes())
	return err
}

// finish prints a 2xx answer: its JSON with --json, else the line human
// makes of it. It returns the exit code.
func (c *client) finish(a reply, stdout, stderr io.Writer, human func(body []byte) (string, error)) int {
	if c.json {
		if err := printJSON(stdout, a.body); err != nil {
			fmt.Fprintf(stderr, "floodgate %s: %v\n", c.fs.Name(), err)
			return cli.ExitFailure
		}
		return cli.ExitOK
	}
	line, err := human(a.body)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate %s: the answer does not read as floodgate's: %v\n", c.fs.Name(), err)
		return cli.ExitFailure
	}
	fmt.Fprintln(stdout, line)
	return cli.ExitOK
}

// scopeFlag is the --scope of an action: empty for the gateway's default.
func scopeFlag(fs *flag.FlagSet) *string {
	return fs.String("scope", "", "`fleet` (every instance sharing the store) or instance (the one at --admin); default: fleet with the redis store")
}

func checkScope(fs *flag.FlagSet, scope string, stderr io.Writer) (int, bool) {
	switch scope {
	case "", "fleet", "instance":
		return cli.ExitOK, true
	}
	return cli.UsageError(fs, stderr, "--scope %q: want fleet or instance", scope), false
}

func runReset(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl reset", "--route ID --limit NAME --key VALUE [--key VALUE...] [flags]",
		"Reset one key of a limit (DELETE /admin/limits): the key starts afresh, as if\n"+
			"it had sent nothing. A composite key gives each part as its own --key, in the\n"+
			"order of the limit's key; --fallback names the limit's fallback key instead.\n"+
			"Global limits have --route global.\n\n"+
			"  floodgate ctl reset --route api --limit user --key alice --token-env FLOODGATE_ADMIN_TOKEN")
	c := newClient(fs)
	route := fs.String("route", "", "the route `ID`, or global for a global limit (required)")
	name := fs.String("limit", "", "the limit's `NAME` (required)")
	var keys []string
	fs.Func("key", "one `VALUE` of the key, per part in order (required, repeatable)", func(v string) error {
		keys = append(keys, v)
		return nil
	})
	fallback := fs.Bool("fallback", false, "the values are of the limit's fallback key")
	scope := scopeFlag(fs)
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := c.check(stderr); !ok {
		return code
	}
	switch {
	case *route == "":
		return cli.UsageError(fs, stderr, "--route is required")
	case *name == "":
		return cli.UsageError(fs, stderr, "--limit is required")
	case len(keys) == 0:
		return cli.UsageError(fs, stderr, "--key is required: one per part of the limit's key")
	}
	if code, ok := checkScope(fs, *scope, stderr); !ok {
		return code
	}
	q := url.Values{"route": {*route}, "limit": {*name}, "key": keys}
	if *fallback {
		q.Set("fallback", "true")
	}
	if *scope != "" {
		q.Set("scope", *scope)
	}
	a, ok := c.do(http.MethodDelete, "/admin/limits?"+q.Encode(), stderr)
	if !ok {
		return cli.ExitFailure
	}
	return c.finish(a, stdout, stderr, func(body []byte) (string, error) {
		var r struct{ Scope string }
		if err := json.Unmarshal(body, &r); err != nil {
			return "", err
		}
		what := "key"
		if *fallback {
			what = "fallback key"
		}
		return fmt.Sprintf("reset %s/%s %s %s (scope %s)", *route, *name, what, printable(strings.Join(keys, ", ")), printable(r.Scope)), nil
	})
}

func runBreaker(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl breaker", "--route ID --state open|closed|auto [--ttl D] [flags]",
		"Force a route's circuit breaker (POST /admin/breakers/ROUTE): open turns every\n"+
			"request away with the route's fallback, closed lets every request through\n"+
			"whatever the window says, for --ttl or until auto gives the breaker back to\n"+
			"its window.\n\n"+
			"  floodgate ctl breaker --route coupon --state open --ttl 10m --token-env FLOODGATE_ADMIN_TOKEN")
	c := newClient(fs)
	route := fs.String("route", "", "the route `ID` (required)")
	state := fs.String("state", "", "`open`, closed or auto (required)")
	ttl := fs.Duration("ttl", 0, "end the force after `D` (open or closed); default: until auto")
	scope := scopeFlag(fs)
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := c.check(stderr); !ok {
		return code
	}
	switch s := strings.ToLower(*state); {
	case *route == "":
		return cli.UsageError(fs, stderr, "--route is required")
	case strings.Contains(*route, "/"):
		return cli.UsageError(fs, stderr, "--route %q: a route id has no /", *route)
	case *state == "":
		return cli.UsageError(fs, stderr, "--state is required: open, closed or auto")
	case s != "open" && s != "closed" && s != "auto":
		return cli.UsageError(fs, stderr, "--state %q: want open, closed or auto", *state)
	case cli.SetFlags(fs)["ttl"] && *ttl <= 0:
		return cli.UsageError(fs, stderr, "--ttl %v: must be positive", *ttl)
	case s == "auto" && *ttl > 0:
		return cli.UsageError(fs, stderr, "--ttl is for open or closed: auto gives the breaker back to its window at once")
	}
	if code, ok := checkScope(fs, *scope, stderr); !ok {
		return code
	}
	q := url.Values{"state": {strings.ToLower(*state)}}
	if *ttl > 0 {
		q.Set("ttl", ttl.String())
	}
	if *scope != "" {
		q.Set("scope", *scope)
	}
	a, ok := c.do(http.MethodPost, "/admin/breakers/"+url.PathEscape(*route)+"?"+q.Encode(), stderr)
	if !ok {
		return cli.ExitFailure
	}
	return c.finish(a, stdout, stderr, func(body []byte) (string, error) {
		var r struct {
			Route, State, Scope string
			Forced              bool
			TTL                 float64
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return "", err
		}
		how := "given back to its window"
		if r.Forced {
			how = "forced"
			if r.TTL > 0 {
				how += " for " + (time.Duration(r.TTL * float64(time.Second))).String()
			}
		}
		return fmt.Sprintf("breaker %s: %s, %s (scope %s)", printable(r.Route), printable(r.State), how, printable(r.Scope)), nil
	})
}

func runBreakers(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl breakers", "[flags]",
		"List the routes' circuit breakers (GET /admin/breakers) as the instance at\n"+
			"--admin sees them: state, whether forced and for how long, and the window's\n"+
			"calls, failures and slow calls.")
	c, a, code, ok := getCommand(fs, args, "/admin/breakers", stdout, stderr)
	if !ok {
		return code
	}
	return c.finish(a, stdout, stderr, func(body []byte) (string, error) {
		var r struct {
			Breakers []struct {
				Route, State, Scope   string
				Forced                bool
				FleetFallback         bool `json:"fleet_fallback"`
				Calls, Failures, Slow int64
				TTL                   float64
				RetryAfter            float64 `json:"retry_after"`
			}
		}
		if err := json.Unmarshal(body, &r); err != nil {
			return "", err
		}
		if len(r.Breakers) == 0 {
			return "no route has a breaker", nil
		}
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROUTE\tSTATE\tFORCED\tSCOPE\tCALLS\tFAILURES\tSLOW")
		for _, br := range r.Breakers {
			forced := "-"
			if br.Forced {
				forced = "yes"
				if br.TTL > 0 {
					forced = "for " + time.Duration(br.TTL*float64(time.Second)).Round(time.Second).String()
				}
			}
			scope := printable(br.Scope)
			switch {
			case scope == "":
				scope = "instance"
			case br.FleetFallback:
				scope += " (deciding alone: Redis unreachable)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", printable(br.Route), printable(br.State), forced, scope, br.Calls, br.Failures, br.Slow)
		}
		tw.Flush()
		return strings.TrimSuffix(b.String(), "\n"), nil
	})
}

func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ctl status", "[flags]",
		"Say whether the gateway is ready (GET /readyz, with its detail) and what its\n"+
			"running config holds (GET /admin/config): routes, limits, store, events.\n"+
			"The exit code is 1 when the gateway is not ready, so that a script can wait on it.")
	c := newClient(fs)
	if code, ok := cli.ParseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if code, ok := c.check(stderr); !ok {
		return code
	}
	ready, err := c.call(http.MethodGet, "/readyz")
	if err != nil {
		fmt.Fprintf(stderr, "floodgate %s: %v\n", fs.Name(), err)
		return cli.ExitFailure
	}
	var rz struct{ Status, Detail string }
	// /readyz answers 503 with its reason: that is an answer, not a
	// failed call.
	if (ready.status != http.StatusOK && ready.status != http.StatusServiceUnavailable) || json.Unmarshal(ready.body, &rz) != nil || rz.Status == "" {
		fmt.Fprintf(stderr, "floodgate %s: GET /readyz: %s\n", fs.Name(), ready.problem())
		return cli.ExitFailure
	}
	cfg, ok := c.do(http.MethodGet, "/admin/config", stderr)
	if !ok {
		return cli.ExitFailure
	}
	code := cli.ExitOK
	if ready.status != http.StatusOK {
		code = cli.ExitFailure
	}
	if c.json {
		out := fmt.Appendf(nil, `{"ready":%s,"config":%s}`, bytes.TrimSpace(ready.body), bytes.TrimSpace(cfg.body))
		if err := printJSON(stdout, out); err != nil {
			fmt.Fprintf(stderr, "floodgate %s: %v\n", fs.Name(), err)
			return cli.ExitFailure
		}
		return code
	}
	summary, err := configSummary(cfg.body)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate %s: GET /admin/config does not read as floodgate's: %v\n", fs.Name(), err)
		return cli.ExitFailure
	}
	line := "ready: " + printable(rz.Status)
	if rz.Detail != "" {
		line += ": " + printable(rz.Detail)
	}
	fmt.Fprintf(stdout, "%s\nconfig: %s\n", line, summary)
	return code
}

// configSummary is the line of "ctl status" about a running config, from
// its GET /admin/config form.
func configSummary(body []byte) (string, error) {
	var cfg struct {
		GlobalLimits []json.RawMessage `json:"global_limits"`
		Routes       []struct {
			Limits []json.RawMessage
		}
		Store struct {
			Type  string
			Redis struct{ Mode string }
		}
		Events struct{ Sink, Audit string }
	}
	if err := json.Unmarshal(body, &cfg); err != nil {
		return "", err
	}
	limits := len(cfg.GlobalLimits)
	for _, r := range cfg.Routes {
		limits += len(r.Limits)
	}
	store := printable(cfg.Store.Type)
	if cfg.Store.Type == "redis" && cfg.Store.Redis.Mode != "" {
		store += " (" + printable(cfg.Store.Redis.Mode) + ")"
	}
	s := fmt.Sprintf("%s, %s, store %s", countOf(len(cfg.Routes), "route"), countOf(limits, "limit"), store)
	if cfg.Events.Sink != "" && cfg.Events.Sink != "none" {
		s += ", events " + printable(cfg.Events.Sink)
		if cfg.Events.Audit != "" && cfg.Events.Audit != "none" {
			s += " (audit " + printable(cfg.Events.Audit) + ")"
		}
	}
	return s, nil
}

func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
