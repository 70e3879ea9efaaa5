package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/config"
)

// writeConfig writes a config file in a fresh directory and returns its path.
func writeConfig(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckValid(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "fg.yaml", `
store:
  type: redis
  redis: {addrs: ["127.0.0.1:6379"]}
global_limits:
  - {name: global, key: [global], rate: 2000/s}
routes:
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - {name: user, key: [header:X-User-Id], rate: 1/10s}
  - id: b
    match: {path: /b/**}
    upstream: {targets: ["http://127.0.0.1:9001"]}
    limits:
      - {name: ip, key: [ip], rate: 100/min}
      - {name: api, key: [route], algorithm: token_bucket, rate: 800/s}
`)
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitOK {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitOK, stderr)
	}
	if want := path + ": ok: 2 routes, 4 limits, store redis (standalone), admin 127.0.0.1:9090\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if stderr != "" {
		t.Errorf("wrote to stderr: %q", stderr)
	}
}

// A valid config with a route that an earlier one hides passes, with a
// warning on stderr at the hidden route's line.
func TestCheckWarnings(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "fg.yaml", `
routes:
  - id: all
    match: {path: /api/**}
    upstream: {targets: ["http://127.0.0.1:9000"]}
  - id: orders
    match: {path: /api/orders}
    upstream: {targets: ["http://127.0.0.1:9001"]}
`)
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitOK {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitOK, stderr)
	}
	if !strings.HasPrefix(stdout, path+": ok: 2 routes") {
		t.Errorf("stdout %q", stdout)
	}
	if want := path + `:7: warning: routes[1].match: unreachable: route "all" (line 3) takes every request this route matches (the first match wins)` + "\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
}

// A rule directory that is not there is reported at the line of
// rls.config_dir, like the config file's other problems.
func TestCheckMissingRulesDir(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "fg.yaml", `
rls:
  listen: "127.0.0.1:0"
  config_dir: /nonexistent/floodgate-rules
`)
	_, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d", code, exitFailure)
	}
	if want := path + `:4: rls.config_dir: "/nonexistent/floodgate-rules" cannot be read: no such file or directory` + "\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
}

// An admin listener beyond loopback without a token is refused at its
// line, with what to write instead.
func TestCheckOpenAdmin(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "fg.yaml", `admin:
  listen: "0.0.0.0:9090"
routes:
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://127.0.0.1:9000"]}
`)
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitFailure || stdout != "" {
		t.Errorf("exit %d, stdout %q; want %d and nothing", code, stdout, exitFailure)
	}
	want := path + `:2: admin.listen: "0.0.0.0:9090" is not loopback (0.0.0.0 means every interface) and admin.token is not set, ` +
		`so anyone who reaches it may reload the config, reset limits and force breakers; ` +
		`set admin.token or admin.token_env, or write admin.allow_open: true to accept an open admin API` + "\n"
	if stderr != want {
		t.Errorf("stderr\n%q\nwant\n%q", stderr, want)
	}
}

// Every shipped example passes check, run from the repository's root as
// the README runs them: the paths in them are relative to it.
func TestCheckExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			f := "examples/" + filepath.Base(f)
			stdout, stderr, code := floodgateIn(t, "../..", "check", "--c", f)
			if code != exitOK || !strings.HasPrefix(stdout, f+": ok: ") {
				t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
		})
	}
}

// An example whose breaker records the requests it turns away, for
// events replay to send again, records the headers that say whose they
// are: each header a limit's key reads, the token's for a jwt: part. A
// replayed entry without them would reach the upstream as nobody's.
func TestExamplesRecordWho(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		cfg, err := config.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		kept := map[string]bool{}
		for _, h := range cfg.Events.Headers {
			kept[http.CanonicalHeaderKey(h)] = true
		}
		for _, r := range cfg.Routes {
			if !r.Fallback.Record {
				continue
			}
			for _, l := range append(append([]*config.Limit{}, cfg.GlobalLimits...), r.Limits...) {
				for _, p := range append(append([]config.KeyPart{}, l.Key...), l.Fallback...) {
					var h string
					switch {
					case p.Source == config.SourceHeader:
						h = p.Name
					case p.Source == config.SourceCookie,
						p.Source == config.SourceJWT && cfg.Server.JWT.From.Source == config.SourceCookie:
						h = "Cookie"
					case p.Source == config.SourceJWT:
						h = cfg.Server.JWT.From.Name
					default:
						continue
					}
					if !kept[http.CanonicalHeaderKey(h)] {
						t.Errorf("%s: route %s records its turned-away requests, and limit %s keys by %s:%s, but events.headers %v keeps no %s",
							filepath.Base(f), r.ID, l.Name, p.Source, p.Name, cfg.Events.Headers, h)
					}
				}
			}
		}
	}
}

func TestCheckErrors(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "bad.yaml", `server:
  listen: ":8080"
  shutdown_timout: 10s
routes:
  - id: lucky-meal
    match: {path: /receive}
    upstream: {targets: ["127.0.0.1:9000"]}
    limits:
      - name: user
        key: [user]
        rate: 0/s
`)
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitFailure, stderr)
	}
	if stdout != "" {
		t.Errorf("wrote to stdout: %q", stdout)
	}
	want := []string{
		path + `:3: server: unknown key "shutdown_timout" (did you mean "shutdown_timeout"?)`,
		path + `:7: routes[0].upstream.targets[0]: "127.0.0.1:9000" is not an absolute http(s) URL (write it as http://127.0.0.1:9000)`,
		path + `:10: routes[0].limits[0].key[0]: unknown key source "user" (global, route, path, method, host, ip, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM, tls:subject)`,
		path + `:11: routes[0].limits[0].rate: rate "0/s": count 0 must be positive`,
	}
	if got := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, strings.Join(want, "\n"))
	}
}

// Each error line has the form editors and CI annotations parse.
func TestCheckErrorFormat(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"empty.yaml":     "",
		"not-yaml.yaml":  "server:\n  listen: x\n    admin: y\n",
		"no-routes.yaml": "server: {listen: \":8080\"}\n",
	}
	for name, content := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, name, content)
			stdout, stderr, code := floodgate(t, "check", "-c", path)
			if code != exitFailure || stdout != "" {
				t.Fatalf("exit %d, stdout %q; want %d and nothing", code, stdout, exitFailure)
			}
			line := regexp.MustCompile(`^` + regexp.QuoteMeta(path) + `:[1-9][0-9]*: \S.*$`)
			for _, l := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
				if !line.MatchString(l) {
					t.Errorf("stderr line %q is not FILE:LINE: message", l)
				}
			}
		})
	}
}

func TestCheckMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.yaml")
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitFailure || stdout != "" {
		t.Errorf("exit %d, stdout %q; want %d and nothing", code, stdout, exitFailure)
	}
	if want := path + ": cannot read: "; !strings.HasPrefix(stderr, want) {
		t.Errorf("stderr %q does not start with %q", stderr, want)
	}
}

// Without -c, check reads floodgate.yaml in the working directory.
func TestCheckDefaultFile(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "floodgate.yaml", `
routes:
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://127.0.0.1:9000"]}
`)
	cmd := exec.Command(floodgateBin, "check")
	cmd.Dir = filepath.Dir(path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("floodgate check: %v", err)
	}
	if want := "floodgate.yaml: ok: 1 route, 0 limits, store memory, admin 127.0.0.1:9090\n"; string(out) != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
}

func TestCheckSecretsNotPrinted(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "fg.yaml", `
store:
  type: redis
  redis:
    addrs: ["127.0.0.1:6379"]
    password: hunter2-secret
    password_env: FG_CHECK_TEST_PASSWORD
events:
  nats: {url: "http://user:hunter2-secret@x"}
routes:
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://127.0.0.1:9000"]}
`)
	stdout, stderr, code := floodgate(t, "check", "-c", path)
	if code != exitFailure {
		t.Fatalf("exit %d, want %d", code, exitFailure)
	}
	if strings.Contains(stdout+stderr, "hunter2") {
		t.Errorf("a secret was printed:\n%s%s", stdout, stderr)
	}
}

func TestCheckUsage(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := floodgate(t, "check", "-h")
	if code != exitOK || !strings.HasPrefix(stdout, "Usage: floodgate check [-c FILE]\n") || stderr != "" {
		t.Errorf("check -h: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !strings.Contains(stdout, `(default "floodgate.yaml")`) {
		t.Errorf("check -h does not show the default file:\n%s", stdout)
	}
	for _, args := range [][]string{{"check", "--bogus"}, {"check", "extra.yaml"}, {"check", "-c"}} {
		stdout, stderr, code := floodgate(t, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "floodgate check -h") {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %q", args, code, exitUsage, stdout, stderr)
		}
	}
}
