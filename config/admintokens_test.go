package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// Named admin tokens: each from the file or the environment, each name
// and token its own, shown as *** in the config's view.
func TestAdminTokens(t *testing.T) {
	t.Setenv("FG_TEST_ALICE", "alice-secret-token")
	c, err := Parse("test.yaml", []byte(`
admin:
  listen: ":9090"
  tokens:
    - {name: alice, token_env: FG_TEST_ALICE}
    - {name: ci.deploy, token: ci-secret-token}
rls: {listen: "127.0.0.1:8081"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Admin.Tokens) != 2 || c.Admin.Tokens[0].Token != "alice-secret-token" || c.Admin.Tokens[1].Name != "ci.deploy" {
		t.Fatalf("tokens %+v", c.Admin.Tokens)
	}
	if s := c.String(); strings.Contains(s, "secret-token") {
		t.Fatalf("the summary shows a token: %s", s)
	}
	b := mustJSON(t, c.Redacted())
	if strings.Contains(b, "secret-token") || !strings.Contains(b, `{"name":"alice","token":"***","token_env":"FG_TEST_ALICE"}`) {
		t.Fatalf("redacted: %s", b)
	}
}

func TestAdminTokensRefused(t *testing.T) {
	t.Setenv("FG_TEST_EMPTY", "")
	for _, tc := range []struct{ tokens, want string }{
		{`[{name: alice}]`, "test.yaml:4: admin.tokens[0]: a named token needs token or token_env"},
		{`[{token: x}]`, "test.yaml:4: admin.tokens[0].name: a named token needs a name"},
		{`[{name: Alice, token: x}]`, `test.yaml:4: admin.tokens[0].name: "Alice": want [a-z0-9][a-z0-9_.@-]*`},
		{`[{name: admin, token: x}]`, `test.yaml:4: admin.tokens[0].name: "admin" is already the name of admin.token`},
		{`[{name: a, token: x}, {name: a, token: y}]`, `test.yaml:4: admin.tokens[1].name: "a" is already the name of admin.tokens[0]`},
		{`[{name: a, token: tok}]`, "test.yaml:4: admin.tokens[0]: the same token as admin.token: each holder needs a token of its own"},
		{`[{name: a, token: x, token_env: FG_TEST_EMPTY}]`, "test.yaml:4: admin.tokens[0].token_env: give token or token_env, not both"},
		{`[{name: a, token_env: FG_TEST_EMPTY}]`, "test.yaml:4: admin.tokens[0].token_env: environment variable FG_TEST_EMPTY is empty"},
		{`[{name: a, token: x, role: root}]`, `test.yaml:4: admin.tokens[0]: unknown key "role"`},
	} {
		errs := parseErrors(t, "admin:\n  listen: \":9090\"\n  token: tok\n  tokens: "+tc.tokens+"\nrls: {listen: \"127.0.0.1:8081\"}\n")
		if !strings.Contains(errs.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %s", tc.tokens, errs, tc.want)
		}
	}
	// Named tokens alone are a token for a listener beyond loopback.
	if _, err := Parse("test.yaml", []byte("admin:\n  listen: \":9090\"\n  tokens: [{name: a, token: x}]\nrls: {listen: \"127.0.0.1:8081\"}\n")); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
