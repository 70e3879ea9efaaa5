package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-gw/floodgate/internal/needs"
	"github.com/floodgate-gw/floodgate/internal/syncbuf"
	"github.com/floodgate-gw/floodgate/internal/testnet"
	"github.com/floodgate-gw/floodgate/internal/testredis"
)

const (
	adminToken = "prom-test-token"
	// waitTimeout bounds each wait on floodgate or Prometheus.
	waitTimeout = 45 * time.Second
	// rateInterval stands for Grafana's $__rate_interval, which is at
	// least four scrape intervals: 15 s is well over four of the test's
	// 1 s scrapes, and short enough that a series must have been
	// scraped lately to count.
	rateInterval = "15s"
)

// floodgateConfig has every feature whose series the dashboard or the
// alerts read:
//   - api: a per-user limit the load runs over (429s, answers from
//     local rejects) and a breaker that stays closed until the test
//     forces it open;
//   - flaky: an upstream that fails every other call, and a fleet
//     breaker on Redis that opens on it and records what it turns away;
//   - grpc: gRPC health checks proxied over h2c;
//   - the rate-limit service, with one domain;
//   - events to a Redis that refuses connections, through a spool so
//     small that it fills and drops events;
//   - an access log.
const floodgateConfig = `
server:
  listen: "{{LISTEN}}"
  h2c: true
  access_log: "{{DIR}}/access.log"
  shutdown_timeout: 2s
admin:
  listen: "{{ADMIN}}"
  token: "{{TOKEN}}"
rls:
  listen: "{{RLS}}"
  config_dir: "{{DIR}}/rls"
store:
  type: redis
  redis:
    addrs: ["{{REDIS}}"]
    timeout: 500ms
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - name: per-user
        key: [header:X-User-Id]
        rate: 5/s
    breaker: {enabled: true}
  - id: flaky
    match: {path: /flaky/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    limits:
      - name: per-ip
        key: [ip]
        rate: 100000/s
    breaker:
      enabled: true
      scope: fleet
      window: 2s
      min_calls: 4
      open_for: 1s
      half_open_calls: 2
    fallback: {record: true}
  - id: grpc
    match: {path: /grpc.health.v1.Health/**}
    upstream: {targets: ["http://{{GRPC}}"], protocol: h2c}
events:
  sink: redis
  redis: {addrs: ["{{DEAD}}"]}
  spool_dir: "{{DIR}}/spool"
  spool_max_bytes: 16384
  audit: all
`

const rlsRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// TestPrometheus runs floodgate and a real Prometheus that scrapes it
// and evaluates alerts.yaml, puts load on the gateway, and asks
// Prometheus every query of the dashboard and every alert's expression:
// each must parse and return series. It stalls Redis until the store
// alerts' expressions select the outage, then forces a breaker open and
// waits for FloodgateCircuitBreakerOpen to fire.
func TestPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("a Prometheus scraping floodgate until its alerts fire; make check runs it")
	}
	promBin := needs.Program(t, "prometheus", "prometheus")
	queries := append(dashboardQueries(t), alertQueries(t)...)

	fg := startFloodgate(t)
	prom := startPrometheus(t, promBin, fg.admin)

	ctx, stop := context.WithCancel(context.Background())
	load := fg.startLoad(ctx)
	defer func() {
		stop()
		load.wait()
	}()

	fg.refuseFraming(t)
	fg.refuseReload(t, prom)

	// Every query must return series while the load runs. The series of
	// each appear within a few scrapes; a query that is not valid PromQL
	// fails at once.
	prom.waitQueries(t, queries)
	prom.waitRulesHealthy(t)

	fg.storeOutage(t, prom)

	// The api breaker is closed: no alert yet. Forced open, it fires
	// once its for: (shortened to 2s in the rules Prometheus loads) has
	// passed.
	if a := prom.alert(t, "FloodgateCircuitBreakerOpen", "api"); a != "" {
		t.Fatalf("FloodgateCircuitBreakerOpen for route api is %s before the breaker was forced", a)
	}
	fg.adminOK(t, "POST", "/admin/breakers/api?state=open")
	prom.waitFor(t, "FloodgateCircuitBreakerOpen to fire for route api", func() bool {
		return prom.alert(t, "FloodgateCircuitBreakerOpen", "api") == "firing"
	})

	stop()
	load.wait()
	n := load.counts()
	t.Logf("load: %v", n)
	for _, what := range []string{"200", "429", "500", "503", "grpc OK", "rls OK", "rls OVER_LIMIT", "rls InvalidArgument"} {
		if n[what] == 0 {
			t.Errorf("the load had no %s answer; got %v", what, n)
		}
	}
}

// A query is one PromQL expression to ask Prometheus, and what it is.
type query struct {
	from string // the panel or alert it comes from
	expr string
	// labels must all be non-empty in at least one series of the
	// answer: those a panel's legend or an alert's annotations name, the
	// label of a variable's label_values. A label the query drops (a
	// sum by without it, a typo) would show empty.
	labels []string
}

var (
	legendLabel = regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`)
	alertLabel  = regexp.MustCompile(`\$labels\.(\w+)`)
)

// namedLabels lists the distinct labels re's first group finds in texts.
func namedLabels(re *regexp.Regexp, texts ...string) []string {
	var labels []string
	seen := map[string]bool{}
	for _, text := range texts {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				labels = append(labels, m[1])
			}
		}
	}
	return labels
}

// grafanaVars stands for the values Grafana gives the dashboard's
// variables with "All" chosen ($job, $route: their allValue .*), except
// $instance, given the one instance the test runs as a regex, as Grafana
// writes a chosen value. ${1} in label_replace is no variable: Grafana
// leaves it as it is, and so does the test.
func grafanaVars(instance string) *strings.Replacer {
	// Grafana escapes a value for a regex, and the Prometheus data
	// source escapes the backslashes for PromQL's string literal.
	inst := strings.ReplaceAll(regexp.QuoteMeta(instance), `\`, `\\`)
	return strings.NewReplacer("$__rate_interval", rateInterval, "$__interval", "1s", "$__range", "5m",
		"$instance", inst, "$route", ".*", "$job", "floodgate")
}

// unknownVar finds a template variable grafanaVars does not know.
var unknownVar = regexp.MustCompile(`\$\{?[A-Za-z_]\w*`)

// dashboardQueries reads every panel's query and every variable's
// label_values selector from the dashboard, with its variables replaced
// later (grafanaVars needs the instance).
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	d := readDashboard(t)
	var qs []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					qs = append(qs, query{from: "panel " + p.Title, expr: tg.Expr, labels: namedLabels(legendLabel, tg.LegendFormat)})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil || !strings.HasPrefix(q.Query, "label_values(") {
			continue
		}
		sel := strings.TrimSuffix(strings.TrimPrefix(q.Query, "label_values("), ")")
		i := strings.LastIndex(sel, ",")
		if i < 0 {
			t.Fatalf("variable %s: %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
		}
		qs = append(qs, query{from: "variable $" + v.Name, expr: sel[:i], labels: []string{strings.TrimSpace(sel[i+1:])}})
	}
	if len(qs) < 30 {
		t.Fatalf("found %d queries in the dashboard; the walk of its panels is wrong", len(qs))
	}
	return qs
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Annotations map[string]string `yaml:"annotations"`
}

func readAlerts(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

// alertQueries gives, for each alert rule, what must return series in a
// run where the alert need not fire: its expression without its
// threshold (see withoutThreshold).
func alertQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, r := range readAlerts(t) {
		parts, err := withoutThreshold(r.Expr)
		if err != nil {
			t.Fatalf("alert %s: %v", r.Alert, err)
		}
		labels := namedLabels(alertLabel, r.Annotations["summary"], r.Annotations["description"])
		for _, p := range parts {
			qs = append(qs, query{from: "alert " + r.Alert, expr: p, labels: labels})
		}
		if trueUnderLoad[r.Alert] {
			qs = append(qs, query{from: "alert " + r.Alert + " (whole: the load makes it true)", expr: r.Expr, labels: labels})
		}
	}
	return qs
}

// trueUnderLoad are the alerts whose whole expression, threshold and
// all, the test's load makes true: it checks that their matchers and
// thresholds catch a real fault, not only that their series exist.
// FloodgateConfigReloadFailed is checked the same way by refuseReload.
var trueUnderLoad = map[string]bool{
	"FloodgateRouteErrorRate":     true, // flaky: half its calls fail, then its breaker answers 503
	"FloodgateEventsLost":         true, // the sink refuses connections and the spool is full: drops
	"FloodgateEventsSpoolBacklog": true, // the same: events wait in the spool
	"FloodgateRLSErrors":          true, // ShouldRateLimit calls without descriptors: InvalidArgument
}

// withoutThreshold strips the threshold off an alert's expression, so
// that it returns the series the alert compares:
//
//   - at the top level (outside parentheses, braces, brackets and
//     strings), the expression is split on "or", and each operand is
//     one query of its own: each must have data, not only one of them;
//   - an operand with one comparison (==, !=, >, <, >=, <=) at the top
//     level is replaced by its left operand: "A / B > 0.05" is "A / B"
//     (arithmetic binds tighter), "max(X) != min(X)" is "max(X)";
//   - an operand without one is kept whole.
//
// "and" and "unless" at the top level, and two comparisons in one
// operand, are refused: which side carries the data is then a choice to
// make by hand, not by this function.
func withoutThreshold(expr string) ([]string, error) {
	var parts []string
	for _, operand := range splitTop(expr, "or") {
		if len(splitTop(operand, "and")) > 1 || len(splitTop(operand, "unless")) > 1 {
			return nil, fmt.Errorf("%q: and/unless at the top level: say by hand what must have data", operand)
		}
		cmp := topComparisons(operand)
		switch len(cmp) {
		case 0:
			parts = append(parts, strings.TrimSpace(operand))
		case 1:
			parts = append(parts, strings.TrimSpace(operand[:cmp[0]]))
		default:
			return nil, fmt.Errorf("%q: %d comparisons at the top level", operand, len(cmp))
		}
	}
	return parts, nil
}

// scanTop calls at for each byte offset of expr at the top level: not
// inside (), {}, [] or a string literal.
func scanTop(expr string, at func(i int)) {
	depth := 0
	for i := 0; i < len(expr); i++ {
		switch c := expr[i]; c {
		case '"', '\'', '`':
			for i++; i < len(expr) && expr[i] != c; i++ {
				if expr[i] == '\\' && c != '`' {
					i++
				}
			}
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			depth--
		case '#': // a comment runs to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		default:
			if depth == 0 {
				at(i)
			}
		}
	}
}

func isIdent(c byte) bool {
	return c == '_' || c == ':' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// splitTop splits expr on the keyword op at the top level.
func splitTop(expr, op string) []string {
	var parts []string
	last := 0
	scanTop(expr, func(i int) {
		if i < last || !strings.HasPrefix(expr[i:], op) {
			return
		}
		end := i + len(op)
		if (i > 0 && isIdent(expr[i-1])) || (end < len(expr) && isIdent(expr[end])) {
			return
		}
		parts = append(parts, expr[last:i])
		last = end
	})
	return append(parts, expr[last:])
}

// topComparisons gives the offsets of the comparison operators at the
// top level of expr.
func topComparisons(expr string) []int {
	var at []int
	skip := -1
	scanTop(expr, func(i int) {
		if i <= skip {
			return
		}
		switch {
		case strings.HasPrefix(expr[i:], "=="), strings.HasPrefix(expr[i:], "!="),
			strings.HasPrefix(expr[i:], ">="), strings.HasPrefix(expr[i:], "<="):
			at = append(at, i)
			skip = i + 1
		case expr[i] == '>' || expr[i] == '<':
			at = append(at, i)
		}
	})
	return at
}

// rulesForTest writes a copy of alerts.yaml for Prometheus to load, with
// FloodgateCircuitBreakerOpen's for: of a minute cut to 2s so that the
// test sees it fire without waiting a minute. Every other rule is as in
// the file.
func rulesForTest(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			var alert string
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "alert" {
					alert = n.Content[i+1].Value
				}
			}
			for i := 0; alert == "FloodgateCircuitBreakerOpen" && i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == "for" {
					n.Content[i+1].Value = "2s"
					found = true
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	if !found {
		t.Fatal("alerts.yaml: FloodgateCircuitBreakerOpen has no for: to shorten")
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "alerts.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// freeAddr returns a loopback address nothing listens on, and that no
// test of this process was given before.
func freeAddr(t *testing.T) string { return testnet.FreeAddr(t) }

// A process is a child the test started: stopped at the end of the test,
// its output logged if the test failed.
type process struct {
	name string
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
}

func startProcess(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	setProcAttr(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			out := p.out.String()
			if len(out) > 16<<10 {
				out = "..." + out[len(out)-16<<10:]
			}
			t.Logf("%s output:\n%s", p.name, out)
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// syncBuffer is written by one goroutine while the test reads it.
type syncBuffer = syncbuf.Buffer

// waitFor polls cond until it holds, failing the test at the deadline or
// when p has exited.
func waitFor(t *testing.T, p *process, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if p.exited() {
			t.Fatalf("%s exited while waiting for %s", p.name, what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var client = &http.Client{Timeout: 10 * time.Second}

type gateway struct {
	proc               *process
	redis              *testredis.Server
	listen, admin, rls string
	file, config       string
	upstreamCalls      atomic.Int64
	grpcConn, rlsConn  *grpc.ClientConn
	health             healthpb.HealthClient
	ratelimit          rlsv3.RateLimitServiceClient
}

// startFloodgate builds floodgate, starts its upstreams and Redis, and
// runs floodgate serve on floodgateConfig.
func startFloodgate(t *testing.T) *gateway {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "floodgate")
	// go test puts its own toolchain first on PATH.
	build := exec.Command("go", "build", "-o", bin, "./cmd/floodgate")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building floodgate: %v\n%s", err, out)
	}

	g := &gateway{listen: freeAddr(t), admin: freeAddr(t), rls: freeAddr(t), file: filepath.Join(dir, "floodgate.yaml")}
	// Every other call of /flaky/ fails, enough for its breaker's 50%.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/flaky/") && g.upstreamCalls.Add(1)%2 == 0 {
			http.Error(w, "failing", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)

	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(grpcLn)
	t.Cleanup(gs.Stop)

	g.redis = testredis.Start(t)
	dead := strings.TrimPrefix(testnet.RefusedURL(t), "http://")
	if err := os.Mkdir(filepath.Join(dir, "rls"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rls", "edge.yaml"), []byte(rlsRules), 0o644); err != nil {
		t.Fatal(err)
	}
	g.config = strings.NewReplacer("{{LISTEN}}", g.listen, "{{ADMIN}}", g.admin, "{{RLS}}", g.rls,
		"{{TOKEN}}", adminToken, "{{DIR}}", dir, "{{REDIS}}", g.redis.Addr(), "{{DEAD}}", dead,
		"{{UPSTREAM}}", up.URL, "{{GRPC}}", grpcLn.Addr().String()).Replace(floodgateConfig)
	g.write(t, g.config)

	g.proc = startProcess(t, "floodgate", bin, "serve", "-c", g.file)
	waitFor(t, g.proc, "floodgate's /healthz", func() bool {
		resp, err := client.Get("http://" + g.admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	for _, c := range []struct {
		conn **grpc.ClientConn
		addr string
	}{{&g.grpcConn, g.listen}, {&g.rlsConn, g.rls}} {
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		*c.conn = conn
	}
	g.health = healthpb.NewHealthClient(g.grpcConn)
	g.ratelimit = rlsv3.NewRateLimitServiceClient(g.rlsConn)
	return g
}

func (g *gateway) write(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(g.file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// adminOK calls the admin API with the token and wants a 200.
func (g *gateway) adminOK(t *testing.T, method, path string) {
	t.Helper()
	code, body := g.adminCall(t, method, path)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, code, body)
	}
}

func (g *gateway) adminCall(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+g.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// refuseFraming sends one request whose framing is in doubt
// (Transfer-Encoding beside Content-Length), which the gateway refuses
// and counts in gateway_framing_refused_total.
func (g *gateway) refuseFraming(t *testing.T) {
	t.Helper()
	c, err := net.Dial("tcp", g.listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "POST /api/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 400")) {
		t.Fatalf("a request with Transfer-Encoding and Content-Length got %q", b)
	}
}

// refuseReload has floodgate refuse a configuration file, waits until
// FloodgateConfigReloadFailed's expression selects it, and restores the
// file: the reload series then hold an error, and the alert is shown to
// watch a real refusal.
func (g *gateway) refuseReload(t *testing.T, prom *prometheus) {
	t.Helper()
	g.write(t, g.config+"\nno_such_key: 1\n")
	if code, body := g.adminCall(t, "POST", "/admin/reload"); code == http.StatusOK {
		t.Fatalf("a reload of a file with an unknown key answered 200: %s", body)
	}
	var expr string
	for _, r := range readAlerts(t) {
		if r.Alert == "FloodgateConfigReloadFailed" {
			expr = r.Expr
		}
	}
	prom.waitFor(t, "FloodgateConfigReloadFailed's expression to select the refused reload", func() bool {
		n, err := prom.query(t, expr)
		return err == nil && n > 0
	})
	g.write(t, g.config)
	g.adminOK(t, "POST", "/admin/reload")
	prom.waitFor(t, "the reload to succeed again", func() bool {
		n, err := prom.query(t, "gateway_config_last_reload_success == 1")
		return err == nil && n > 0
	})
}

// outageAlerts are the alerts whose whole expression a store that does
// not answer makes true.
var outageAlerts = []string{"FloodgateStoreErrors", "FloodgateLimitsDecidedByOnError", "FloodgateFleetBreakerFallback"}

// storeOutage stops Redis (SIGSTOP: connections stay open and nothing
// answers, a stalled host) until the whole expressions of outageAlerts
// select the outage, with the labels their annotations name, then lets
// it run again and waits until the fleet breaker follows the fleet.
func (g *gateway) storeOutage(t *testing.T, prom *prometheus) {
	t.Helper()
	rules := map[string]alertRule{}
	for _, r := range readAlerts(t) {
		rules[r.Alert] = r
	}
	g.redis.Pause()
	for _, name := range outageAlerts {
		r, ok := rules[name]
		if !ok {
			t.Fatalf("alerts.yaml has no %s", name)
		}
		labels := namedLabels(alertLabel, r.Annotations["summary"], r.Annotations["description"])
		prom.waitFor(t, name+"'s expression to select the stalled Redis", func() bool {
			n, err := prom.query(t, r.Expr, labels...)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return n > 0
		})
	}
	g.redis.Resume()
	prom.waitFor(t, "the fleet breaker to follow the fleet again", func() bool {
		n, err := prom.query(t, `gateway_breaker_fleet_fallback{route="flaky"} == 0`)
		return err == nil && n > 0
	})
}

// A load runs goroutines that send requests until its context ends.
type load struct {
	wg sync.WaitGroup
	mu sync.Mutex
	n  map[string]int
}

func (l *load) count(what string) {
	l.mu.Lock()
	l.n[what]++
	l.mu.Unlock()
}

func (l *load) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[string]int, len(l.n))
	for k, v := range l.n {
		m[k] = v
	}
	return m
}

func (l *load) wait() { l.wg.Wait() }

// startLoad sends, until ctx ends: requests of four users to /api/ (over
// their limit: 200s and 429s), requests to /flaky/ (the upstream's 500s,
// then the open breaker's 503s, each recorded as an event), gRPC health
// checks through the gateway, and ShouldRateLimit calls: within and over
// the limit, and malformed ones (no descriptors: InvalidArgument).
func (g *gateway) startLoad(ctx context.Context) *load {
	l := &load{n: map[string]int{}}
	every := func(d time.Duration, f func()) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(d)
			defer tick.Stop()
			for {
				f()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	get := func(path, user string) {
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+g.listen+path, nil)
		if err != nil {
			panic(err)
		}
		req.Header.Set("X-User-Id", user)
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				l.count("error")
			}
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		l.count(fmt.Sprint(resp.StatusCode))
	}
	for _, u := range []string{"u1", "u2", "u3", "u4"} {
		every(10*time.Millisecond, func() { get("/api/items", u) })
	}
	every(10*time.Millisecond, func() { get("/flaky/items", "") })
	every(20*time.Millisecond, func() {
		_, err := g.health.Check(ctx, &healthpb.HealthCheckRequest{})
		if ctx.Err() == nil {
			l.count("grpc " + status.Code(err).String())
		}
	})
	every(50*time.Millisecond, func() {
		for _, req := range []*rlsv3.RateLimitRequest{
			{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
				{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}},
			}},
			{Domain: "edge"},
		} {
			resp, err := g.ratelimit.ShouldRateLimit(ctx, req)
			switch {
			case err != nil && ctx.Err() == nil:
				l.count("rls " + status.Code(err).String())
			case err == nil:
				l.count("rls " + resp.OverallCode.String())
			}
		}
	})
	return l
}

// A prometheus is a running Prometheus server.
type prometheus struct {
	proc *process
	url  string
	vars *strings.Replacer
}

// startPrometheus runs Prometheus scraping floodgate's admin listener each
// second and evaluating the alert rules each second, with its storage in
// a temporary directory.
func startPrometheus(t *testing.T, bin, target string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: floodgate
    static_configs:
      - targets: [%q]
`, rulesForTest(t), target)
	file := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := &prometheus{url: "http://" + addr, vars: grafanaVars(target)}
	p.proc = startProcess(t, "prometheus", bin, "--config.file="+file,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	p.waitFor(t, "Prometheus to be ready", func() bool {
		resp, err := client.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

func (p *prometheus) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitFor(t, p.proc, what, cond)
}

// apiGet gets an /api/v1 path of Prometheus and decodes its data into v.
// An answer with status error is returned as an error.
func (p *prometheus) apiGet(t *testing.T, path string, v any) error {
	t.Helper()
	resp, err := client.Get(p.url + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %d, not JSON: %v", path, resp.StatusCode, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", body.ErrorType, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

// query runs expr as an instant query and gives the number of series (or
// 1 for a scalar) with each of labels non-empty.
func (p *prometheus) query(t *testing.T, expr string, labels ...string) (int, error) {
	t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.apiGet(t, "/api/v1/query?query="+url.QueryEscape(expr), &data); err != nil {
		return 0, err
	}
	switch data.ResultType {
	case "vector", "matrix":
		var series []struct {
			Metric map[string]string `json:"metric"`
		}
		if err := json.Unmarshal(data.Result, &series); err != nil {
			t.Fatal(err)
		}
		n := 0
	series:
		for _, s := range series {
			for _, l := range labels {
				if s.Metric[l] == "" {
					continue series
				}
			}
			n++
		}
		return n, nil
	default:
		return 1, nil
	}
}

// waitQueries asks Prometheus each query, with the dashboard's variables
// replaced, until every one returns series. A query Prometheus refuses
// fails the test at once; one still empty at the deadline is reported
// with where it comes from.
func (p *prometheus) waitQueries(t *testing.T, qs []query) {
	t.Helper()
	pending := map[int]string{}
	for i := range qs {
		qs[i].expr = p.vars.Replace(qs[i].expr)
		if v := unknownVar.FindString(qs[i].expr); v != "" {
			t.Fatalf("%s: %s is not a variable the test gives a value: %s", qs[i].from, v, qs[i].expr)
		}
		pending[i] = qs[i].expr
	}
	deadline := time.Now().Add(waitTimeout)
	for len(pending) > 0 && time.Now().Before(deadline) && !p.proc.exited() {
		for i := range pending {
			n, err := p.query(t, qs[i].expr, qs[i].labels...)
			if err != nil {
				t.Fatalf("%s: Prometheus refuses %s: %v", qs[i].from, qs[i].expr, err)
			}
			if n > 0 {
				delete(pending, i)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	for i := range qs {
		if _, ok := pending[i]; ok {
			t.Errorf("%s: no series with %v after %v: %s", qs[i].from, qs[i].labels, waitTimeout, qs[i].expr)
		}
	}
	t.Logf("%d queries returned series", len(qs)-len(pending))
}

// waitRulesHealthy waits until Prometheus has evaluated every rule of
// alerts.yaml, and fails if one's evaluation failed.
func (p *prometheus) waitRulesHealthy(t *testing.T) {
	t.Helper()
	want := map[string]bool{}
	for _, r := range readAlerts(t) {
		want[r.Alert] = true
	}
	p.waitFor(t, "every alert rule to be evaluated", func() bool {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := p.apiGet(t, "/api/v1/rules", &data); err != nil {
			t.Fatal(err)
		}
		ok := 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				if r.Health == "err" {
					t.Fatalf("rule %s: %s", r.Name, r.LastError)
				}
				if want[r.Name] && r.Health == "ok" {
					ok++
				}
			}
		}
		return ok == len(want)
	})
}

// alert gives the state (pending, firing) of the alert name for route,
// or "" when there is none.
func (p *prometheus) alert(t *testing.T, name, route string) string {
	t.Helper()
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.apiGet(t, "/api/v1/alerts", &data); err != nil {
		t.Fatal(err)
	}
	for _, a := range data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["route"] == route {
			return a.State
		}
	}
	return ""
}

func TestWithoutThreshold(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string // nil: refused
	}{
		{`up{job="floodgate"} == 0`, []string{`up{job="floodgate"}`}},
		{`a / b > 0.05`, []string{`a / b`}},
		{`max by (job) (v) != min by (job) (v)`, []string{`max by (job) (v)`}},
		{`sum(rate(x{code=~"5..|>"}[5m])) >= 1`, []string{`sum(rate(x{code=~"5..|>"}[5m]))`}},
		{`x{a!="b"}`, []string{`x{a!="b"}`}},
		{"increase(x[5m]) > 0\nor\nsum(y unless y offset 5m) > 0", []string{`increase(x[5m])`, `sum(y unless y offset 5m)`}},
		{`sum by (color) (x) < 1`, []string{`sum by (color) (x)`}},
		{`x > 1 and y`, nil},
		{`x unless y`, nil},
		{`x > 1 < 2`, nil},
	} {
		got, err := withoutThreshold(c.expr)
		if c.want == nil {
			if err == nil {
				t.Errorf("%q: got %q, want it refused", c.expr, got)
			}
			continue
		}
		if err != nil || strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("%q: got %q, %v; want %q", c.expr, got, err, c.want)
		}
	}
}
