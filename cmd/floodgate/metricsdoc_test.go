package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3ext "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
	"github.com/floodgate-gw/floodgate/internal/rlsserver"
)

// metricsDoc is the reference page of the series /metrics exports.
const metricsDoc = "../../docs/metrics.md"

// metricsConfig turns on every part of serve that registers series: the
// gateway with a limited route and a breaker, an events sink, and the
// rate-limit service.
const metricsConfig = `
server:
  listen: "{{LISTEN}}"
admin:
  listen: "{{ADMIN}}"
  token: {{TOKEN}}
rls:
  listen: "{{RLS}}"
routes:
  - id: api
    match: {path: /api/**}
    upstream: {targets: ["{{UPSTREAM}}"]}
    breaker: {enabled: true}
    limits:
      - name: user
        key: [header:X-User-Id]
        rate: 1/10s
events:
  sink: file
  file: {path: "{{EVENTS}}"}
  audit: all
`

// The Go and process collectors' series are documented as one line each,
// by these prefixes.
var runtimePrefixes = []string{"go_", "process_"}

// A documented series: a row of a table of docs/metrics.md.
type docRow struct {
	typ    string
	labels string // the labels cell
}

var docRowRE = regexp.MustCompile("^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\| (counter|gauge|histogram|summary) \\| ([^|]*) \\|")

// readMetricsDoc returns the page's text and its rows by series name.
func readMetricsDoc(t *testing.T) (string, map[string]docRow) {
	t.Helper()
	data, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]docRow{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		m := docRowRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("%s lists %s twice", metricsDoc, m[1])
		}
		rows[m[1]] = docRow{typ: m[2], labels: m[3]}
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no rows of the form | `name` | type | labels | ... |", metricsDoc)
	}
	return string(data), rows
}

// describing is a Registerer that keeps the name and variable labels of
// every descriptor of what it registers. A Registry's Gather leaves out a
// vector without children; the descriptors are every series a collector
// can ever export.
type describing struct {
	reg *prometheus.Registry

	mu     sync.Mutex
	descs  map[string][]string // name: variable labels
	errors []string            // descriptors that did not parse
}

func newDescribing() *describing {
	return &describing{reg: prometheus.NewRegistry(), descs: map[string][]string{}}
}

// A Desc shows its name and labels only in its String:
// Desc{fqName: "NAME", help: "...", ..., variableLabels: {a,b}}.
var (
	descNameRE   = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	descLabelsRE = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

func (d *describing) Register(c prometheus.Collector) error {
	if err := d.reg.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	for desc := range ch {
		s := desc.String()
		name, labels := descNameRE.FindStringSubmatch(s), descLabelsRE.FindStringSubmatch(s)
		if name == nil || labels == nil {
			d.errors = append(d.errors, s)
			continue
		}
		var ls []string
		for _, l := range strings.Split(labels[1], ",") {
			if l != "" {
				ls = append(ls, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
			}
		}
		d.descs[name[1]] = ls
	}
	return nil
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

func (d *describing) Unregister(c prometheus.Collector) bool { return d.reg.Unregister(c) }

// TestMetricsDocumented fails when floodgate serve registers a series that
// docs/metrics.md does not list with its type and labels, or when the page
// lists one that nothing registers any more.
//
// The names come two ways. The gateway and the rate-limit service are
// built as serve builds them, with a Registerer that keeps the descriptor
// of everything registered, so that a vector no request has touched is
// seen too. And a real floodgate serve is scraped after a few requests, so
// that whatever serve registers itself (the Go and process collectors, or
// anything added later) is seen too, with its type.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	text, rows := readMetricsDoc(t)
	missingPrefix := map[string]bool{} // reported once each
	documented := func(name string) bool {
		if _, ok := rows[name]; ok {
			return true
		}
		for _, p := range runtimePrefixes {
			if strings.HasPrefix(name, p) {
				if strings.Contains(text, "`"+p+"*`") {
					return true
				}
				if !missingPrefix[p] {
					missingPrefix[p] = true
					t.Errorf("%s is on /metrics, and %s does not mention `%s*`", name, metricsDoc, p)
				}
				return true
			}
		}
		return false
	}
	registered := map[string]bool{}

	// The descriptors of everything the gateway and the rate-limit service
	// register.
	f := newFixture(t, nil)
	yaml := func(rlsAddr, eventsFile string) string {
		return strings.NewReplacer("{{RLS}}", rlsAddr, "{{EVENTS}}", eventsFile).Replace(f.yaml(metricsConfig))
	}
	cfg, err := config.Parse("floodgate.yaml", []byte(yaml(freeAddr(t), filepath.Join(t.TempDir(), "events.jsonl"))))
	if err != nil {
		t.Fatal(err)
	}
	reg := newDescribing()
	log := slog.New(slog.DiscardHandler)
	gw, err := gateway.New(cfg, gateway.Options{Logger: log, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rlsSrv, err := rlsserver.Start(cfg, gw, reg, log, false)
	if err != nil {
		gw.Close()
		t.Fatal(err)
	}
	rlsSrv.Stop(0)
	gw.Close()
	if len(reg.errors) > 0 {
		t.Fatalf("descriptors whose name and labels cannot be read:\n%s", strings.Join(reg.errors, "\n"))
	}
	// The config must keep building every part, or a part's series would
	// go unchecked.
	for _, name := range []string{"gateway_http_requests_total", "gateway_events_total", "gateway_rls_requests_total"} {
		if _, ok := reg.descs[name]; !ok {
			t.Fatalf("building the gateway and the rate-limit service registered no %s: the test no longer sees every part", name)
		}
	}
	for _, name := range sortedKeys(reg.descs) {
		labels := reg.descs[name]
		registered[name] = true
		row, ok := rows[name]
		if !ok {
			if !documented(name) {
				t.Errorf("%s is registered but not documented in %s", name, metricsDoc)
			}
			continue
		}
		for _, l := range labels {
			if !strings.Contains(row.labels, "`"+l+"`") {
				t.Errorf("%s has the label %s, which %s does not give", name, l, metricsDoc)
			}
		}
		if len(labels) == 0 && strings.TrimSpace(row.labels) != "none" {
			t.Errorf("%s has no labels; %s gives %q", name, metricsDoc, row.labels)
		}
	}

	// What a real floodgate serve exports, after it answered, rejected,
	// recorded, refused a framing, decided an rls call and opened its
	// breaker.
	rlsAddr := freeAddr(t)
	f.write(yaml(rlsAddr, filepath.Join(f.dir, "events.jsonl")))
	p := f.serve()
	if r := p.get("/api/a", "X-User-Id", "u1"); r.code != 200 {
		t.Fatalf("first request: %d %s", r.code, r.body)
	}
	if r := p.get("/api/a", "X-User-Id", "u1"); r.code != 429 {
		t.Fatalf("second request: %d %s, want 429", r.code, r.body)
	}
	refuseFraming(t, f.listen)
	askRLS(t, rlsAddr)
	if r := p.admin("POST", "/admin/breakers/api?state=open"); r.code != 200 {
		t.Fatalf("forcing the breaker open: %d %s", r.code, r.body)
	}
	types := map[string]string{}
	typeRE := regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`)
	p.waitFor("the scrape to show the events and the framing refusal", func() bool {
		body := request(t, "GET", "http://"+f.admin+"/metrics").body
		clear(types)
		for _, m := range typeRE.FindAllStringSubmatch(body, -1) {
			types[m[1]] = m[2]
		}
		return types["gateway_events_total"] != "" && types["gateway_framing_refused_total"] != ""
	})
	for _, name := range []string{"gateway_rls_requests_total", "gateway_circuit_breaker_transitions_total", "go_goroutines"} {
		if types[name] == "" {
			t.Errorf("the scrape has no %s", name)
		}
	}
	for _, name := range sortedKeys(types) {
		typ := types[name]
		registered[name] = true
		row, ok := rows[name]
		switch {
		case !ok && !documented(name):
			t.Errorf("%s is on /metrics but not documented in %s", name, metricsDoc)
		case ok && row.typ != typ:
			t.Errorf("%s is a %s; %s says %s", name, typ, metricsDoc, row.typ)
		}
	}

	// Nothing documented that is not registered.
	for _, name := range sortedKeys(rows) {
		if !registered[name] {
			t.Errorf("%s documents %s, which nothing registers", metricsDoc, name)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// refuseFraming sends a request with an obs-folded header, which the
// gateway refuses and closes the connection after.
func refuseFraming(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(waitTimeout))
	fmt.Fprint(c, "GET /api/a HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 400 ") {
		t.Fatalf("an obs-folded header: %q, %v; want 400", line, err)
	}
}

// askRLS makes one ShouldRateLimit call.
func askRLS(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlsv3ext.RateLimitDescriptor{
		{Entries: []*rlsv3ext.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "a"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
}
