package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-gw/floodgate/internal/syncbuf"
	"github.com/floodgate-gw/floodgate/internal/testnet"
)

// The serve tests start the real binary on free ports, in front of an
// httptest upstream, and talk to it over HTTP and signals as an operator
// would. Every wait is a poll with a deadline: a slow machine makes them
// slower, never flaky.

const (
	testToken   = "s3cret"
	waitTimeout = 10 * time.Second
)

var client = &http.Client{Timeout: waitTimeout}

// freeAddr returns a loopback address nothing listens on, and that no
// test of this process was given before.
func freeAddr(t *testing.T) string { return testnet.FreeAddr(t) }

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

// A fixture is a config directory, the addresses written into its config
// and an upstream.
type fixture struct {
	t        *testing.T
	dir      string
	file     string
	listen   string // the gateway's address
	admin    string // the admin address
	upstream *httptest.Server
}

// newFixture starts an upstream that answers "upstream PATH" and echoes
// the request id it received in X-Upstream-Request-Id. handler, when not
// nil, serves the upstream instead.
func newFixture(t *testing.T, handler http.Handler) *fixture {
	t.Helper()
	if handler == nil {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Upstream-Request-Id", r.Header.Get("X-Request-Id"))
			fmt.Fprintf(w, "upstream %s", r.URL.Path)
		})
	}
	up := httptest.NewServer(handler)
	t.Cleanup(up.Close)
	dir := t.TempDir()
	return &fixture{
		t: t, dir: dir, file: filepath.Join(dir, "floodgate.yaml"),
		listen: freeAddr(t), admin: freeAddr(t), upstream: up,
	}
}

// yaml expands {{LISTEN}}, {{ADMIN}}, {{UPSTREAM}} and {{TOKEN}} in text.
func (f *fixture) yaml(text string) string {
	return strings.NewReplacer(
		"{{LISTEN}}", f.listen, "{{ADMIN}}", f.admin,
		"{{UPSTREAM}}", f.upstream.URL, "{{TOKEN}}", testToken,
	).Replace(text)
}

// write replaces the config file in place, as "echo > file" does.
func (f *fixture) write(text string) {
	f.t.Helper()
	if err := os.WriteFile(f.file, []byte(f.yaml(text)), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// writeByRename replaces the config file the way editors and deployment
// tools do: a new file renamed over the old one.
func (f *fixture) writeByRename(text string) {
	f.t.Helper()
	tmp := filepath.Join(f.dir, ".floodgate.yaml.swp")
	if err := os.WriteFile(tmp, []byte(f.yaml(text)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(tmp, f.file); err != nil {
		f.t.Fatal(err)
	}
}

// baseConfig has one limited route, /api/**, and the admin token. The
// limit's window starts at a user's first request (align: first), so that
// a test's second request is refused whenever the clock reads: an epoch
// window could end between the two.
const baseConfig = `
server:
  listen: "{{LISTEN}}"
  shutdown_timeout: 5s
admin:
  listen: "{{ADMIN}}"
  token: {{TOKEN}}
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - name: user
        key: [header:X-User-Id]
        rate: 1/10s
        align: first
`

// withRoute is baseConfig with one more route, open, at /ID.
func withRoute(id string) string {
	return baseConfig + fmt.Sprintf(`
  - id: %s
    match: {path: /%s}
    upstream: {targets: ["{{UPSTREAM}}"]}
`, id, id)
}

// A proc is a running "floodgate serve".
type proc struct {
	t      *testing.T
	f      *fixture
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	code   int           // the exit code, once done is closed
}

// startProc starts the floodgate binary with args in the background,
// collecting its stdout and stderr. The process is killed at the end of
// the test if it still runs, and its stderr is logged if the test failed.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(floodgateBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			p.code = exitErr.ExitCode()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("floodgate %s stderr:\n%s", args[0], p.stderr)
		}
	})
	return p
}

// serve starts floodgate serve on f's config and waits until /healthz
// answers.
func (f *fixture) serve(args ...string) *proc {
	t := f.t
	t.Helper()
	p := startProc(t, append([]string{"serve", "-c", f.file}, args...)...)
	p.f = f
	p.waitFor("/healthz to answer", func() bool {
		resp, err := client.Get("http://" + f.admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// waitFor polls cond until it holds, failing the test at the deadline or
// if the process exits first.
func (p *proc) waitFor(what string, cond func() bool) {
	p.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		select {
		case <-p.done:
			p.t.Fatalf("floodgate exited with %d while waiting for %s", p.code, what)
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits for a stderr line that matches re and returns it.
func (p *proc) waitLog(re string) string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	var line string
	p.waitFor("a log line matching "+re, func() bool {
		line = rx.FindString(p.stderr.String())
		return line != ""
	})
	return line
}

// signal sends sig to the process.
func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("sending %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(waitTimeout):
		p.t.Fatalf("floodgate did not exit within %v", waitTimeout)
		return -1
	}
}

type reply struct {
	code   int
	header http.Header
	body   string
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json; body %s", ct, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

// request sends one request; header holds name-value pairs.
func request(t *testing.T, method, url string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return reply{resp.StatusCode, resp.Header, string(body)}
}

// get requests a path of the gateway.
func (p *proc) get(path string, header ...string) reply {
	p.t.Helper()
	return request(p.t, "GET", "http://"+p.f.listen+path, header...)
}

// admin requests a path of the admin listener with the token.
func (p *proc) admin(method, path string) reply {
	p.t.Helper()
	return request(p.t, method, "http://"+p.f.admin+path, "Authorization", "Bearer "+testToken)
}

// readyzDetail is the detail of /readyz, which must answer 200: the
// gateway serves, whatever it has to say.
func (p *proc) readyzDetail() string {
	p.t.Helper()
	r := request(p.t, "GET", "http://"+p.f.admin+"/readyz")
	if r.code != http.StatusOK {
		p.t.Fatalf("/readyz %d: %s", r.code, r.body)
	}
	d, _ := r.json(p.t)["detail"].(string)
	return d
}

// status is the status of a request that may fail to connect (-1).
func (p *proc) status(path string) int {
	resp, err := client.Get("http://" + p.f.listen + path)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// reloads reads gateway_config_reloads_total{result} from /metrics.
func (p *proc) reloads(result string) int {
	p.t.Helper()
	r := request(p.t, "GET", "http://"+p.f.admin+"/metrics")
	m := regexp.MustCompile(`(?m)^gateway_config_reloads_total\{result="` + result + `"\} (\d+)$`).FindStringSubmatch(r.body)
	if m == nil {
		p.t.Fatalf("/metrics has no gateway_config_reloads_total{result=%q}:\n%s", result, r.body)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func skipWithoutSignals(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs POSIX signals")
	}
}

func TestServeProxies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve()

	r := p.get("/api/hello", "X-User-Id", "u1")
	if r.code != 200 || r.body != "upstream /api/hello" {
		t.Fatalf("GET /api/hello: %d %q, want 200 from the upstream", r.code, r.body)
	}
	id := r.header.Get("X-Request-Id")
	if id == "" {
		t.Error("no X-Request-Id in the response")
	}
	if up := r.header.Get("X-Upstream-Request-Id"); up != id {
		t.Errorf("the upstream got request id %q, the client %q", up, id)
	}

	// Headers over server.max_header_bytes get the gateway's JSON answer,
	// though net/http refuses them before the gateway sees them.
	r = p.get("/api/hello", "X-Big", strings.Repeat("b", 128<<10))
	if m := r.json(t); r.code != 431 || m["code"] != "headers_too_large" || m["request_id"] != r.header.Get("X-Request-Id") {
		t.Errorf("headers over the limit: %d %s", r.code, r.body)
	}
	// So does an expectation net/http does not know, which it answers
	// itself; the gateway's own answers pass as they are.
	r = p.get("/api/hello", "Expect", "something")
	if m := r.json(t); r.code != 417 || m["code"] != "bad_request" || m["request_id"] != r.header.Get("X-Request-Id") {
		t.Errorf("an unknown expectation: %d %s", r.code, r.body)
	}
	r = p.get("/nowhere")
	if m := r.json(t); r.code != 404 || m["code"] != "route_not_found" {
		t.Errorf("GET /nowhere: %d %s", r.code, r.body)
	}

	for _, path := range []string{"/healthz", "/readyz"} {
		r := request(t, "GET", "http://"+f.admin+path)
		if m := r.json(t); r.code != 200 || m["status"] != "ok" {
			t.Errorf("GET %s: %d %s, want 200 {\"status\":\"ok\"}", path, r.code, r.body)
		}
	}
	if r := request(t, "GET", "http://"+f.admin+"/"); r.code != 200 || !strings.Contains(r.body, "/metrics") {
		t.Errorf("GET /: %d, want the dashboard page", r.code)
	}
	r = request(t, "GET", "http://"+f.admin+"/metrics")
	if want := `gateway_http_requests_total{code="200",route="api"} 1`; !strings.Contains(r.body, want) {
		t.Errorf("/metrics does not contain %s", want)
	}
	if !strings.Contains(r.body, "go_goroutines") || !strings.Contains(r.body, "process_") && runtime.GOOS == "linux" {
		t.Error("/metrics lacks the Go and process collectors")
	}
}

func TestServeAdminConfig(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve()

	r := request(t, "GET", "http://"+f.admin+"/admin/config")
	if r.code != 401 || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("without the token: %d, WWW-Authenticate %q; want 401 and a Bearer challenge",
			r.code, r.header.Get("WWW-Authenticate"))
	}
	r = request(t, "GET", "http://"+f.admin+"/admin/config", "Authorization", "Bearer wrong")
	if r.code != 401 {
		t.Errorf("with a wrong token: %d, want 401", r.code)
	}
	r = p.admin("GET", "/admin/config")
	if r.code != 200 {
		t.Fatalf("with the token: %d %s, want 200", r.code, r.body)
	}
	m := r.json(t)
	adm, _ := m["admin"].(map[string]any)
	if adm["token"] != "***" || strings.Contains(r.body, testToken) {
		t.Errorf("the token is not hidden: admin = %v", adm)
	}
	if srv, _ := m["server"].(map[string]any); srv["listen"] != f.listen || srv["shutdown_timeout"] != "5s" {
		t.Errorf("server = %v, want the running config", srv)
	}
}

func TestServeRateLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve()

	if r := p.get("/api/x", "X-User-Id", "u1"); r.code != 200 {
		t.Fatalf("first request: %d %s, want 200", r.code, r.body)
	}
	r := p.get("/api/x", "X-User-Id", "u1")
	if r.code != 429 {
		t.Fatalf("second request: %d %s, want 429", r.code, r.body)
	}
	if m := r.json(t); m["code"] != "rate_limited" || m["message"] == "" || m["request_id"] != r.header.Get("X-Request-Id") {
		t.Errorf("429 body %s, want code rate_limited, a message and the request id", r.body)
	}
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if r := p.get("/api/x", "X-User-Id", "u2"); r.code != 200 {
		t.Errorf("another user: %d, want 200", r.code)
	}

	// The admin API reads the key without consuming it, and resets it.
	const key = "/admin/limits?route=api&limit=user&key=u1"
	r = p.admin("GET", key)
	m := r.json(t)
	if r.code != 200 || m["algorithm"] != "fixed_window" || m["limit"] != 1.0 || m["window"] != 10.0 || m["remaining"] != 0.0 {
		t.Errorf("GET %s: %d %s, want fixed_window, limit 1, window 10, remaining 0", key, r.code, r.body)
	}
	if ra, ok := m["reset_after"].(float64); !ok || ra <= 0 || ra > 10 {
		t.Errorf("reset_after %v, want in (0, 10]", m["reset_after"])
	}
	if r := p.admin("GET", "/admin/limits?route=api&limit=nope&key=u1"); r.code != 404 {
		t.Errorf("unknown limit: %d, want 404", r.code)
	}
	if r := p.admin("GET", "/admin/limits?route=api&limit=user&key=a&key=b"); r.code != 400 {
		t.Errorf("two values for a one-part key: %d, want 400", r.code)
	}
	if r := p.admin("DELETE", key); r.code != 200 || r.json(t)["status"] != "reset" {
		t.Errorf("DELETE %s: %d %s, want 200 {\"status\":\"reset\"}", key, r.code, r.body)
	}
	if r := p.get("/api/x", "X-User-Id", "u1"); r.code != 200 {
		t.Errorf("after the reset: %d, want 200", r.code)
	}
}

func TestServeReloadOnFileChange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve()
	if code := p.status("/added"); code != 404 {
		t.Fatalf("GET /added before the reload: %d, want 404", code)
	}

	// Written in place.
	f.write(withRoute("added"))
	p.waitFor("the added route to be served", func() bool { return p.status("/added") == 200 })
	p.waitLog(`"level":"INFO","msg":"config reloaded".*"routes":2,"limits":1`)

	// A file that does not validate is refused with its line, and the
	// running config keeps serving.
	bad := withRoute("added") + "    bogus: 1\n"
	f.write(bad)
	line := p.waitLog(`.*"level":"ERROR".*`)
	want := regexp.MustCompile(regexp.QuoteMeta(fmt.Sprintf("%s:%d: ", f.file, strings.Count(bad, "\n"))) + `.*unknown key \\"bogus\\"`)
	if !want.MatchString(line) {
		t.Errorf("the ERROR line does not contain %q:\n%s", want, line)
	}
	if strings.Count(p.stderr.String(), `"level":"ERROR"`) != 1 {
		t.Errorf("want one ERROR line for one bad file:\n%s", p.stderr)
	}
	if code := p.status("/added"); code != 200 {
		t.Errorf("GET /added after a bad file: %d, want the running config's 200", code)
	}
	if n := p.reloads("error"); n < 1 {
		t.Errorf(`gateway_config_reloads_total{result="error"} = %d, want >= 1`, n)
	}
	if n := p.reloads("ok"); n != 1 {
		t.Errorf(`gateway_config_reloads_total{result="ok"} = %d, want 1`, n)
	}

	// Replaced by a rename, as editors save: the directory watch sees it.
	f.writeByRename(withRoute("renamed"))
	p.waitFor("the renamed route to be served", func() bool { return p.status("/renamed") == 200 })
	if code := p.status("/added"); code != 404 {
		t.Errorf("GET /added after it was removed: %d, want 404", code)
	}
}

func TestServeAdminReload(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	// Without the file watch, only the POST can have reloaded.
	p := f.serve("--watch=false")

	if r := request(t, "POST", "http://"+f.admin+"/admin/reload"); r.code != 401 {
		t.Errorf("POST /admin/reload without the token: %d, want 401", r.code)
	}

	f.write(withRoute("added") + "    bogus: 1\n    upstream: {targets: [ftp://x]}\n")
	r := p.admin("POST", "/admin/reload")
	if r.code != 400 {
		t.Fatalf("POST /admin/reload with a bad file: %d %s, want 400", r.code, r.body)
	}
	var got struct {
		Status string   `json:"status"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || got.Status != "error" {
		t.Fatalf("body %s, want {\"status\":\"error\",\"errors\":[...]}", r.body)
	}
	// The same problems, in the same words, as floodgate check prints.
	_, checkOut, _ := floodgate(t, "check", "-c", f.file)
	if want := strings.Split(strings.TrimSpace(checkOut), "\n"); strings.Join(got.Errors, "\n") != strings.Join(want, "\n") || len(want) < 2 {
		t.Errorf("errors\n %q\nwant what check prints\n %q", got.Errors, want)
	}
	if code := p.status("/added"); code != 404 {
		t.Errorf("GET /added after a refused reload: %d, want 404", code)
	}

	f.write(withRoute("added"))
	if r := p.admin("POST", "/admin/reload"); r.code != 200 || r.json(t)["status"] != "reloaded" {
		t.Fatalf("POST /admin/reload with a good file: %d %s, want 200 {\"status\":\"reloaded\"}", r.code, r.body)
	}
	// The reload is done when the POST answers.
	if code := p.status("/added"); code != 200 {
		t.Errorf("GET /added right after the reload: %d, want 200", code)
	}
	p.waitLog(`"msg":"config reloaded","trigger":"admin API"`)
	if n := p.reloads("error"); n != 1 {
		t.Errorf(`gateway_config_reloads_total{result="error"} = %d, want 1`, n)
	}

	// The same file again: nothing to rebuild, but the reload is answered,
	// logged and counted like any other.
	ok := p.reloads("ok")
	if r := p.admin("POST", "/admin/reload"); r.code != 200 || r.json(t)["status"] != "reloaded" {
		t.Fatalf("POST /admin/reload with the file unchanged: %d %s, want 200 {\"status\":\"reloaded\"}", r.code, r.body)
	}
	p.waitLog(`"msg":"config reloaded; the file is unchanged","trigger":"admin API"`)
	if n := p.reloads("ok"); n != ok+1 {
		t.Errorf(`gateway_config_reloads_total{result="ok"} = %d after an unchanged reload, want %d`, n, ok+1)
	}
}

// A reload that would open the admin listener beyond loopback without a
// token is refused as check refuses the file, and the token keeps guarding
// /admin/*.
func TestServeReloadRefusesOpenAdmin(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve("--watch=false")

	_, port, _ := net.SplitHostPort(f.admin)
	open := strings.NewReplacer(`listen: "{{ADMIN}}"`, `listen: "0.0.0.0:`+port+`"`, "  token: {{TOKEN}}\n", "").Replace(baseConfig)
	f.write(open)
	r := p.admin("POST", "/admin/reload")
	var got struct {
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.code != 400 {
		t.Fatalf("POST /admin/reload: %d %s, want 400 and the errors", r.code, r.body)
	}
	line := strings.Count(open[:strings.Index(open, "0.0.0.0")], "\n") + 1
	want := fmt.Sprintf(`%s:%d: admin.listen: "0.0.0.0:%s" is not loopback (0.0.0.0 means every interface) and admin.token is not set`, f.file, line, port)
	if len(got.Errors) != 1 || !strings.HasPrefix(got.Errors[0], want) {
		t.Errorf("errors %q, want one starting with %q", got.Errors, want)
	}
	_, checkOut, _ := floodgate(t, "check", "-c", f.file)
	if strings.Join(got.Errors, "\n") != strings.TrimSpace(checkOut) {
		t.Errorf("errors %q, want what check prints: %q", got.Errors, checkOut)
	}
	if r := request(t, "GET", "http://"+f.admin+"/admin/config"); r.code != 401 {
		t.Errorf("GET /admin/config without the token after the refused reload: %d, want 401", r.code)
	}
}

// --admin serves the admin listener at its address in place of
// admin.listen, on start and after a reload, and is held to the same rule:
// beyond loopback it needs a token.
// --listen ADDR serves the gateway there in place of server.listen, on
// every load; a bad address is refused naming the flag.
func TestServeListenFlag(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	inFile := f.listen
	f.listen = freeAddr(t)
	p := f.serve("--listen", f.listen)
	if r := p.get("/api/x", "X-User-Id", "u"); r.code != 200 || r.body != "upstream /api/x" {
		t.Errorf("GET /api/x on --listen: %d %q", r.code, r.body)
	}
	if c, err := net.DialTimeout("tcp", inFile, time.Second); err == nil {
		c.Close()
		t.Errorf("server.listen %s of the file accepts connections; want only --listen %s", inFile, f.listen)
	}
	if r := p.admin("POST", "/admin/reload"); r.code != 200 {
		t.Fatalf("POST /admin/reload: %d %s", r.code, r.body)
	}
	if strings.Contains(p.stderr.String(), `"setting":"server.listen"`) {
		t.Errorf("a reload warned of a changed server.listen:\n%s", p.stderr)
	}
	_, stderr, code := floodgate(t, "serve", "-c", f.file, "--listen", "nowhere:port")
	if code != exitFailure || !strings.HasPrefix(stderr, f.file+": --listen: ") {
		t.Errorf("--listen nowhere:port: exit %d, stderr %q; want %d and the flag named", code, stderr, exitFailure)
	}
}

func TestServeAdminFlag(t *testing.T) {
	t.Parallel()
	t.Run("moves the listener", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, nil)
		f.write(baseConfig)
		inFile := f.admin
		f.admin = freeAddr(t)
		p := f.serve("--admin", f.admin)
		if c, err := net.DialTimeout("tcp", inFile, time.Second); err == nil {
			c.Close()
			t.Errorf("admin.listen %s of the file accepts connections; want only --admin %s", inFile, f.admin)
		}
		// The running config says where the listener is; a reload keeps
		// the flag, so nothing changed that needs a restart.
		if adm, _ := p.admin("GET", "/admin/config").json(t)["admin"].(map[string]any); adm["listen"] != f.admin {
			t.Errorf("GET /admin/config: admin = %v, want listen %s", adm, f.admin)
		}
		f.write(strings.Replace(withRoute("added"), "{{ADMIN}}", inFile, 1))
		if r := p.admin("POST", "/admin/reload"); r.code != 200 {
			t.Fatalf("POST /admin/reload: %d %s, want 200", r.code, r.body)
		}
		if adm, _ := p.admin("GET", "/admin/config").json(t)["admin"].(map[string]any); adm["listen"] != f.admin {
			t.Errorf("GET /admin/config after a reload: admin = %v, want listen %s", adm, f.admin)
		}
		if strings.Contains(p.stderr.String(), `"setting":"admin.listen"`) {
			t.Errorf("a reload warned of a changed admin.listen:\n%s", p.stderr)
		}
	})
	t.Run("refused open", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, nil)
		f.write(strings.Replace(baseConfig, "  token: {{TOKEN}}\n", "", 1))
		_, port, _ := net.SplitHostPort(freeAddr(t))
		stdout, stderr, code := floodgate(t, "serve", "-c", f.file, "--admin", "0.0.0.0:"+port)
		if code != exitFailure || stdout != "" {
			t.Errorf("exit %d, stdout %q; want %d and nothing", code, stdout, exitFailure)
		}
		want := f.file + `: --admin: "0.0.0.0:` + port + `" is not loopback (0.0.0.0 means every interface) and admin.token is not set, ` +
			`so anyone who reaches it may reload the config, reset limits and force breakers; ` +
			`set admin.token or admin.token_env, or write admin.allow_open: true to accept an open admin API` + "\n"
		if stderr != want {
			t.Errorf("stderr\n%q\nwant\n%q", stderr, want)
		}
	})
	t.Run("loopback over an open file value", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, nil)
		f.write(strings.NewReplacer(`listen: "{{ADMIN}}"`, `listen: ":9090"`, "  token: {{TOKEN}}\n", "").Replace(baseConfig))
		if _, _, code := floodgate(t, "check", "-c", f.file); code != exitFailure {
			t.Fatalf("check of the file alone: exit %d, want %d", code, exitFailure)
		}
		f.serve("--admin", f.admin)
	})
	t.Run("a reload cannot drop the token an open address needs", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, nil)
		f.write(baseConfig)
		_, port, _ := net.SplitHostPort(f.admin)
		p := f.serve("--watch=false", "--admin", "0.0.0.0:"+port)
		f.write(strings.Replace(baseConfig, "  token: {{TOKEN}}\n", "", 1))
		r := p.admin("POST", "/admin/reload")
		var got struct {
			Errors []string `json:"errors"`
		}
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.code != 400 {
			t.Fatalf("POST /admin/reload: %d %s, want 400 and the errors", r.code, r.body)
		}
		want := f.file + `: --admin: "0.0.0.0:` + port + `" is not loopback`
		if len(got.Errors) != 1 || !strings.HasPrefix(got.Errors[0], want) {
			t.Errorf("errors %q, want one starting with %q", got.Errors, want)
		}
		if r := request(t, "GET", "http://"+f.admin+"/admin/config"); r.code != 401 {
			t.Errorf("GET /admin/config without the token after the refused reload: %d, want 401", r.code)
		}
	})
}

func TestServeSIGHUP(t *testing.T) {
	skipWithoutSignals(t)
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve("--watch=false")

	// A new route, and a listen address that cannot move while running.
	moved := strings.Replace(withRoute("added"), "{{LISTEN}}", freeAddr(t), 1)
	f.write(moved)
	p.signal(syscall.SIGHUP)
	p.waitFor("the added route to be served", func() bool { return p.status("/added") == 200 })
	p.waitLog(`"msg":"config reloaded","trigger":"SIGHUP"`)
	p.waitLog(`"level":"WARN","msg":"a listener setting changed; it takes effect after a restart","setting":"server.listen"`)
}

func TestServeGracefulShutdown(t *testing.T) {
	skipWithoutSignals(t)
	t.Parallel()
	arrived := make(chan struct{}, 1)
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "slow but done")
	}))
	f.write(baseConfig + `
  - id: slow
    match: {path: /slow}
    upstream: {targets: ["{{UPSTREAM}}"]}
`)
	p := f.serve()

	type result struct {
		r   reply
		err error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := client.Get("http://" + f.listen + "/slow")
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		res <- result{reply{resp.StatusCode, resp.Header, string(body)}, err}
	}()
	select {
	case <-arrived:
	case <-time.After(waitTimeout):
		t.Fatal("the request never reached the upstream")
	}
	p.signal(syscall.SIGTERM)

	got := <-res
	if got.err != nil || got.r.code != 200 || got.r.body != "slow but done" {
		t.Errorf("the in-flight request: %v, %d %q; want 200 from the upstream", got.err, got.r.code, got.r.body)
	}
	if code := p.wait(); code != exitOK {
		t.Errorf("exit %d, want %d", code, exitOK)
	}
	if !strings.Contains(p.stderr.String(), `"msg":"shutting down: draining in-flight requests","signal":"terminated"`) {
		t.Error("no log line about the shutdown")
	}
	if _, err := net.DialTimeout("tcp", f.listen, time.Second); err == nil {
		t.Error("the gateway address still accepts connections after exit")
	}
}

// With server.shutdown_delay, a stopping gateway says it is not ready at
// once, and goes on accepting new connections and serving them until the
// delay is over: the time Kubernetes takes to stop sending.
func TestServeShutdownDelay(t *testing.T) {
	skipWithoutSignals(t)
	t.Parallel()
	f := newFixture(t, nil)
	f.write(strings.Replace(baseConfig, "shutdown_timeout: 5s", "shutdown_timeout: 5s\n  shutdown_delay: 6s", 1) + `
  - id: open
    match: {path: /open}
    upstream: {targets: ["{{UPSTREAM}}"]}
`)
	p := f.serve()
	p.signal(syscall.SIGTERM)
	p.waitLog(`"msg":"shutting down: serving on until the load balancer stops sending","signal":"terminated","shutdown_delay":"6s"`)
	resp, err := client.Get("http://" + f.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while stopping: %d, want 503", resp.StatusCode)
	}
	// A new connection, as a load balancer that has not heard yet opens.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err = fresh.Get("http://" + f.listen + "/open")
	if err != nil {
		t.Fatalf("a request during shutdown_delay: %v, want it served", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("a request during shutdown_delay: %d, want 200", resp.StatusCode)
	}
	if code := p.wait(); code != exitOK {
		t.Errorf("exit %d, want %d", code, exitOK)
	}
	p.waitLog(`"msg":"shutting down: draining in-flight requests","timeout":"5s"`)
}

func TestServeSecondSignal(t *testing.T) {
	skipWithoutSignals(t)
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	f := newFixture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	f.write(strings.Replace(baseConfig, "shutdown_timeout: 5s", "shutdown_timeout: 60s", 1) + `
  - id: stuck
    match: {path: /stuck}
    upstream: {targets: ["{{UPSTREAM}}"], timeout: 60s}
`)
	p := f.serve()
	go func() {
		if resp, err := client.Get("http://" + f.listen + "/stuck"); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-arrived:
	case <-time.After(waitTimeout):
		t.Fatal("the request never reached the upstream")
	}
	p.signal(syscall.SIGTERM)
	p.waitLog(`"msg":"shutting down`)
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != exitFailure {
		t.Errorf("exit %d after a second signal, want %d", code, exitFailure)
	}
}

func TestServeConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("server:\n  listen: 8080\n  bogus: 1\nroutes: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		file string
	}{
		{"missing file", missing},
		{"invalid file", bad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := floodgate(t, "serve", "-c", tt.file)
			if code != exitFailure {
				t.Errorf("exit %d, want %d", code, exitFailure)
			}
			// serve reports what check reports, line for line.
			_, want, _ := floodgate(t, "check", "-c", tt.file)
			if stderr != want || !strings.HasPrefix(stderr, tt.file+":") {
				t.Errorf("stderr\n%s\nwant what check prints\n%s", stderr, want)
			}
			if stdout != "" {
				t.Errorf("wrote to stdout: %q", stdout)
			}
		})
	}
	_, stderr, _ := floodgate(t, "serve", "-c", missing)
	if !strings.Contains(stderr, "missing.yaml: cannot read") {
		t.Errorf("stderr %q does not say the file cannot be read", stderr)
	}
}

func TestServeListenError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	f.listen = busy.Addr().String()
	f.write(baseConfig)
	_, stderr, code := floodgate(t, "serve", "-c", f.file)
	if code != exitFailure || !strings.Contains(stderr, `"msg":"cannot listen"`) {
		t.Errorf("exit %d, stderr %q; want 1 and a cannot listen line", code, stderr)
	}
}

func TestServeUsage(t *testing.T) {
	t.Parallel()
	stdout, _, code := floodgate(t, "serve", "-h")
	if code != exitOK || !strings.HasPrefix(stdout, "Usage: floodgate serve") || !strings.Contains(stdout, "-c FILE") {
		t.Errorf("serve -h: exit %d, stdout:\n%s", code, stdout)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"serve", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		stdout, stderr, code := floodgate(t, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || !strings.Contains(stderr, "floodgate serve -h") || stdout != "" {
			t.Errorf("floodgate %s: exit %d, stderr %q; want %d and %q", strings.Join(tt.args, " "), code, stderr, exitUsage, tt.want)
		}
	}
}

// A Redis store that does not answer when serve starts is said at once,
// and the gateway serves anyway (f.serve waits for it to).
func TestServeStoreDownAtStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig + "store: {type: redis, redis: {addrs: [\"" + freeAddr(t) + "\"]}, on_error: allow}\n")
	p := f.serve("--watch=false")
	p.waitLog(`"level":"WARN","msg":"rate-limit store does not answer; deciding by on_error until it does"`)
}

// A refused reload leaves the gateway ready, on the previous config, and
// /readyz and the metrics say so until a reload succeeds.
func TestServeReadyzNamesRefusedFile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve("--watch=false")
	gauge := func(name string) float64 {
		t.Helper()
		r := request(t, "GET", "http://"+f.admin+"/metrics")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(r.body)
		if m == nil {
			t.Fatalf("/metrics has no %s", name)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	readyz := func() (int, string) {
		t.Helper()
		r := request(t, "GET", "http://"+f.admin+"/readyz")
		detail, _ := r.json(t)["detail"].(string)
		return r.code, detail
	}
	if code, detail := readyz(); code != 200 || detail != "" {
		t.Fatalf("/readyz at start: %d %q, want 200 without detail", code, detail)
	}
	if v := gauge("gateway_config_last_reload_success"); v != 1 {
		t.Errorf("gateway_config_last_reload_success at start = %v, want 1", v)
	}
	started := gauge("gateway_config_last_reload_timestamp_seconds")
	if now := float64(time.Now().Unix()); started < now-60 || started > now+1 {
		t.Errorf("gateway_config_last_reload_timestamp_seconds = %v, want about %v", started, now)
	}

	// Three problems: a bad rate on line 15, an unknown key, a bad target.
	f.write(strings.Replace(baseConfig, "rate: 1/10s", "rate: 0/10s", 1) +
		"    bogus: 1\n  - id: b\n    match: {path: /b}\n    upstream: {targets: [ftp://x]}\n")
	if r := p.admin("POST", "/admin/reload"); r.code != 400 {
		t.Fatalf("POST /admin/reload with a bad file: %d %s, want 400", r.code, r.body)
	}
	code, detail := readyz()
	if code != 200 {
		t.Errorf("/readyz after a refused reload: %d, want 200: the previous config serves", code)
	}
	want := regexp.MustCompile(`^config: rejected ` + regexp.QuoteMeta(f.file) + `:\d+: .+ \(and 2 more problems\)$`)
	if !want.MatchString(detail) {
		t.Errorf("/readyz detail %q, want %s", detail, want)
	}
	_, checkOut, _ := floodgate(t, "check", "-c", f.file)
	if first, _, _ := strings.Cut(checkOut, "\n"); !strings.Contains(detail, first) {
		t.Errorf("/readyz detail %q does not quote check's first problem %q", detail, first)
	}
	if v := gauge("gateway_config_last_reload_success"); v != 0 {
		t.Errorf("gateway_config_last_reload_success after a refused reload = %v, want 0", v)
	}
	if v := gauge("gateway_config_last_reload_timestamp_seconds"); v < started {
		t.Errorf("gateway_config_last_reload_timestamp_seconds went back: %v < %v", v, started)
	}
	if r := p.get("/api/x", "X-User-Id", "u"); r.code != 200 {
		t.Errorf("GET /api/x on the previous config: %d, want 200", r.code)
	}

	// A changed, good file clears it.
	f.write(withRoute("added"))
	if r := p.admin("POST", "/admin/reload"); r.code != 200 {
		t.Fatalf("POST /admin/reload with a good file: %d %s", r.code, r.body)
	}
	if code, detail := readyz(); code != 200 || detail != "" {
		t.Errorf("/readyz after a good reload: %d %q, want 200 without detail", code, detail)
	}
	// Its one INFO line says what changed, against the running config
	// and not against the refused file.
	p.waitLog(`"msg":"config reloaded".*"changes":"routes added: added"}`)
	if v := gauge("gateway_config_last_reload_success"); v != 1 {
		t.Errorf("gateway_config_last_reload_success after a good reload = %v, want 1", v)
	}

	// Refused again, then the running file put back as it was: the file
	// is the running config's again, and nothing is refused.
	f.write("routes: [")
	if r := p.admin("POST", "/admin/reload"); r.code != 400 {
		t.Fatalf("POST /admin/reload with a broken file: %d %s, want 400", r.code, r.body)
	}
	if _, detail := readyz(); !strings.HasPrefix(detail, "config: rejected "+f.file+":") || strings.Contains(detail, "more problem") {
		t.Errorf("/readyz detail %q, want one problem of %s", detail, f.file)
	}
	f.write(withRoute("added"))
	if r := p.admin("POST", "/admin/reload"); r.code != 200 {
		t.Fatalf("POST /admin/reload with the running file: %d %s", r.code, r.body)
	}
	if code, detail := readyz(); code != 200 || detail != "" {
		t.Errorf("/readyz after the running file came back: %d %q, want 200 without detail", code, detail)
	}
	if v := gauge("gateway_config_last_reload_success"); v != 1 {
		t.Errorf("gateway_config_last_reload_success after the running file came back = %v, want 1", v)
	}
}

// server.access_log follows logrotate: the file renamed, then SIGHUP with
// the config unchanged, and the lines after it go to a new file.
func TestServeAccessLogRotate(t *testing.T) {
	skipWithoutSignals(t)
	t.Parallel()
	f := newFixture(t, nil)
	file := filepath.Join(f.dir, "access.log")
	f.write(strings.Replace(baseConfig, "  shutdown_timeout: 5s\n", "  shutdown_timeout: 5s\n  access_log: "+file+"\n", 1))
	p := f.serve("--watch=false")
	lines := func(file string) []string {
		data, _ := os.ReadFile(file)
		return strings.Fields(string(data))
	}
	if r := p.get("/api/before", "X-User-Id", "u1"); r.code != 200 {
		t.Fatalf("GET /api/before: %d %s", r.code, r.body)
	}
	p.waitFor("the first access line", func() bool { return len(lines(file)) == 1 })
	if err := os.Rename(file, file+".1"); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGHUP)
	p.waitLog(`"msg":"config reloaded; the file is unchanged","trigger":"SIGHUP"`)
	if r := p.get("/api/after", "X-User-Id", "u1"); r.code != 429 {
		t.Fatalf("GET /api/after: %d %s, want 429", r.code, r.body)
	}
	p.waitFor("the access line in the new file", func() bool { return len(lines(file)) == 1 })
	var after struct {
		Path, Outcome, Limit string
		Status               int
	}
	if err := json.Unmarshal([]byte(lines(file)[0]), &after); err != nil || after.Path != "/api/after" ||
		after.Status != 429 || after.Outcome != "limited" || after.Limit != "user" {
		t.Errorf("the new file holds %q (%v)", lines(file), err)
	}
	if old := lines(file + ".1"); len(old) != 1 || !strings.Contains(old[0], `"path":"/api/before"`) {
		t.Errorf("the rotated file holds %q", old)
	}
	// Not on stderr: that is the log's.
	if strings.Contains(p.stderr.String(), `"msg":"access"`) {
		t.Errorf("access lines on stderr:\n%s", p.stderr)
	}
}

// An access log that cannot be a file is refused by check and serve
// alike, at the setting's line.
func TestServeAccessLogRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	dir := filepath.Join(f.dir, "logs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory where the file should be: check finds it, and so does
	// serve.
	f.write(strings.Replace(baseConfig, "  shutdown_timeout: 5s\n", "  shutdown_timeout: 5s\n  access_log: "+dir+"\n", 1))
	_, stderr, code := floodgate(t, "check", "-c", f.file)
	if want := f.file + ":5: server.access_log: \"" + dir + "\" is a directory"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("check: %d %q, want 1 and %q", code, stderr, want)
	}
	_, stderr, code = floodgate(t, "serve", "-c", f.file)
	if want := f.file + ":5: server.access_log"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("serve: %d %q, want 1 and %q", code, stderr, want)
	}
}

// A refused file's secrets (a password in a Redis address, a token where
// its variable's name goes) reach neither check, nor the reload's ERROR
// line, nor /readyz, which anyone may ask.
func TestServeRefusalHidesSecrets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig)
	p := f.serve("--watch=false")
	for _, bad := range []string{
		"store:\n  type: redis\n  redis: {addrs: [\"redis://u:LEAKPW3@127.0.0.1:16399\"]}\n",
		"events:\n  sink: redis\n  spool_dir: " + f.dir + "\n  redis: {addrs: [\"redis://u:LEAKPW3@127.0.0.1:16399\"]}\n",
		"store:\n  redis: {password_env: \"LEAKPW3-Secret-Value\"}\n",
	} {
		f.write(strings.Replace(baseConfig, "admin:\n  listen: \"{{ADMIN}}\"\n  token: {{TOKEN}}\n",
			"admin:\n  listen: \"{{ADMIN}}\"\n  token: {{TOKEN}}\n"+bad, 1))
		_, checkOut, code := floodgate(t, "check", "-c", f.file)
		r := p.admin("POST", "/admin/reload")
		ready := request(t, "GET", "http://"+f.admin+"/readyz")
		if code != 1 || r.code != 400 || !strings.Contains(ready.body, "config: rejected") {
			t.Fatalf("check %d %q, reload %d %s, /readyz %s: want both refused, and said", code, checkOut, r.code, r.body, ready.body)
		}
		for what, s := range map[string]string{"check": checkOut, "the reload's answer": r.body, "/readyz": ready.body, "the log": p.stderr.String()} {
			if strings.Contains(s, "LEAKPW3") {
				t.Errorf("%s repeats the secret:\n%s", what, s)
			}
		}
	}
}

// POST /admin/breakers/ROUTE bounds a force's ttl with clear answers, logs
// the state as GET /admin/breakers shows it, and GET shows how long a
// force with a ttl has to run.
func TestServeForceBreaker(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.write(baseConfig + `
  - id: coupon
    match: {path: /coupon}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
`)
	p := f.serve("--watch=false")
	for _, tt := range []struct{ query, want string }{
		{"state=open&ttl=99999999h", `ttl \"99999999h\" is too long: at most 168h (7 days)`},
		{"state=open&ttl=9223372036854775807ns", `ttl 2562047h47m16.854775807s is too long: at most 168h (7 days)`},
		{"state=open&ttl=169h", `ttl 169h0m0s is too long: at most 168h (7 days)`},
		{"state=open&ttl=0s", `ttl \"0s\": want a positive duration such as 30m`},
		{"state=auto&ttl=5s", `state auto gives the breaker back to its window at once and takes no ttl; a ttl is for open or closed`},
	} {
		if r := p.admin("POST", "/admin/breakers/coupon?"+tt.query); r.code != 400 || !strings.Contains(r.body, tt.want) {
			t.Errorf("%s: %d %s, want 400 and %s", tt.query, r.code, r.body, tt.want)
		}
	}
	if r := p.admin("POST", "/admin/breakers/coupon?state=open&ttl=168h"); r.code != 200 || !strings.Contains(r.body, `"state":"OPEN"`) {
		t.Fatalf("a force of 168h: %d %s", r.code, r.body)
	}
	p.waitLog(`"msg":"circuit breaker forced","route":"coupon","state":"OPEN","forced":true,"ttl":"168h0m0s","scope":"instance","by":"admin"}`)
	var got struct {
		Breakers []struct {
			Route  string
			State  string
			Forced bool
			TTL    float64
		}
	}
	r := p.admin("GET", "/admin/breakers")
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || len(got.Breakers) != 1 {
		t.Fatalf("GET /admin/breakers: %s (%v)", r.body, err)
	}
	if b := got.Breakers[0]; b.State != "OPEN" || !b.Forced || b.TTL <= 167*3600 || b.TTL > 168*3600 {
		t.Errorf("GET /admin/breakers: %+v, want OPEN, forced, with about 168h left", b)
	}
	// In any casing, the log says it as GET does; a force for good has no
	// ttl left to show.
	if r := p.admin("POST", "/admin/breakers/coupon?state=cLoSeD"); r.code != 200 {
		t.Fatalf("a force of cLoSeD: %d %s", r.code, r.body)
	}
	p.waitLog(`"msg":"circuit breaker forced","route":"coupon","state":"CLOSED","forced":true,"scope":"instance","by":"admin"}`)
	if r := p.admin("GET", "/admin/breakers"); strings.Contains(r.body, `"ttl"`) {
		t.Errorf("GET /admin/breakers after a force for good: %s", r.body)
	}
}
