package config

import (
	"fmt"
	"strings"
	"testing"
)

const diffBase = `
admin: {listen: ""}
global_limits:
  - {name: all, key: [global], rate: 1000/s}
routes:
  - id: lucky-meal
    match: {path: /meal}
    upstream: {targets: ["http://127.0.0.1:9000"]}
    limits:
      - {name: user, key: ["header:X-User-Id"], rate: 1/10s}
      - {name: api, key: [route], algorithm: token_bucket, rate: 800/s}
    breaker: {enabled: true}
  - id: orders
    match: {path: /orders/**}
    upstream: {targets: ["http://127.0.0.1:9001"]}
`

func TestDiff(t *testing.T) {
	tests := []struct {
		name string
		edit func(string) string
		want string
	}{
		{"the same file", func(s string) string { return s }, "no changes"},
		{"comments and layout", func(s string) string { return "# a comment\n" + s + "\n\n" }, "no changes"},
		{"a rate", func(s string) string { return strings.Replace(s, "rate: 1/10s", "rate: 2/10s", 1) },
			"rates: lucky-meal/user: 1/10s -> 2/10s"},
		{"a rate of hours", func(s string) string { return strings.Replace(s, "rate: 1/10s", "rate: 3/2h", 1) },
			"rates: lucky-meal/user: 1/10s -> 3/2h"},
		{"a rate of hours and minutes", func(s string) string { return strings.Replace(s, "rate: 1/10s", "rate: 5/90m", 1) },
			"rates: lucky-meal/user: 1/10s -> 5/1h30m"},
		{"the long form of the same rate", func(s string) string {
			return strings.Replace(s, "rate: 1/10s", "limit: 1, window: 10s", 1)
		}, "no changes"},
		{"a burst", func(s string) string { return strings.Replace(s, "rate: 800/s}", "rate: 800/s, burst: 1600}", 1) },
			"rates: lucky-meal/api: 800/s -> 800/s burst 1600"},
		{"a global rate", func(s string) string { return strings.Replace(s, "1000/s", "2000/s", 1) },
			"rates: global/all: 1000/s -> 2000/s"},
		{"a limit added and one removed", func(s string) string {
			return strings.Replace(s, `- {name: api, key: [route]`, `- {name: burst, key: [route]`, 1)
		}, "limits added: lucky-meal/burst; limits removed: lucky-meal/api"},
		{"a limit's key", func(s string) string { return strings.Replace(s, `["header:X-User-Id"]`, `[ip]`, 1) },
			"limits changed: lucky-meal/user"},
		{"a route added", func(s string) string {
			return s + "  - id: new\n    match: {path: /new}\n    upstream: {targets: [\"http://127.0.0.1:9002\"]}\n" +
				"    limits: [{name: x, key: [ip], rate: 1/s}]\n"
		}, "routes added: new"},
		{"a route removed", func(s string) string { s, _, _ = strings.Cut(s, "  - id: orders"); return s },
			"routes removed: orders"},
		{"a target", func(s string) string { return strings.Replace(s, "9001", "9003", 1) }, "routes changed: orders"},
		{"a breaker disabled", func(s string) string { return strings.Replace(s, "{enabled: true}", "{enabled: false}", 1) },
			"breakers: lucky-meal disabled"},
		{"a breaker's setting", func(s string) string {
			return strings.Replace(s, "{enabled: true}", "{enabled: true, open_for: 5s}", 1)
		}, "breakers: lucky-meal changed"},
		{"a breaker enabled", func(s string) string {
			return strings.Replace(s, `targets: ["http://127.0.0.1:9001"]}`, `targets: ["http://127.0.0.1:9001"]}`+"\n    breaker: {enabled: true}", 1)
		}, "breakers: orders enabled"},
		{"the store", func(s string) string { return "store: {memory: {max_keys: 10}}\n" + s }, "settings: store"},
		{"tracing", func(s string) string { return "tracing: {otlp: \"grpc://127.0.0.1:4317\"}\n" + s }, "settings: tracing"},
		{"the sample rate", func(s string) string { return "tracing: {sample: 0.5}\n" + s }, "settings: tracing"},
		{"the server and responses", func(s string) string {
			return "server: {max_body_bytes: 10}\nresponses: {rate_limited: slow down}\n" + s
		}, "settings: server, responses"},
		{"several at once", func(s string) string {
			s = strings.Replace(s, "rate: 1/10s", "rate: 5/min", 1)
			return strings.Replace(s, "9001", "9003", 1)
		}, "routes changed: orders; rates: lucky-meal/user: 1/10s -> 5/min"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := mustParse(t, diffBase), mustParse(t, tt.edit(diffBase))
			c := Diff(old, new)
			if got := c.String(); got != tt.want {
				t.Errorf("Diff:\n got %s\nwant %s", got, tt.want)
			}
			if c.None() != (tt.want == "no changes") {
				t.Errorf("None() = %v for %q", c.None(), tt.want)
			}
		})
	}
}

// A reload that changes hundreds of routes is told in a short line: the
// first few names and the count of the rest.
func TestDiffBounded(t *testing.T) {
	routes := func(n int, rate string) string {
		var b strings.Builder
		b.WriteString("admin: {listen: \"\"}\nroutes:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - id: r%d\n    match: {path: /r%d}\n    upstream: {targets: [\"http://127.0.0.1:9000\"]}\n"+
				"    limits: [{name: user, key: [ip], rate: %s}]\n", i, i, rate)
		}
		return b.String()
	}
	old := mustParse(t, routes(500, "1/s"))
	new := mustParse(t, routes(1000, "2/s"))
	got := Diff(old, new).String()
	want := "routes added: r500, r501, r502, r503, r504 (+495 more); " +
		"rates: r0/user: 1/s -> 2/s, r1/user: 1/s -> 2/s, r2/user: 1/s -> 2/s, r3/user: 1/s -> 2/s, r4/user: 1/s -> 2/s (+495 more)"
	if got != want {
		t.Errorf("Diff:\n got %s\nwant %s", got, want)
	}
	if got := Diff(new, old).String(); got != "routes removed: r500, r501, r502, r503, r504 (+495 more); "+
		"rates: r0/user: 2/s -> 1/s, r1/user: 2/s -> 1/s, r2/user: 2/s -> 1/s, r3/user: 2/s -> 1/s, r4/user: 2/s -> 1/s (+495 more)" {
		t.Errorf("Diff back: %s", got)
	}
}
