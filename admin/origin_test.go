package admin

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A page of another site cannot make the operator's browser change
// anything on a listener without a token: a browser marks such calls
// (Sec-Fetch-Site, Origin), and they are refused; the dashboard's own
// calls, curl's and floodgate ctl's are not.
func TestCrossSiteCallsRefused(t *testing.T) {
	_, h := newTest(t, "")
	for _, c := range []struct {
		name   string
		header []string
		want   int
	}{
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site"}, 403},
		{"same-site, another origin", []string{"Sec-Fetch-Site", "same-site"}, 403},
		{"a form of another origin", []string{"Origin", "http://evil.example"}, 403},
		{"the dashboard", []string{"Sec-Fetch-Site", "same-origin"}, 200},
		{"an old browser on the dashboard", []string{"Origin", "http://127.0.0.1:9090"}, 200},
		{"curl or floodgate ctl", nil, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := do(t, h, "POST", "/admin/reload", c.header...)
			if r.code != c.want {
				t.Fatalf("POST /admin/reload: %d %s, want %d", r.code, r.body, c.want)
			}
			if c.want == 403 && !strings.Contains(r.body, `"code":"cross_origin"`) {
				t.Errorf("refusal %s, want code cross_origin", r.body)
			}
		})
	}
	// Reading is not changing: a cross-site GET is the browser's to
	// refuse to show, by the same-origin policy.
	if r := do(t, h, "GET", "/admin/breakers", "Sec-Fetch-Site", "cross-site"); r.code != 200 {
		t.Errorf("cross-site GET /admin/breakers: %d, want 200", r.code)
	}
}

// A loopback listener answers only the names of loopback: a page whose
// own name an attacker points at 127.0.0.1 (DNS rebinding) is its own
// origin to the browser, and would read the dashboard and, without a
// token, the admin API.
func TestLoopbackListenerChecksHost(t *testing.T) {
	_, h := newTest(t, "")
	for _, host := range []string{"evil.example:9090", "evil.example", "127.0.0.1.evil.example:9090", "10.0.0.5:9090"} {
		for _, path := range []string{"/", "/dashboard.json", "/metrics", "/admin/config", "/static/dash.js"} {
			if r := do(t, h, "GET", path, "Host", host); r.code != http.StatusMisdirectedRequest {
				t.Errorf("GET %s with Host %s: %d, want 421", path, host, r.code)
			}
		}
		// Probes need no origin to protect.
		if r := do(t, h, "GET", "/healthz", "Host", host); r.code != 200 {
			t.Errorf("GET /healthz with Host %s: %d, want 200", host, r.code)
		}
	}
	for _, host := range []string{"127.0.0.1:9090", "localhost:9090", "LOCALHOST", "[::1]:9090", "127.0.0.2:9090"} {
		if r := do(t, h, "GET", "/dashboard.json", "Host", host); r.code != 200 {
			t.Errorf("GET /dashboard.json with Host %s: %d, want 200", host, r.code)
		}
	}

	// A listener on other addresses is reached by whatever names the
	// deployment gives it.
	b := &fakeBackend{}
	cfg := parseConfig(t, "")
	cfg.Admin.Listen = ":9090"
	b.cfg.Store(cfg)
	open := NewHandler(b, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	defer open.Close()
	if r := do(t, open, "GET", "/dashboard.json", "Host", "floodgate.internal:9090"); r.code != 200 {
		t.Errorf("listener on :9090, Host floodgate.internal: %d, want 200", r.code)
	}
}
