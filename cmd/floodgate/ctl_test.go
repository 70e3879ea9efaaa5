package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// ctlConfig is a gateway with a limited route, a route with a breaker, and
// audit events in a file ({{EVENTS}}).
const ctlConfig = `
server: {listen: "{{LISTEN}}"}
admin: {listen: "{{ADMIN}}", token: {{TOKEN}}}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - {name: user, key: [header:X-User-Id, header:X-Tenant], rate: 1/1h}
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
events:
  sink: file
  file: {path: "{{EVENTS}}"}
  audit: rejected
`

// ctlServe starts floodgate serve on ctlConfig and returns it with the
// path of its events file.
func ctlServe(t *testing.T) (*proc, string) {
	t.Helper()
	f := newFixture(t, nil)
	events := filepath.Join(f.dir, "events.jsonl")
	f.write(strings.ReplaceAll(ctlConfig, "{{EVENTS}}", events))
	return f.serve("--watch=false"), events
}

// ctl runs "floodgate ctl" against p's admin listener, with the token
// from the environment as an operator would keep it.
func (p *proc) ctl(args ...string) (stdout, stderr string, code int) {
	p.t.Helper()
	args = append([]string{"ctl", args[0], "--admin", "http://" + p.f.admin, "--token-env", "FG_TEST_TOKEN"}, args[1:]...)
	return floodgateEnv(p.t, []string{"FG_TEST_TOKEN=" + testToken}, args...)
}

// floodgateEnv is floodgate with env added to the environment.
func floodgateEnv(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb strings.Builder
	cmd := exec.Command(floodgateBin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running floodgate %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// adminEvents reads the admin_action events of the events file.
func adminEvents(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var evs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events file line %q: %v", line, err)
		}
		if ev["type"] == "admin_action" {
			evs = append(evs, ev)
		}
	}
	return evs
}

// A user over a composite-key limit is let in again after "ctl reset",
// and the reset is one admin_action event naming who, what and where.
func TestCtlResetFreesAUser(t *testing.T) {
	t.Parallel()
	p, events := ctlServe(t)
	get := func() int { return p.get("/api/x", "X-User-Id", "alice", "X-Tenant", "acme").code }
	if c := get(); c != http.StatusOK {
		t.Fatalf("first request: %d", c)
	}
	if c := get(); c != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429", c)
	}
	stdout, stderr, code := p.ctl("reset", "--route", "api", "--limit", "user", "--key", "alice", "--key", "acme")
	if code != exitOK || stdout != "reset api/user key alice, acme (scope instance)\n" {
		t.Fatalf("ctl reset: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, testToken) {
		t.Errorf("ctl reset printed the token:\n%s%s", stdout, stderr)
	}
	if c := get(); c != http.StatusOK {
		t.Fatalf("after the reset: %d, want 200", c)
	}
	// One part of a two-part key is the server's 400, with its message.
	_, stderr, code = p.ctl("reset", "--route", "api", "--limit", "user", "--key", "alice")
	if code != exitFailure || !strings.Contains(stderr, "floodgate ctl reset: 400 bad_request: ") {
		t.Errorf("ctl reset with one part of two: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = p.ctl("reset", "--route", "nope", "--limit", "user", "--key", "alice")
	if code != exitFailure || !strings.Contains(stderr, "floodgate ctl reset: 404 limit_not_found: ") {
		t.Errorf("ctl reset of an unknown route: exit %d, stderr %q", code, stderr)
	}
	// The one reset carried out is the one event.
	var evs []map[string]any
	p.waitFor("the reset's admin_action event", func() bool {
		evs = adminEvents(t, events)
		return len(evs) > 0
	})
	ev := evs[0]
	want := map[string]any{
		"action": "reset", "by": "admin", "scope": "instance", "route": "api", "limit": "user",
		"keys": map[string]any{"user": []any{"alice", "acme"}},
	}
	for k, v := range want {
		if fmt.Sprint(ev[k]) != fmt.Sprint(v) {
			t.Errorf("event %s = %v, want %v; event %v", k, ev[k], v, ev)
		}
	}
	if s, _ := ev["instance"].(string); s == "" {
		t.Errorf("event without an instance: %v", ev)
	}
	if _, ok := ev["state"]; ok {
		t.Errorf("a reset's event has a breaker state: %v", ev)
	}
	if len(evs) != 1 {
		t.Errorf("%d admin_action events, want 1: %v", len(evs), evs)
	}
}

// "ctl breaker" forces a breaker open for a while, "ctl breakers" shows
// it, and auto gives it back; each force is an admin_action event with the
// state before and after.
func TestCtlBreakerOpenThenAuto(t *testing.T) {
	t.Parallel()
	p, events := ctlServe(t)
	stdout, stderr, code := p.ctl("breaker", "--route", "coupon", "--state", "open", "--ttl", "10m")
	if code != exitOK || stdout != "breaker coupon: OPEN, forced for 10m0s (scope instance)\n" {
		t.Fatalf("ctl breaker open: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	if c := p.get("/coupon").code; c != http.StatusServiceUnavailable {
		t.Errorf("/coupon with the breaker forced open: %d, want 503", c)
	}
	stdout, stderr, code = p.ctl("breakers")
	if code != exitOK || !strings.Contains(stdout, "ROUTE") || !strings.Contains(stdout, "coupon") || !strings.Contains(stdout, "OPEN") || !regexp.MustCompile(`coupon\s+OPEN\s+for \S+\s+instance\s`).MatchString(stdout) || !strings.Contains(stdout, "for 10m0s") && !strings.Contains(stdout, "for 9m59s") {
		t.Fatalf("ctl breakers: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	stdout, stderr, code = p.ctl("breakers", "--json")
	var listed struct {
		Breakers []struct{ Route, State string }
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &listed) != nil || len(listed.Breakers) != 1 || listed.Breakers[0].State != "OPEN" || !strings.Contains(stdout, "\n  ") {
		t.Fatalf("ctl breakers --json: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	stdout, stderr, code = p.ctl("breaker", "--route", "coupon", "--state", "auto")
	if code != exitOK || stdout != "breaker coupon: CLOSED, given back to its window (scope instance)\n" {
		t.Fatalf("ctl breaker auto: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	if c := p.get("/coupon").code; c != http.StatusOK {
		t.Errorf("/coupon with the breaker back on its window: %d, want 200", c)
	}
	_, stderr, code = p.ctl("breaker", "--route", "api", "--state", "open")
	if code != exitFailure || !strings.Contains(stderr, "floodgate ctl breaker: 404 breaker_not_found: ") {
		t.Errorf("ctl breaker on a route without one: exit %d, stderr %q", code, stderr)
	}
	var evs []map[string]any
	p.waitFor("two admin_action events", func() bool {
		evs = adminEvents(t, events)
		return len(evs) >= 2
	})
	if len(evs) != 2 {
		t.Fatalf("%d admin_action events, want 2: %v", len(evs), evs)
	}
	for i, want := range []map[string]any{
		{"action": "force_breaker", "by": "admin", "scope": "instance", "route": "coupon", "state": "open", "ttl": 600.0, "before": "CLOSED", "after": "OPEN"},
		{"action": "force_breaker", "by": "admin", "scope": "instance", "route": "coupon", "state": "auto", "before": "OPEN", "after": "CLOSED"},
	} {
		for k, v := range want {
			if evs[i][k] != v {
				t.Errorf("event %d: %s = %v, want %v; event %v", i, k, evs[i][k], v, evs[i])
			}
		}
		if s, _ := evs[i]["instance"].(string); s == "" {
			t.Errorf("event %d without an instance: %v", i, evs[i])
		}
	}
	if _, ok := evs[1]["ttl"]; ok {
		t.Errorf("the auto force has a ttl: %v", evs[1])
	}
}

// "ctl status" says the gateway is ready and what it runs.
func TestCtlStatus(t *testing.T) {
	t.Parallel()
	p, _ := ctlServe(t)
	stdout, stderr, code := p.ctl("status")
	want := "ready: ok\nconfig: 2 routes, 1 limit, store memory, events file (audit rejected)\n"
	if code != exitOK || stdout != want {
		t.Fatalf("ctl status: exit %d\nstdout %q, want %q\nstderr %s", code, stdout, want, stderr)
	}
	stdout, stderr, code = p.ctl("status", "--json")
	var got struct {
		Ready  struct{ Status string }
		Config struct{ Admin struct{ Token string } }
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &got) != nil || got.Ready.Status != "ok" || got.Config.Admin.Token != "***" {
		t.Fatalf("ctl status --json: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// A wrong token is the server's refusal, exit 1; no token at all too; the
// token given is never printed.
func TestCtlWrongToken(t *testing.T) {
	t.Parallel()
	p, _ := ctlServe(t)
	admin := "http://" + p.f.admin
	for _, tt := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--token", "wr0ng-t0ken"}},
		{"env", []string{"FG_BAD=wr0ng-t0ken"}, []string{"--token-env", "FG_BAD"}},
		{"none", nil, nil},
	} {
		for _, sub := range []string{"reset", "breaker", "breakers", "status"} {
			args := []string{"ctl", sub, "--admin", admin}
			switch sub {
			case "reset":
				args = append(args, "--route", "api", "--limit", "user", "--key", "a", "--key", "b")
			case "breaker":
				args = append(args, "--route", "coupon", "--state", "open")
			}
			stdout, stderr, code := floodgateEnv(t, tt.env, append(args, tt.args...)...)
			want := "floodgate ctl " + sub + `: 401 unauthorized: this endpoint needs "Authorization: Bearer <admin token>"`
			if code != exitFailure || !strings.Contains(stderr, want) || stdout != "" {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want 1 and %s", tt.name, sub, code, stdout, stderr, want)
			}
			if strings.Contains(stdout+stderr, "wr0ng-t0ken") {
				t.Errorf("%s %s printed the token: %s", tt.name, sub, stderr)
			}
		}
	}
	// Nothing was forced.
	if r := p.admin("GET", "/admin/breakers"); !strings.Contains(r.body, `"state":"CLOSED"`) {
		t.Errorf("after refused calls: %s", r.body)
	}
}

// An admin address nothing listens on is exit 1 with the address and the
// reason.
func TestCtlUnreachable(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	for _, sub := range []string{"breakers", "status"} {
		stdout, stderr, code := floodgate(t, "ctl", sub, "--admin", addr, "--token", "x")
		want := "floodgate ctl " + sub + ": cannot reach the admin listener at http://" + addr + ": "
		if code != exitFailure || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, "refused") || stdout != "" {
			t.Errorf("ctl %s: exit %d, stdout %q, stderr %q; want 1 and %s… refused", sub, code, stdout, stderr, want)
		}
	}
}

func TestCtlBadUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"ctl"}, "Usage: floodgate ctl <command>"},
		{[]string{"ctl", "bogus"}, `floodgate ctl: unknown command "bogus"`},
		{[]string{"ctl", "reset", "--limit", "user", "--key", "a"}, "floodgate ctl reset: --route is required"},
		{[]string{"ctl", "reset", "--route", "api", "--key", "a"}, "floodgate ctl reset: --limit is required"},
		{[]string{"ctl", "reset", "--route", "api", "--limit", "user"}, "floodgate ctl reset: --key is required"},
		{[]string{"ctl", "reset", "--route", "api", "--limit", "u", "--key", "a", "--scope", "world"}, `floodgate ctl reset: --scope "world": want fleet or instance`},
		{[]string{"ctl", "reset", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"ctl", "breaker", "--state", "open"}, "floodgate ctl breaker: --route is required"},
		{[]string{"ctl", "breaker", "--route", "a/b", "--state", "open"}, `--route "a/b": a route id has no /`},
		{[]string{"ctl", "breaker", "--route", "coupon"}, "--state is required: open, closed or auto"},
		{[]string{"ctl", "breaker", "--route", "coupon", "--state", "half"}, `--state "half": want open, closed or auto`},
		{[]string{"ctl", "breaker", "--route", "coupon", "--state", "open", "--ttl", "0s"}, "--ttl 0s: must be positive"},
		{[]string{"ctl", "breaker", "--route", "coupon", "--state", "open", "--ttl", "soon"}, `invalid value "soon" for flag -ttl`},
		{[]string{"ctl", "breaker", "--route", "coupon", "--state", "auto", "--ttl", "5m"}, "--ttl is for open or closed"},
		{[]string{"ctl", "breakers", "extra"}, `floodgate ctl breakers: unexpected argument "extra"`},
		{[]string{"ctl", "status", "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"ctl", "status", "--admin", "ftp://host:21"}, `--admin "ftp://host:21": want an http or https URL`},
		{[]string{"ctl", "status", "--admin", "http://u:pw@host:9090"}, "--admin: a URL with credentials"},
		{[]string{"ctl", "status", "--admin", "http://host:9090/?x=1"}, "without a query"},
		{[]string{"ctl", "status", "--token", "a", "--token-env", "B"}, "--token and --token-env: give one"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := floodgate(t, tt.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %q", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.want)
			}
			if strings.Contains(stderr, "pw@") {
				t.Errorf("stderr shows the URL's password: %q", stderr)
			}
			if stdout != "" {
				t.Errorf("wrote to stdout: %q", stdout)
			}
		})
	}
	// An empty --token-env is not bad usage but a missing token: exit 1,
	// before any call.
	_, stderr, code := floodgateEnv(t, []string{"FG_EMPTY="}, "ctl", "status", "--token-env", "FG_EMPTY", "--admin", freeAddr(t))
	if code != exitFailure || !strings.Contains(stderr, "--token-env FG_EMPTY: the variable is empty or unset") {
		t.Errorf("empty --token-env: exit %d, stderr %q", code, stderr)
	}
	// -h is usage on stdout, exit 0.
	for _, args := range [][]string{{"ctl", "-h"}, {"help", "ctl"}, {"ctl", "reset", "-h"}} {
		stdout, _, code := floodgate(t, args...)
		if code != exitOK || !strings.HasPrefix(stdout, "Usage: floodgate ctl") {
			t.Errorf("%v: exit %d, stdout %q", args, code, stdout)
		}
	}
}

// On a fleet, "ctl reset" is of the fleet by default: a user over the
// limit on one instance is let in on the other after a reset sent to the
// first.
func TestCtlResetFleet(t *testing.T) {
	t.Parallel()
	ps := fleet(t, 2)
	a, b := ps[0], ps[1]
	get := func(p *proc) int { return p.get("/api/x", "X-User-Id", "bob").code }
	if c := get(a); c != http.StatusOK {
		t.Fatalf("first request: %d", c)
	}
	if c := get(b); c != http.StatusTooManyRequests {
		t.Fatalf("over the limit on the second instance: %d", c)
	}
	stdout, stderr, code := a.ctl("reset", "--route", "api", "--limit", "user", "--key", "bob")
	if code != exitOK || stdout != "reset api/user key bob (scope fleet)\n" {
		t.Fatalf("ctl reset: exit %d\nstdout %q\nstderr %s", code, stdout, stderr)
	}
	b.waitFor("bob admitted on the second instance", func() bool { return get(b) == http.StatusOK })
}
