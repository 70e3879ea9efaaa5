package admin

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// GET /admin/top needs the token, checks its parameters, and lists the
// keys a real gateway rejected, most rejected first.
func TestTopEndpoint(t *testing.T) {
	gw, _, call := newGatewayTest(t)
	reject := func(user string, n int) {
		for range n {
			r := httptest.NewRequest("GET", "/api/x", nil)
			r.Header.Set("X-User-Id", user)
			w := httptest.NewRecorder()
			gw.ServeHTTP(w, r)
		}
	}
	reject("alice", 4) // the first is let through, to a dead upstream
	reject("bob", 2)
	auth := []string{"Authorization", "Bearer tok"}
	if r := call("GET", "/admin/top?route=api&limit=user", ""); r.code != 401 {
		t.Errorf("without the token: %d %s", r.code, r.body)
	}
	for target, want := range map[string]string{
		"/admin/top?limit=user":                 `missing parameter \"route\"`,
		"/admin/top?route=api":                  `missing parameter \"limit\"`,
		"/admin/top?route=api&limit=user&n=0":   `parameter \"n\"`,
		"/admin/top?route=api&limit=user&n=x":   `parameter \"n\"`,
		"/admin/top?route=api&limit=user&n=257": `parameter \"n\"`,
	} {
		if r := call("GET", target, "", auth...); r.code != 400 || !strings.Contains(r.body, want) {
			t.Errorf("%s: %d %s", target, r.code, r.body)
		}
	}
	for _, target := range []string{"/admin/top?route=api&limit=nope", "/admin/top?route=nope&limit=user", "/admin/top?route=global&limit=user"} {
		if r := call("GET", target, "", auth...); r.code != 404 || !strings.Contains(r.body, "limit_not_found") {
			t.Errorf("%s: %d %s", target, r.code, r.body)
		}
	}
	r := call("GET", "/admin/top?route=api&limit=user", "", auth...)
	var top struct {
		Route, Limit string
		Since        string
		Keys         []struct {
			Key          []string
			Count, Error uint64
		}
	}
	if err := json.Unmarshal([]byte(r.body), &top); err != nil || r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	if top.Route != "api" || top.Limit != "user" || top.Since == "" || len(top.Keys) != 2 ||
		top.Keys[0].Key[0] != "alice" || top.Keys[0].Count != 3 || top.Keys[1].Key[0] != "bob" || top.Keys[1].Count != 1 {
		t.Errorf("top: %s", r.body)
	}
	if r := call("GET", "/admin/top?route=api&limit=user&n=1", "", auth...); !strings.Contains(r.body, "alice") || strings.Contains(r.body, "bob") {
		t.Errorf("n=1: %s", r.body)
	}
}

// A backend that does not count rejected keys answers 501.
func TestTopWithoutCounts(t *testing.T) {
	_, h := newTest(t, "tok")
	if r := do(t, h, "GET", "/admin/top?route=api&limit=user", "Authorization", "Bearer tok"); r.code != 501 {
		t.Errorf("%d %s", r.code, r.body)
	}
}
