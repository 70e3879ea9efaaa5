package admin

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-gw/floodgate/config"
	"github.com/floodgate-gw/floodgate/gateway"
)

// gatewayBackend is a real gateway as the admin API's backend.
type gatewayBackend struct{ *gateway.Gateway }

func (gatewayBackend) Reload() error { return nil }

var _ Overrider = gatewayBackend{}

func newGatewayTest(t *testing.T) (*gateway.Gateway, *strings.Builder, func(method, target, body string, header ...string) response) {
	t.Helper()
	gw, err := gateway.New(parseConfig(t, "tok"), gateway.Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	var logs strings.Builder
	h := NewHandler(gatewayBackend{gw}, prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(&logs, nil)))
	return gw, &logs, func(method, target, body string, header ...string) response {
		r := httptest.NewRequest(method, "http://127.0.0.1:9090"+target, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return response{w.Code, w.Result().Header, w.Body.String()}
	}
}

// The override endpoints need the token, take PUT and DELETE on a limit's
// path and GET on the list, and answer with the override as listed.
func TestOverrideEndpoints(t *testing.T) {
	gw, logs, call := newGatewayTest(t)
	auth := []string{"Authorization", "Bearer tok"}
	if r := call("PUT", "/admin/overrides/api/user", `{"rate":"5/10s"}`); r.code != 401 {
		t.Fatalf("without the token: %d", r.code)
	}
	if r := call("GET", "/admin/overrides", ""); r.code != 401 {
		t.Fatalf("list without the token: %d", r.code)
	}
	if r := call("POST", "/admin/overrides/api/user", `{"rate":"5/10s"}`, auth...); r.code != 405 || r.header.Get("Allow") != "DELETE, GET, HEAD, PUT" {
		t.Fatalf("POST: %d, Allow %q", r.code, r.header.Get("Allow"))
	}
	r := call("PUT", "/admin/overrides/api/user", `{"rate":"5/10s","ttl":"30m","reason":"sale","by":"bob"}`, auth...)
	var st struct {
		Route, Limit, By, Reason string
		Override                 map[string]any
		File                     map[string]any
		TTLLeft                  float64 `json:"ttl_left"`
		Applied                  bool
	}
	if err := json.Unmarshal([]byte(r.body), &st); err != nil || r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	if st.Route != "api" || st.Limit != "user" || st.By != "bob" || st.Override["rate"] != "5/10s" || st.File["rate"] != "1/10s" ||
		st.TTLLeft < 1799 || st.TTLLeft > 1800 || !st.Applied {
		t.Fatalf("PUT answered %s", r.body)
	}
	if !strings.Contains(logs.String(), `"msg":"runtime override set","route":"api","limit":"user","scope":"instance","by":"bob","version":1,"before":"rate=1/10s","after":"rate=5/10s","reason":"sale","ttl":"30m0s"`) {
		t.Fatalf("log:\n%s", logs)
	}
	if gw.Overrides().Overrides[0].Change.Rate != "5/10s" {
		t.Fatal("not in force")
	}
	cfg := call("GET", "/admin/config", "", auth...)
	if !strings.Contains(cfg.body, `"rate":"1/10s"`) || !strings.Contains(cfg.body, `"runtime_overrides":{"scope":"instance"`) {
		t.Fatalf("GET /admin/config: %s", cfg.body)
	}
	d := call("GET", "/dashboard.json", "")
	if !strings.Contains(d.body, `"overrides":[{"route":"api","limit":"user","override":"rate=5/10s","file":"rate=1/10s"`) || strings.Contains(d.body, "bob") {
		t.Fatalf("dashboard: %s", d.body)
	}
	// A body that is not JSON, of the wrong type, or too deep in the path.
	for _, tc := range []struct{ target, body, want string }{
		{"/admin/overrides/api/user", `rate=5/10s`, `"code":"bad_request"`},
		{"/admin/overrides/api/user", `{"shadow":"yes"}`, `"field":"shadow"`},
		{"/admin/overrides/api/user", `{"burst":1.5}`, `"field":"burst"`},
		{"/admin/overrides/api/user", `{"ttl":"100000000h"}`, `"field":"ttl"`},
		{"/admin/overrides/api/user", `{"reason":"` + strings.Repeat("r", 201) + `","shadow":true}`, `"field":"reason"`},
		{"/admin/overrides/api/user/x", `{"shadow":true}`, `"code":"not_found"`},
		{"/admin/overrides//user", `{"shadow":true}`, `"code":"not_found"`},
		{"/admin/overrides/api%2Fuser", `{"shadow":true}`, `"code":"not_found"`},
		{"/admin/overrides/api/us%2Fer", `{"shadow":true}`, `"code":"not_found"`},
		{"/admin/overrides/api/user?scope=fleet", `{"shadow":true}`, `"parameter \"scope\": with the memory store`},
		{"/admin/overrides/api/user?scope=all", `{"shadow":true}`, `"parameter \"scope\" is \"all\"`},
		{"/admin/overrides/api/user", `[]`, `"message":"the body is a JSON array: want an object`},
		{"/admin/overrides/api/user", `{"rate":"5/s\n"}`, `"field":"rate"`},
	} {
		if r := call("PUT", tc.target, tc.body, auth...); r.code/100 != 4 || !strings.Contains(r.body, tc.want) {
			t.Errorf("PUT %s %s: %d %s; want %s", tc.target, tc.body, r.code, r.body, tc.want)
		}
	}
	if r := call("GET", "/admin/overrides/api/user", "", auth...); r.code != 200 || !strings.Contains(r.body, `"override":{"rate":"5/10s"}`) {
		t.Fatalf("GET one: %d %s", r.code, r.body)
	}
	// A second PUT replaces the override as a whole, and says what it
	// replaced.
	if r := call("PUT", "/admin/overrides/api/user?scope=instance", `{"shadow":true}`, auth...); r.code != 200 ||
		!strings.Contains(r.body, `"override":{"shadow":true}`) || !strings.Contains(r.body, `"replaced":{"route":"api","limit":"user","override":{"rate":"5/10s"}`) {
		t.Fatalf("a second PUT: %d %s", r.code, r.body)
	}
	if !strings.Contains(logs.String(), `"version":2,"before":"rate=5/10s","after":"shadow=true"`) {
		t.Fatalf("the second PUT's line:\n%s", logs)
	}
	if r := call("DELETE", "/admin/overrides/api/nope", "", auth...); r.code != 404 || !strings.Contains(r.body, `"code":"limit_not_found"`) {
		t.Fatalf("DELETE of no limit: %d %s", r.code, r.body)
	}
	if r := call("DELETE", "/admin/overrides/api/user", "", auth...); r.code != 200 || !strings.Contains(r.body, `"status":"removed"`) {
		t.Fatalf("DELETE: %d %s", r.code, r.body)
	}
	if r := call("DELETE", "/admin/overrides/api/user", "", auth...); r.code != 404 || !strings.Contains(r.body, `"code":"override_not_found"`) {
		t.Fatalf("DELETE again: %d %s", r.code, r.body)
	}
	if r := call("GET", "/admin/overrides", "", auth...); r.code != 200 || !strings.Contains(r.body, `"overrides":[]`) {
		t.Fatalf("list: %d %s", r.code, r.body)
	}
}

// A named token says who acted, in the logs and as the override's by,
// whatever the body says; a token that is not one of them is refused.
func TestNamedTokens(t *testing.T) {
	cfg, err := config.Parse("floodgate.yaml", []byte(strings.Replace(fmt.Sprintf(testConfig, "tok"),
		"  token: tok\n", "  token: tok\n  tokens: [{name: alice, token: alice-token}, {name: ci, token: ci-token}]\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(cfg, gateway.Options{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	var logs strings.Builder
	h := NewHandler(gatewayBackend{gw}, prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(&logs, nil)))
	call := func(token, method, target, body string) response {
		r := httptest.NewRequest(method, "http://127.0.0.1:9090"+target, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return response{w.Code, w.Result().Header, w.Body.String()}
	}
	if r := call("alice-token", "PUT", "/admin/overrides/api/user", `{"shadow":true,"by":"mallory"}`); r.code != 200 || !strings.Contains(r.body, `"by":"alice"`) {
		t.Fatalf("alice's PUT: %d %s", r.code, r.body)
	}
	if r := call("tok", "PUT", "/admin/overrides/api/user", `{"shadow":false,"by":"bob"}`); r.code != 200 || !strings.Contains(r.body, `"by":"bob"`) {
		t.Fatalf("admin.token's PUT with by: %d %s", r.code, r.body)
	}
	if r := call("tok", "PUT", "/admin/overrides/api/user", `{"shadow":false,"by":"alice"}`); r.code != 400 || !strings.Contains(r.body, `"field":"by"`) {
		t.Fatalf("admin.token acting as alice: %d %s", r.code, r.body)
	}
	if r := call("ci-token", "DELETE", "/admin/limits?route=api&limit=user&key=u1", ""); r.code != 200 {
		t.Fatalf("ci's reset: %d %s", r.code, r.body)
	}
	for _, want := range []string{`"msg":"runtime override set","route":"api","limit":"user","scope":"instance","by":"alice"`,
		`"msg":"limit key reset","route":"api","limit":"user","key":["u1"],"fallback":false,"scope":"instance","by":"ci"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs.String())
		}
	}
	for _, bad := range []string{"alice-tokenx", "ALICE-TOKEN", "", "ci"} {
		if r := call(bad, "GET", "/admin/overrides", ""); r.code != 401 {
			t.Errorf("token %q: %d", bad, r.code)
		}
	}
}
