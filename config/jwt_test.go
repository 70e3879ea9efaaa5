package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const jwtRoute = `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - name: user
        key: [jwt:sub, path]
        fallback: [ip]
        rate: 1/s
        overrides:
          - claim: {name: tier, value: vip}
            rate: 10/s
`

func TestJWT(t *testing.T) {
	c := mustParse(t, `
server:
  jwt:
    jwks_file: /etc/floodgate/jwks.json
    audience: lucky-meal
`+jwtRoute)
	want := JWT{JWKSFile: "/etc/floodgate/jwks.json", Audience: "lucky-meal", Leeway: 30 * time.Second,
		From: TokenFrom{Source: SourceHeader, Name: "Authorization"}}
	if j := c.Server.JWT; j == nil || *j != want {
		t.Errorf("server.jwt %+v, want the defaults filled in: %+v", j, want)
	}
	l := c.Routes[0].Limits[0]
	if l.Key[0] != (KeyPart{Source: SourceJWT, Name: "sub"}) || l.Key[0].Kind() != "jwt:sub" {
		t.Errorf("key %v", l.Key)
	}
	if o := l.Overrides[0]; o.Claim == nil || *o.Claim != (ClaimMatch{Name: "tier", Value: "vip"}) || o.Rule == nil {
		t.Errorf("override %+v", o)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}

	c = mustParse(t, `
server:
  jwt:
    jwks_url: "https://login.example.com/.well-known/jwks.json"
    issuer: "https://login.example.com/"
    audience: lucky-meal
    leeway: 0s
    from: "cookie:session"
`+jwtRoute)
	if j := c.Server.JWT; j.Leeway != 0 || j.From != (TokenFrom{Source: SourceCookie, Name: "session"}) || j.Issuer != "https://login.example.com/" {
		t.Errorf("server.jwt %+v", j)
	}

	// A claim's name may hold colons, as a namespaced claim does.
	c = mustParse(t, `
server: {jwt: {jwks_file: x.json, audience: a}}
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - {name: roles, key: ["jwt:https://example.com/roles"], rate: 1/s}
`)
	if k := c.Routes[0].Limits[0].Key[0]; k.Name != "https://example.com/roles" {
		t.Errorf("key %+v", k)
	}

	// Without server.jwt, no block appears in the view.
	b, _ := json.Marshal(mustParse(t, okRoute).Redacted())
	if strings.Contains(string(b), `"jwt"`) {
		t.Errorf("the view of a config without server.jwt: %s", b)
	}
}

func TestJWTView(t *testing.T) {
	c := mustParse(t, `
server:
  jwt:
    jwks_url: "https://user:secret@login.example.com/jwks"
    audience: lucky-meal
`+jwtRoute)
	b, err := json.Marshal(c.Redacted())
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{
		`"jwt":{"jwks_file":"","jwks_url":"https://user:***@login.example.com/jwks","issuer":"","audience":"lucky-meal","leeway":"30s","from":"header:Authorization"}`,
		`"key":["jwt:sub","path"]`, `"claim":{"name":"tier","value":"vip"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the view lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret") {
		t.Errorf("the view shows the URL's password: %s", out)
	}
	// The view parses back to the same config.
	again, err := Parse("view.json", []byte(strings.Replace(out, "user:***@", "", 1)))
	if err != nil {
		t.Fatalf("the view does not parse: %v", err)
	}
	if j := again.Server.JWT; j == nil || j.Leeway != 30*time.Second || j.Audience != "lucky-meal" {
		t.Errorf("back from the view: %+v", j)
	}
}

func TestJWTErrors(t *testing.T) {
	for _, tt := range []struct{ name, src string }{
		{"jwt parts without server.jwt", `
global_limits:
  - name: g
    key: [global]
    fallback: [jwt:sub] #want: global_limits[0].fallback[0]: jwt:sub needs server.jwt
    rate: 1/s
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: user
        key: [path, jwt:sub] #want: routes[0].limits[0].key[1]: jwt:sub needs server.jwt
        rate: 1/s
        overrides:
          - claim: {name: tier, value: vip} #want: routes[0].limits[0].overrides[0].claim: a claim override needs server.jwt
            rate: 2/s
`},
		{"key sources", `
server: {jwt: {jwks_file: x.json, audience: a}}
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: user
        key: [jwt] #want: routes[0].limits[0].key[0]: key source "jwt": write jwt:CLAIM
        rate: 1/s
      - name: user2
        key: ["jwt:a b"] #want: routes[0].limits[1].key[0]: key source "jwt:a b": "a b" is not a claim name
        rate: 1/s
      - name: user3
        key: [jwt:sub, jwt:sub] #want: routes[0].limits[2].key[1]: jwt:sub is already part 1 of the key
        rate: 1/s
`},
		{"server.jwt", `
server:
  jwt:
    jwks_file: x.json
    jwks_url: "https://login.example.com/jwks" #want: server.jwt.jwks_url: give jwks_file or jwks_url, not both
    audience: a
    leeway: -1s #want: server.jwt.leeway: -1s is negative
    from: "query:token" #want: server.jwt.from: "query:token": a token comes from header:NAME or cookie:NAME
` + okRoute},
		{"no keys", `
server:
  jwt: {audience: a} #want: server.jwt: server.jwt needs jwks_file or jwks_url
` + okRoute},
		{"bad URL", `
server:
  jwt:
    jwks_url: "login.example.com/jwks" #want: server.jwt.jwks_url: "login.example.com/jwks" is not an absolute http(s) URL
    audience: a
    from: "header:" #want: server.jwt.from: "header:": "" is not a valid header name
` + okRoute},
		{"unknown key", `
server:
  jwt:
    jwks_file: x.json
    audiences: [a] #want: server.jwt: unknown key "audiences" (did you mean "audience"?)
` + okRoute},
		{"claim overrides", `
server: {jwt: {jwks_file: x.json, audience: a}}
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: user
        key: [jwt:sub]
        rate: 1/s
        overrides:
          - claim: {name: "", value: vip} #want: routes[0].limits[0].overrides[0].claim.name: "" is not a claim name
            rate: 2/s
          - claim: {name: tier} #want: routes[0].limits[0].overrides[1].claim.value: empty
            rate: 2/s
          - values: [u1]
            claim: {name: tier, value: vip} #want: routes[0].limits[0].overrides[2].claim: an override matches by one of values, header and claim
            rate: 2/s
          - claim: {name: tier, value: vip, other: x} #want: routes[0].limits[0].overrides[3].claim: unknown key "other"
            rate: 2/s
`},
	} {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.src) })
	}
}

// What is probably a mistake is said, and accepted.
func TestJWTWarnings(t *testing.T) {
	c := mustParse(t, `
server:
  jwt:
    jwks_url: "http://login.example.com/jwks"
`+jwtRoute)
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Error())
	}
	want := []string{
		"test.yaml:3: server.jwt: no audience: a token the keys signed for any other service is accepted too; set audience to this service's",
		"test.yaml:4: server.jwt.jwks_url: plain http: whoever is on the path to login.example.com can replace the keys, and so forge any token; use https",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A JWKS served on this machine over http is fine.
	c = mustParse(t, `
server: {jwt: {jwks_url: "http://127.0.0.1:8000/jwks", audience: a}}
`+jwtRoute)
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
}
