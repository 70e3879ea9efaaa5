// Package deploy_test checks the deployment files users take as they
// are: the Prometheus alert rules and scrape config with promtool, and
// the PromQL of every query of the Grafana dashboard.
package deploy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-gw/floodgate/internal/needs"
)

func promtool(t *testing.T) string {
	t.Helper()
	return needs.Program(t, "prometheus", "promtool")
}

func TestAlertRules(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "rules", "prometheus/alerts.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			seen[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s needs a severity label and summary and description annotations", r.Alert)
			}
		}
	}
	for _, want := range []string{
		"FloodgateCircuitBreakerOpen", "FloodgateStoreErrors", "FloodgateLimitsDecidedByOnError",
		"FloodgateConfigReloadFailed", "FloodgateEventsLost", "FloodgateEventsSpoolBacklog", "FloodgateRLSErrors",
	} {
		if !seen[want] {
			t.Errorf("alerts.yaml has no %s", want)
		}
	}
}

func TestScrapeConfig(t *testing.T) {
	out, err := exec.Command(promtool(t), "check", "config", "prometheus/prometheus.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// TestDashboardQueries writes every query of the dashboard, with its
// template variables given values as Grafana would, as a recording rule,
// so that promtool parses each one's PromQL.
func TestDashboardQueries(t *testing.T) {
	tool := promtool(t)
	d := readDashboard(t)
	// ${1} in label_replace is no variable, and Grafana leaves it alone.
	r := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h",
		"$instance", ".*", "$route", ".*", "$job", "floodgate")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					rules = append(rules, rule{Record: "dashboard:query", Expr: r.Replace(tg.Expr)})
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
		if json.Unmarshal(v.Query, &q) == nil && strings.HasPrefix(q.Query, "label_values(") {
			// label_values(SELECTOR, LABEL): the selector is PromQL.
			sel := strings.TrimPrefix(q.Query, "label_values(")
			if i := strings.LastIndex(sel, ","); i > 0 {
				rules = append(rules, rule{Record: "dashboard:variable", Expr: r.Replace(sel[:i])})
			}
		}
	}
	if len(rules) < 30 {
		t.Fatalf("found %d queries in the dashboard; the walk of its panels is wrong", len(rules))
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(tool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("a dashboard query is not valid PromQL: %v\n%s", err, msg)
	}
}

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/floodgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("grafana/floodgate.json is not JSON: %v", err)
	}
	return d
}

type panel struct {
	Title   string `json:"title"`
	Panels  []panel
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}
