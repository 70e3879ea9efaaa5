package config

import (
	"testing"
	"time"
)

// protect: {} turns protection on with its defaults; its settings are
// checked at their lines.
func TestProtect(t *testing.T) {
	c := mustParse(t, `
routes:
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://10.0.0.1:8080"]}
    protect: {}
  - id: b
    match: {path: /b}
    upstream: {targets: ["http://10.0.0.1:8080"]}
`)
	want := Protect{Min: 1, Tolerance: 2, WarmUp: 5 * time.Second, Throttling: true, Reject: Reject{Status: 503, Code: CodeOverloaded}}
	if p := c.Routes[0].Protect; p == nil || *p != want {
		t.Errorf("protect: {} = %+v, want %+v", p, want)
	}
	if c.Routes[1].Protect != nil {
		t.Errorf("a route without the block: %+v", c.Routes[1].Protect)
	}
	c = mustParse(t, `
routes:
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://10.0.0.1:8080"]}
    protect:
      priority: {key: "header:X-Priority", levels: [gold, silver, free]}
`)
	if pr := c.Routes[0].Protect.Priority; pr == nil || pr.Key.String() != "header:X-Priority" || len(pr.Levels) != 3 || pr.MaxWait != 250*time.Millisecond {
		t.Errorf("priority: %+v, want the header, three levels and max_wait 250ms", pr)
	}
	if m := c.Message(CodeOverloaded); m == "" {
		t.Error("overloaded has no message")
	}
	for _, tc := range []struct{ name, block string }{
		{"min 0", `
    protect:
      min: 0 #want: routes[0].protect.min: 0: the least the learned limit may be, in requests a second: more than 0`},
		{"max under min", `
    protect:
      min: 10
      max: 5 #want: routes[0].protect.max: 5 is under min 10`},
		{"negative max", `
    protect: {max: -1} #want: routes[0].protect.max: -1: the most the learned limit may be`},
		{"tolerance 1", `
    protect: {tolerance: 1} #want: routes[0].protect.tolerance: 1: how many times its healthy latency an answer may take`},
		{"a 2xx reject", `
    protect:
      reject: {status: 200} #want: routes[0].protect.reject.status: 200 is outside 400..599`},
		{"a bad code", `
    protect:
      reject: {code: Busy} #want: routes[0].protect.reject.code: "Busy": a code is made of a-z, 0-9 and _`},
		{"a negative warm-up", `
    protect: {warm_up: -1s} #want: routes[0].protect.warm_up: -1s: how long admission ramps up`},
		{"an unknown key", `
    protect: {rate: 10} #want: unknown key`},
		{"priority without key", `
    protect:
      priority: {levels: [high, low]} #want: routes[0].protect.priority: priority needs key`},
		{"one level", `
    protect:
      priority: {key: "header:X-Priority", levels: [high]} #want: routes[0].protect.priority.levels: 1 levels: give 2 to 8`},
		{"a level twice", `
    protect:
      priority:
        key: "header:X-Priority"
        levels: [high, high] #want: routes[0].protect.priority.levels[1]: "high" is listed twice`},
		{"a long wait", `
    protect:
      priority: {key: "header:X-Priority", levels: [a, b], max_wait: 10s} #want: routes[0].protect.priority.max_wait: 10s: how long a request may wait`},
		{"a bad key part", `
    protect:
      priority: {key: "nope:x", levels: [a, b]} #want: unknown key source`},
		{"a limit named protect", `
    limits:
      - name: protect #want: routes[0].limits[0].name: "protect" names the route's protection in runtime overrides
        key: [ip]
        rate: 5/s
    protect: {}`},
		{"jwt without server.jwt", `
    protect:
      priority: {key: "jwt:tier", levels: [a, b]} #want: routes[0].protect.priority.key: jwt:tier needs server.jwt`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, `
routes:
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://10.0.0.1:8080"]}`+tc.block+"\n")
		})
	}
}
