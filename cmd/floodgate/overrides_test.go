package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// adminBody sends a request with a body to p's admin listener, with the
// token.
func (p *proc) adminBody(method, path, body string) reply {
	p.t.Helper()
	req, err := http.NewRequest(method, "http://"+p.f.admin+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := client.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// ctlOverrides runs "floodgate ctl overrides SUB" against p.
func (p *proc) ctlOverrides(sub string, args ...string) (stdout, stderr string, code int) {
	p.t.Helper()
	args = append([]string{"ctl", "overrides", sub, "--admin", "http://" + p.f.admin, "--token-env", "FG_TEST_TOKEN"}, args...)
	return floodgateEnv(p.t, []string{"FG_TEST_TOKEN=" + testToken}, args...)
}

// overridesOf is GET /admin/overrides of p.
func (p *proc) overridesOf() (version int64, rates map[string]string) {
	p.t.Helper()
	r := p.admin("GET", "/admin/overrides")
	var o struct {
		Version   int64
		Overrides []struct {
			Route, Limit string
			Override     struct{ Rate string }
		}
	}
	if r.code != http.StatusOK || json.Unmarshal([]byte(r.body), &o) != nil {
		p.t.Fatalf("GET /admin/overrides: %d %s", r.code, r.body)
	}
	rates = map[string]string{}
	for _, ov := range o.Overrides {
		rates[ov.Route+"/"+ov.Limit] = ov.Override.Rate
	}
	return o.Version, rates
}

// An override set with ctl on one of three instances is in force on all;
// an instance restarted comes back with it; with Redis stopped a change
// fails and none is half made; removing it reaches all.
func TestFleetOverrides(t *testing.T) {
	t.Parallel()
	ps, srv := fleetOn(t, 3)
	a := ps[0]
	alice := func(p *proc) int { return p.get("/api/x", "X-User-Id", "alice").code }
	if alice(a) != http.StatusOK || alice(ps[1]) != http.StatusTooManyRequests {
		t.Fatal("the file's 1/1h does not hold")
	}
	out, errOut, code := a.ctlOverrides("set", "--route", "api", "--limit", "user", "--rate", "3/1h", "--reason", "sale", "--by", "alice-op")
	if code != exitOK || !strings.Contains(out, "override api/user: rate 3/h (file: rate 1/h)") {
		t.Fatalf("ctl overrides set: exit %d\n%s%s", code, out, errOut)
	}
	version, _ := a.overridesOf()
	for _, p := range ps {
		p.waitFor("the override in force", func() bool {
			v, rates := p.overridesOf()
			return v == version && rates["api/user"] == "3/h"
		})
	}
	// alice used 1 of 3: one more each on b and c, none after.
	if alice(ps[1]) != http.StatusOK || alice(ps[2]) != http.StatusOK || alice(a) != http.StatusTooManyRequests {
		t.Fatal("the fleet did not admit exactly two more of alice under 3/1h")
	}
	ps[1].waitLog(`"msg":"runtime override in force","route":"api","limit":"user","by":"alice-op","version":\d+,"rate":"3/h","reason":"sale"`)
	a.waitLog(`"msg":"runtime override set","route":"api","limit":"user","scope":"fleet","by":"alice-op","version":\d+,"before":"rate=1/h","after":"rate=3/h","reason":"sale"`)

	cfg := a.admin("GET", "/admin/config").json(t)
	ro, _ := json.Marshal(cfg["runtime_overrides"])
	if !strings.Contains(string(ro), `"override":{"rate":"3/h"}`) || !strings.Contains(string(ro), `"file":{"rate":"1/h"}`) {
		t.Fatalf("GET /admin/config runtime_overrides: %s", ro)
	}
	if !strings.Contains(a.admin("GET", "/admin/config").body, `"rate":"1/h"`) {
		t.Fatal("GET /admin/config no longer shows the file's rate")
	}
	out, _, code = a.ctlOverrides("list")
	if code != exitOK || !regexpMatch(`api\s+user\s+rate 3/h\s+rate 1/h\s+-\s+alice-op\s+sale`, out) {
		t.Fatalf("ctl overrides list: exit %d\n%s", code, out)
	}

	// Restarted, an instance comes back with the override before it
	// serves.
	c := ps[2]
	c.signal(syscall.SIGTERM)
	if code := c.wait(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	c = c.f.serve()
	if _, rates := c.overridesOf(); rates["api/user"] != "3/h" {
		t.Fatalf("restarted, the instance holds %v", rates)
	}
	ps[2] = c

	// Bad input, each with a clear answer; nothing changes.
	for _, tc := range []struct {
		path, body string
		code       int
		field      string
	}{
		{"/admin/overrides/api/user", `{"rate": 0}`, 400, "rate"},
		{"/admin/overrides/api/user", `{"rate": "0/s"}`, 400, "rate"},
		{"/admin/overrides/api/user", `{"rate": "fast"}`, 400, "rate"},
		{"/admin/overrides/api/user", `{"ttl": "500ms", "shadow": true}`, 400, "ttl"},
		{"/admin/overrides/api/user", `{"nope": 1}`, 400, "nope"},
		{"/admin/overrides/api/user", `{}`, 400, "override"},
		{"/admin/overrides/api/user", `[1]`, 400, ""},
		{"/admin/overrides/api/user", `{"shadow": true} {"shadow": false}`, 400, ""},
		{"/admin/overrides/api/user", `{"burst": 5}`, 400, "burst"},
		{"/admin/overrides/api/user", `{"shadow": true, "` + strings.Repeat("x", 1<<20) + `": 1}`, 413, ""},
		{"/admin/overrides/api/nope", `{"shadow": true}`, 404, ""},
		{"/admin/overrides/nope/user", `{"shadow": true}`, 404, ""},
		{"/admin/overrides/api", `{"shadow": true}`, 404, ""},
	} {
		r := a.adminBody("PUT", tc.path, tc.body)
		var e struct{ Field, Message string }
		json.Unmarshal([]byte(r.body), &e)
		if r.code != tc.code || e.Field != tc.field || e.Message == "" {
			t.Errorf("PUT %s %.60s: %d %s; want %d with field %q", tc.path, tc.body, r.code, r.body, tc.code, tc.field)
		}
	}
	if r := a.admin("DELETE", "/admin/overrides/api/nope"); r.code != 404 {
		t.Errorf("DELETE of an override not set: %d %s", r.code, r.body)
	}
	if v, _ := a.overridesOf(); v != version {
		t.Fatalf("bad input moved the version from %d to %d", version, v)
	}

	out, errOut, code = floodgateEnv(t, []string{"FG_TEST_TOKEN=" + testToken}, "ctl", "fleet", "--admin", "http://"+a.f.admin, "--token-env", "FG_TEST_TOKEN")
	// Each instance's file names its own listeners, so their configs
	// differ, and ctl fleet says so with its exit code.
	if code != exitFailure || !strings.Contains(out, "agree: config no, version yes, overrides yes") {
		t.Fatalf("ctl fleet: exit %d\n%s%s", code, out, errOut)
	}

	srv.Stop()
	_, errOut, code = a.ctlOverrides("set", "--route", "api", "--limit", "user", "--rate", "9/1h")
	if code != exitFailure || !strings.Contains(errOut, "503 store_unavailable") {
		t.Fatalf("ctl overrides set with Redis stopped: exit %d\n%s", code, errOut)
	}
	for _, p := range ps {
		if _, rates := p.overridesOf(); rates["api/user"] != "3/h" {
			t.Fatalf("a failed change changed an instance: %v", rates)
		}
	}
	srv.Restart()
	// Redis came back empty: the fleet's set is another, with nothing.
	for _, p := range ps {
		p.waitFor("the empty set of the restarted Redis", func() bool {
			_, rates := p.overridesOf()
			return len(rates) == 0
		})
	}
	if _, _, code := a.ctlOverrides("set", "--route", "global", "--limit", "global", "--rate", "500/1h", "--ttl", "1h"); code != exitOK {
		t.Fatalf("set after the restart: exit %d", code)
	}
	out, errOut, code = ps[1].ctlOverrides("rm", "--route", "global", "--limit", "global")
	if code != exitOK || !strings.Contains(out, "override global/global removed") {
		t.Fatalf("ctl overrides rm: exit %d\n%s%s", code, out, errOut)
	}
	for _, p := range ps {
		p.waitFor("no override", func() bool {
			_, rates := p.overridesOf()
			return len(rates) == 0
		})
	}
}

// TestOverridePropagation measures how long an override set on one of
// three instances takes to be in force on the other two: 100 changes,
// each timed from the PUT's answer until both report its version. It is
// a measurement, run by bench/propagation.sh:
//
//	FLOODGATE_PROPAGATION=1 go test -run OverridePropagation -v ./cmd/floodgate/
func TestOverridePropagation(t *testing.T) {
	if os.Getenv("FLOODGATE_PROPAGATION") == "" {
		t.Skip("a measurement: set FLOODGATE_PROPAGATION=1")
	}
	ps, _ := fleetOn(t, 3)
	var took []time.Duration
	for i := range 100 {
		r := ps[0].adminBody("PUT", "/admin/overrides/api/user", fmt.Sprintf(`{"rate": "%d/1h"}`, 10+i))
		if r.code != http.StatusOK {
			t.Fatalf("PUT: %d %s", r.code, r.body)
		}
		start := time.Now()
		var st struct{ Version int64 }
		want, _ := ps[0].overridesOf()
		_ = json.Unmarshal([]byte(r.body), &st)
		for _, p := range ps[1:] {
			for {
				if v, _ := p.overridesOf(); v >= want {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		took = append(took, time.Since(start))
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(took)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	t.Logf("propagation to 2 instances over %d changes: p50 %s, p99 %s, max %s", len(took), ms(took[(len(took)+1)/2-1]), ms(took[(len(took)*99+99)/100-1]), ms(took[len(took)-1]))
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// With the memory store an override is the one instance's, and with
// events.audit each change is an admin_action event saying who, what,
// before and after.
func TestOverrideAudit(t *testing.T) {
	t.Parallel()
	p, events := ctlServe(t)
	out, errOut, code := p.ctlOverrides("set", "--route", "api", "--limit", "user", "--shadow=true", "--ttl", "10m", "--reason", "noisy")
	if code != exitOK || !strings.Contains(out, "override api/user: shadow true (file: shadow false), for 10m0s") {
		t.Fatalf("ctl overrides set: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code := p.ctlOverrides("rm", "--route", "api", "--limit", "user"); code != exitOK {
		t.Fatalf("ctl overrides rm: exit %d", code)
	}
	var evs []map[string]any
	p.waitFor("two admin_action events", func() bool {
		evs = adminEvents(t, events)
		return len(evs) >= 2
	})
	want := []map[string]any{
		{"action": "override", "by": "admin", "scope": "instance", "route": "api", "limit": "user",
			"before": "shadow=false", "after": "shadow=true", "ttl": 600.0, "reason": "noisy"},
		{"action": "override_removed", "by": "admin", "scope": "instance", "route": "api", "limit": "user", "before": "shadow=true"},
	}
	for i, w := range want {
		for k, v := range w {
			if fmt.Sprint(evs[i][k]) != fmt.Sprint(v) {
				t.Errorf("event %d: %s = %v, want %v; %v", i, k, evs[i][k], v, evs[i])
			}
		}
	}
	if _, _, code := p.ctlOverrides("set", "--route", "api", "--limit", "user"); code != exitUsage {
		t.Errorf("set with nothing to set: exit %d", code)
	}
}
