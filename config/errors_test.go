package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate-gw/floodgate/internal/wantlines"
)

// okRoute is a valid route for cases that test something else.
const okRoute = `
routes:
  - id: ok
    match: {path: /ok}
    upstream: {targets: ["http://127.0.0.1:9000"]}
`

// checkErrors parses src and checks that it fails with exactly the errors
// its "#want: TEXT" comments name (wantlines.Check), each in test.yaml, in
// line order.
func checkErrors(t *testing.T, src string) {
	t.Helper()
	cfg, err := Parse("test.yaml", []byte(src))
	if err == nil {
		t.Fatalf("Parse succeeded (%s), want errors", cfg.Summary())
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("Parse returned %T, want Errors: %v", err, err)
	}
	got := make([]wantlines.Problem, len(errs))
	for i, e := range errs {
		got[i] = wantlines.Problem{Line: e.Line, Msg: e.Msg}
		if e.File != "test.yaml" {
			t.Errorf("error %v: file %q, want test.yaml", e, e.File)
		}
	}
	wantlines.Check(t, src, got, err)
	if !slices.IsSortedFunc(errs, func(a, b Error) int { return a.Line - b.Line }) {
		t.Errorf("errors not sorted by line:\n%v", err)
	}
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name, src string
	}{
		// Decoding: unknown and repeated keys at any depth, wrong types.
		{"unknown top-level key", `
serverr: {} #want: unknown key "serverr" (did you mean "server"?)
` + okRoute},
		{"unknown keys at every depth", `
server: {listn: ":8080"} #want: server: unknown key "listn" (did you mean "listen"?)
store:
  redis: {pasword: x} #want: store.redis: unknown key "pasword"
  memory: {keys: 1} #want: store.memory: unknown key "keys"
global_limits:
  - name: g
    key: [global]
    rate: 10/s
    colour: red #want: global_limits[0]: unknown key "colour"
routes:
  - id: r
    matches: {path: /r} #want: routes[0]: unknown key "matches" (did you mean "match"?)
    match: {path: /r, verbs: [GET]} #want: routes[0].match: unknown key "verbs"
    upstream: {targets: ["http://x"], retries: 3} #want: routes[0].upstream: unknown key "retries"
    limits:
      - name: l
        key: [ip]
        rate: 10/s
        reject: {status: 429, text: no} #want: routes[0].limits[0].reject: unknown key "text"
        overrides:
          - values: [1.2.3.4]
            rate: 20/s
            brust: 30 #want: routes[0].limits[0].overrides[0]: unknown key "brust"
          - header: {name: X-T, value: v, regex: true} #want: routes[0].limits[0].overrides[1].header: unknown key "regex"
            rate: 20/s
    breaker: {enabled: true, threshold: 3} #want: routes[0].breaker: unknown key "threshold"
    fallback: {status: 503, body: x} #want: routes[0].fallback: unknown key "body"
events:
  redis: {stream: s, max_len: 5} #want: events.redis: unknown key "max_len" (did you mean "maxlen"?)
  nats: {url: "nats://127.0.0.1:4222", topic: t} #want: events.nats: unknown key "topic"
  file: {path: p, mode: 0644} #want: events.file: unknown key "mode"
  bogus: 1 #want: events: unknown key "bogus"
`},
		{"repeated keys", `
server:
  listen: ":8080"
  listen: ":8081" #want: server.listen: key "listen" repeated (first at line 3)
routes:
  - id: a
    id: b #want: key "id" repeated (first at line 6)
    match: {path: /a, path: /b} #want: key "path" repeated (first at line 8)
    upstream: {targets: ["http://x"]}
`},
		{"wrong types", `
server:
  listen: [":8080"] #want: server.listen: want a string, got a list
  max_header_bytes: lots #want: server.max_header_bytes: want a whole number, got "lots"
  max_body_bytes: 1.5 #want: server.max_body_bytes: want a whole number, got "1.5"
  ipv6_prefix: "64" #want: server.ipv6_prefix: want a whole number, got "64"
  trusted_proxies: 10.0.0.0/8 #want: server.trusted_proxies: want a list
store:
  redis: {tls: "yes"} #want: store.redis.tls: want true or false, got "yes"
routes:
  - id: r
    match: /r #want: routes[0].match: want a mapping of keys to values, got "/r"
    upstream: {targets: ["http://x"]}
    breaker: {failure_rate: half} #want: routes[0].breaker.failure_rate: want a number, got "half"
`},
		{"bad durations", `
server:
  shutdown_timeout: 10 #want: server.shutdown_timeout: "10" is not a duration
store:
  redis: {timeout: fast} #want: store.redis.timeout: "fast" is not a duration
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://x"]
      idle_timeout: 1 minute #want: routes[0].upstream.idle_timeout: "1 minute" is not a duration
`},
		{"bad rates and a rate of 0", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: a
        key: [ip]
        rate: 0/s #want: routes[0].limits[0].rate: rate "0/s": count 0 must be positive
      - name: b
        key: [ip]
        rate: 10 per second #want: routes[0].limits[1].rate: rate "10 per second"
      - name: c
        key: [ip]
        rate: 0:60 #want: routes[0].limits[2].rate: rate "0:60": count 0 must be positive
      - name: d
        key: [ip]
        limit: 0 #want: routes[0].limits[3].limit: 0 must be positive
        window: 1s
      - name: e
        key: [ip]
        limit: 5
        window: 0s #want: routes[0].limits[4].window: 0s must be positive
      - name: f
        key: [ip]
        rate: 10/fortnight #want: routes[0].limits[5].rate: rate "10/fortnight": unknown unit or duration "fortnight"
`},
		{"route ids", `
routes:
  - id: dup
    match: {path: /a}
    upstream: {targets: ["http://x"]}
  - id: dup #want: routes[1].id: duplicate route id "dup" (first at line 3)
    match: {path: /b}
    upstream: {targets: ["http://x"]}
  - id: Upper_Case #want: routes[2].id: "Upper_Case": a route id is made of a-z
    match: {path: /c}
    upstream: {targets: ["http://x"]}
  - id: global #want: routes[3].id: "global" is reserved
    match: {path: /d}
    upstream: {targets: ["http://x"]}
  - match: {path: /e} #want: routes[4]: a route needs an id
    upstream: {targets: ["http://x"]}
`},
		{"limit names", `
global_limits:
  - name: shared
    key: [global]
    rate: 100/s
  - name: shared #want: global_limits[1].name: duplicate limit name "shared" (first at line 3)
    key: [global]
    rate: 100/s
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: user
        key: [ip]
        rate: 1/s
      - name: user #want: routes[0].limits[1].name: duplicate limit name "user" (first at line 14)
        key: [ip]
        rate: 1/s
      - name: shared #want: limit name "shared" is taken by a global limit (line 3)
        key: [ip]
        rate: 1/s
      - name: "Bad Name" #want: routes[0].limits[3].name: "Bad Name": a limit name is made of
        key: [ip]
        rate: 1/s
      - key: [ip] #want: routes[0].limits[4]: a limit needs a name
        rate: 1/s
  - id: other
    match: {path: /other}
    upstream: {targets: ["http://x"]}
    limits:
      - name: user # another route may reuse a name
        key: [ip]
        rate: 1/s
`},
		{"key sources", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: a
        key: [user_id] #want: routes[0].limits[0].key[0]: unknown key source "user_id"
        rate: 1/s
      - name: b
        key: [header:X User] #want: key source "header:X User": "X User" is not a valid header name
        rate: 1/s
      - name: c
        key: [ip:v4] #want: key source "ip:v4": ip takes no name
        rate: 1/s
      - name: d
        key: ["header:"] #want: key source "header:": write header:NAME
        rate: 1/s
      - name: e
        key: [ip]
        fallback: [query:a&b] #want: routes[0].limits[4].fallback[0]: key source "query:a&b"
        rate: 1/s
      - name: f
        key: [ip, path, ip] #want: routes[0].limits[5].key[2]: ip is already part 1 of the key
        rate: 1/s
      - name: g #want: routes[0].limits[6]: a limit needs a key
        rate: 1/s
      - name: h
        key: [cookie:"sid"] #want: cookie name
        rate: 1/s
      - name: i
        key: [bogus1, bogus2] #want: routes[0].limits[8].key[0]: unknown key source "bogus1" | routes[0].limits[8].key[1]: unknown key source "bogus2"
        rate: 1/s
      - name: j
        key: [header:X-A, header:x-a] #want: routes[0].limits[9].key[1]: header:x-a is already part 1 of the key
        rate: 1/s
      - name: k # cookie and query names have case
        key: [cookie:a, cookie:A, query:q, query:Q]
        rate: 1/s
`},
		{"targets", `
routes:
  - id: a
    match: {path: /a}
    upstream:
      targets:
        - 127.0.0.1:9000 #want: routes[0].upstream.targets[0]: "127.0.0.1:9000" is not an absolute http(s) URL
        - ftp://files.example.com #want: routes[0].upstream.targets[1]: "ftp://files.example.com" is not an absolute http(s) URL
        - /relative #want: targets[2]: "/relative" is not an absolute
        - http:// #want: targets[3]: "http://" is not an absolute
        - "http://x#frag" #want: targets[4]: target "http://x#frag": a fragment
        - http://127.0.0.1:99999 #want: targets[5]: target "http://127.0.0.1:99999": port 99999 is outside 1..65535
        - http://127.0.0.1:0 #want: targets[6]: target "http://127.0.0.1:0": port 0 is outside 1..65535
        - "http://u:secret@h:1/base" #want: targets[7]: target "http://u:***@h:1/base": credentials
        - http://h:1/base?q=1 #want: targets[8]: target "http://h:1/base?q=1": a target has no query
        - "http://h:" #want: targets[9]: target "http://h:": the port after : is missing
        - "http://[::1]:8080/base"
        - https://h.example
  - id: b
    match: {path: /b}
    upstream: {strip_prefix: /b} #want: routes[1].upstream.targets: a route needs at least one target
  - id: c
    match: {path: /c}
    upstream: {targets: []} #want: routes[2].upstream.targets: a route needs at least one target
`},
		{"match paths", `
routes:
  - id: a
    match: {path: api/orders} #want: routes[0].match.path: "api/orders" does not start with /
    upstream: {targets: ["http://x"]}
  - id: b
    match: {path: /api/**/orders} #want: routes[1].match.path: "/api/**/orders": "**" may only end a path
    upstream: {targets: ["http://x"]}
  - id: c
    match: {path: /api/orders**} #want: routes[2].match.path: "/api/orders**"
    upstream: {targets: ["http://x"]}
  - id: d
    match: {path: /api/*/x} #want: routes[3].match.path
    upstream: {targets: ["http://x"]}
  - id: e
    match: {path: /api/orders/} #want: routes[4].match.path: "/api/orders/" is not a clean path (requests are matched as "/api/orders")
    upstream: {targets: ["http://x"]}
  - id: f
    match: {path: /api//x/**} #want: routes[5].match.path: "/api//x/**" is not a clean path (requests are matched as "/api/x/**")
    upstream: {targets: ["http://x"]}
  - id: g
    match: {path: "/x?y=1"} #want: routes[6].match.path: "/x?y=1": a path to match has no query
    upstream: {targets: ["http://x"]}
  - id: h
    match: {methods: [GET]} #want: routes[7].match: a route needs match.path
    upstream: {targets: ["http://x"]}
  - id: i
    match:
      path: /i
      methods: [get, "PO ST", "G(E)T"] #want: routes[8].match.methods[1]: "PO ST" is not an HTTP method | routes[8].match.methods[2]: "G(E)T" is not an HTTP method
      host: example.com:8080 #want: routes[8].match.host: "example.com:8080": a host to match has no port
    upstream: {targets: ["http://x"]}
  - id: j
    match: {path: /a%7Eb} #want: routes[9].match.path: "/a%7Eb" is not a clean path (requests are matched as "/a~b")
    upstream: {targets: ["http://x"]}
  - id: k
    match: {path: /c%2Fd/**} #want: routes[10].match.path: "/c%2Fd/**" can never match: a request with such a path is answered 400 (encoded slash (%2F))
    upstream: {targets: ["http://x"]}
  - id: l
    match: {path: "/a b"} #want: routes[11].match.path: "/a b" is not a clean path (requests are matched as "/a%20b")
    upstream: {targets: ["http://x"]}
  - id: m
    match: {path: "/x/../**"} #want: routes[12].match.path: "/x/../**" is not a clean path (requests are matched as "/**")
    upstream: {targets: ["http://x"]}
  - id: n
    match: {path: "/a%20b/**"}
    upstream: {targets: ["http://x"]}
  - id: o
    match: {path: /sale/*} #want: routes[14].match.path: "/sale/*": a prefix is written with "**": "/sale/**" matches it and every path below
    upstream: {targets: ["http://x"]}
`},
		{"strip prefix", `
routes:
  - id: a
    match: {path: /api/orders/**}
    upstream: {targets: ["http://x"], strip_prefix: /other} #want: routes[0].upstream.strip_prefix: "/other" is not a prefix of every path match.path "/api/orders/**" matches
  - id: b
    match: {path: /b/**}
    upstream: {targets: ["http://x"], strip_prefix: b} #want: routes[1].upstream.strip_prefix: "b" is not a clean path prefix
  - id: c
    match: {path: /x/orders/**}
    upstream: {targets: ["http://x"], strip_prefix: /x/ord} #want: routes[2].upstream.strip_prefix: "/x/ord" is not a prefix
`},
		{"upstream timeouts", `
routes:
  - id: r
    match: {path: /r}
    upstream:
      targets: ["http://x"]
      connect_timeout: 0s #want: routes[0].upstream.connect_timeout: 0s must be positive
      timeout: -1s #want: routes[0].upstream.timeout: -1s must be positive
      idle_timeout: 0s #want: routes[0].upstream.idle_timeout: 0s must be positive
`},
		{"upstream protocol", `
routes:
  - id: a
    match: {path: /a}
    upstream:
      targets: ["http://x"]
      protocol: http2 #want: routes[0].upstream.protocol: unknown protocol "http2" (http1, h2c, h2)
  - id: b
    match: {path: /b}
    upstream:
      protocol: h2c
      targets:
        - http://x:9000
        - https://y:9443 #want: routes[1].upstream.targets[1]: "https://y:9443": protocol h2c is HTTP/2 in clear and takes http:// targets; for HTTP/2 over TLS use protocol h2
  - id: c
    match: {path: /c}
    upstream:
      protocol: h2
      targets:
        - http://x:9000 #want: routes[2].upstream.targets[0]: "http://x:9000": protocol h2 is HTTP/2 over TLS and takes https:// targets; for HTTP/2 in clear use protocol h2c
  - id: d
    match: {path: /d}
    upstream: {targets: ["https://x", "http://y"], protocol: http1}
  - id: e
    match: {path: /e}
    upstream: {targets: ["https://x"], protocol: h2}
`},
		{"breaker", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    breaker:
      enabled: true
      window: 500ms #want: routes[0].breaker.window: 500ms is shorter than 1s
      min_calls: 0 #want: routes[0].breaker.min_calls: 0 must be at least 1
      failure_rate: 0 #want: routes[0].breaker.failure_rate: 0 is outside (0,1]
      slow_call_rate: 1.5 #want: routes[0].breaker.slow_call_rate: 1.5 is outside (0,1]
      slow_call_duration: -1s #want: routes[0].breaker.slow_call_duration: -1s is negative
      failure_statuses: [500, 99, 600] #want: routes[0].breaker.failure_statuses[1]: 99 is not an HTTP status | routes[0].breaker.failure_statuses[2]: 600 is not an HTTP status
      open_for: 0s #want: routes[0].breaker.open_for: 0s must be positive
      half_open_calls: 0 #want: routes[0].breaker.half_open_calls: 0 is outside 1..10000
  - id: s
    match: {path: /s}
    upstream: {targets: ["http://x"]}
    breaker: {window: 1500ms, failure_rate: -0.5} #want: routes[1].breaker.window: 1.5s is not a whole number of seconds | routes[1].breaker.failure_rate: -0.5 is outside (0,1]
  - id: t
    match: {path: /t}
    upstream: {targets: ["http://x"]}
    breaker: {window: 2000000h, half_open_calls: 10001} #want: routes[2].breaker.window: 2000000h0m0s is longer than 1h0m0s | routes[2].breaker.half_open_calls: 10001 is outside 1..10000
`},
		{"breaker scope", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    breaker:
      enabled: true
      scope: fleet #want: routes[0].breaker.scope: scope fleet shares the breaker's window in Redis and needs store.type redis (store.type is memory)
  - id: s
    match: {path: /s}
    upstream: {targets: ["http://x"]}
    breaker: {scope: region} #want: routes[1].breaker.scope: unknown scope "region" (instance, fleet)
`},
		{"fallback", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    fallback:
      status: 600 #want: routes[0].fallback.status: 600 is outside 200..599
      code: Busy! #want: routes[0].fallback.code: "Busy!": a code is made of a-z, 0-9 and _
      record: true #want: routes[0].fallback.record: record: true needs an events sink, but events.sink is none
`},
		{"store", `
store:
  type: redis #want: store.redis.addrs: store.type is redis but no addrs are given
  redis:
    mode: sentinel #want: store.redis.master_name: sentinel mode needs master_name
    prefix: "fg:{x}" #want: store.redis.prefix: "fg:{x}" holds a brace
    timeout: 0s #want: store.redis.timeout: 0s must be positive
    db: -1 #want: store.redis.db: -1 is negative
  memory: {max_keys: 0} #want: store.memory.max_keys: 0 must be positive
  on_error: ignore #want: store.on_error: unknown on_error "ignore"
  local_share: 0 #want: store.local_share: 0 is outside (0,1]
  local_rejects_max: 0 #want: store.local_rejects_max: 0 must be positive (local_rejects: false turns local rejects off)
` + okRoute},
		{"sync", `
store: {type: redis, redis: {addrs: ["127.0.0.1:6379"]}}
global_limits:
  - {name: g, key: [global], rate: 10/s, sync: lease}
  - {name: u, key: ["header:X-User-Id"], rate: 10/s, sync: lease} #want: global_limits[1].sync: lease is for keys every request shares (global, route); key part header:X-User-Id differs from request to request
  - {name: i, key: [route], fallback: [ip], rate: 10/s, sync: lease} #want: global_limits[2].sync: lease is for keys every request shares (global, route); key part ip differs from request to request
  - {name: c, key: [global], algorithm: concurrency, limit: 5, sync: lease} #want: global_limits[3].sync: lease takes slices of a fixed window; a concurrency cannot be leased
  - {name: s, key: [route], algorithm: sliding_window, rate: 5/s, sync: lease} #want: global_limits[4].sync: lease takes slices of a fixed window; a sliding_window cannot be leased
  - {name: x, key: [route], rate: 5/s, sync: eventually} #want: global_limits[5].sync: unknown sync "eventually" (exact, lease)
` + okRoute},
		{"local rejects", `
store:
  local_rejects: maybe #want: store.local_rejects: want true or false, got "maybe"
  local_rejects_max: -5 #want: store.local_rejects_max: -5 must be positive
` + okRoute},
		{"store modes", `
store:
  type: rediss #want: store.type: unknown store type "rediss" (memory, redis)
  redis:
    mode: replicated #want: store.redis.mode: unknown mode "replicated"
    addrs: ["127.0.0.1", "h:port", ":6379"] #want: store.redis.addrs[0]: "127.0.0.1" is not an address (HOST:PORT) | store.redis.addrs[1]: "h:port": port "port" is not a port number | store.redis.addrs[2]: ":6379" has no host
    master_name: mymaster #want: store.redis.master_name: only sentinel mode has a master_name
  local_share: 1.5 #want: store.local_share: 1.5 is outside (0,1]
` + okRoute},
		{"cluster db", `
store:
  type: redis
  redis:
    mode: cluster
    addrs: ["10.0.0.1:7000"]
    db: 2 #want: store.redis.db: Redis Cluster has only db 0
` + okRoute},
		{"standalone addrs", `
store:
  type: redis
  redis:
    addrs: ["10.0.0.1:7000", "10.0.0.2:7000"] #want: store.redis.addrs: standalone mode takes one address, not 2
` + okRoute},
		{"server", `
server:
  listen: "8080" #want: server.listen: "8080" is not an address (HOST:PORT or :PORT)
  ipv6_prefix: 129 #want: server.ipv6_prefix: 129 is outside 0..128
  trusted_proxies: [10.0.0.0/8, 192.168.1.1, "fe80::1%eth0", 10.0.0.0/33, proxy.local, 10.1.2.3/8] #want: server.trusted_proxies[2]: "fe80::1%eth0" is not an IP address or CIDR prefix | server.trusted_proxies[3]: "10.0.0.0/33" | server.trusted_proxies[4]: "proxy.local" | server.trusted_proxies[5]: "10.1.2.3/8" has address bits set past its /8; write 10.0.0.0/8 (or the address alone)
  shutdown_timeout: 0s #want: server.shutdown_timeout: 0s must be positive
  request_id_header: "X Request Id" #want: server.request_id_header: "X Request Id" is not a valid header name
  max_header_bytes: 0 #want: server.max_header_bytes: 0 must be positive
  max_body_bytes: -1 #want: server.max_body_bytes: -1 is negative
  body_timeout: -1s #want: server.body_timeout: -1s is negative
  send_timeout: -1s #want: server.send_timeout: -1s is negative
` + okRoute},
		{"access log in a missing directory", `
server: {access_log: /nonexistent-floodgate-dir/access.log} #want: server.access_log: "/nonexistent-floodgate-dir/access.log": its directory /nonexistent-floodgate-dir cannot be used: no such file or directory
` + okRoute},
		{"access log a directory", `
server: {access_log: /tmp/} #want: server.access_log: "/tmp/" is a directory
` + okRoute},
		{"access log an existing directory", `
server: {access_log: /tmp} #want: server.access_log: "/tmp" is a directory
` + okRoute},
		{"access log read as a boolean", `
server: {access_log: no} #want: server.access_log: "no": write off, stdout, stderr or the path of a file
` + okRoute},
		{"access log empty", `
server: {access_log: ""} #want: server.access_log: empty; write off, stdout, stderr or the path of a file
` + okRoute},
		{"access log in capitals", `
server: {access_log: STDERR} #want: server.access_log: write "stderr" in lower case
` + okRoute},
		{"access log under a file", `
server: {access_log: /etc/passwd/x.log} #want: server.access_log: "/etc/passwd/x.log": /etc/passwd is not a directory
` + okRoute},
		{"access log with white space", `
server: {access_log: "off "} #want: server.access_log: "off " begins or ends with white space
` + okRoute},
		{"access log a device path", `
server: {access_log: /dev/stdout} #want: server.access_log: "/dev/stdout" is a device path; write stdout or stderr for the process's own streams
` + okRoute},
		{"access log the null device", `
server: {access_log: /dev/../dev/null} #want: server.access_log: "/dev/../dev/null" is a device path
` + okRoute},
		{"access log stdout in capitals", `
server: {access_log: Stdout} #want: server.access_log: write "stdout" in lower case
` + okRoute},
		{"negative ipv6 prefix", `
server: {ipv6_prefix: -1} #want: server.ipv6_prefix: -1 is outside 0..128
` + okRoute},
		{"listeners", `
server: {listen: ":9090"}
admin: {listen: "127.0.0.1:9090"} #want: admin.listen: "127.0.0.1:9090" overlaps server.listen ":9090" (line 2)
rls: {listen: "0.0.0.0:8081", config_dir: /etc/rl}
` + okRoute},
		{"rls", `
rls:
  config_dir: /etc/ratelimit #want: rls.config_dir: set, but rls.listen is empty
` + okRoute},
		{"rls answers without a listener", `
rls:
  shadow: true #want: rls.shadow: set, but rls.listen is empty
  quota_mode: true #want: rls.quota_mode: set, but rls.listen is empty
  response_metadata: true #want: rls.response_metadata: set, but rls.listen is empty
  response_headers: ietf #want: rls.response_headers: set, but rls.listen is empty
` + okRoute},
		{"rls response headers", `
rls:
  listen: ":8081"
  response_headers: IETF #want: rls.response_headers: "IETF": none, ietf or envoy
`},
		{"nothing to serve", `
server: {listen: ":8080"} #want: nothing to serve: a config needs at least one route or rls.listen
`},
		{"events", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    fallback: {record: true}
events:
  sink: redis #want: events.sink: the redis sink writes to the store's Redis, but store.type is memory | events.spool_dir: events.sink redis needs a spool_dir
  redis: {maxlen: 0} #want: events.redis.maxlen: 0 must be positive
  nats: {url: "http://user:hunter2@x", subject: "a.*"} #want: events.nats.url: "http://user:***@x" is not a nats:// or tls:// URL | events.nats.subject: "a.*"
  spool_max_bytes: 0 #want: events.spool_max_bytes: 0 must be positive
  max_body: -1 #want: events.max_body: -1 is negative
  headers: [Content-Type, "Bad Header"] #want: events.headers[1]: "Bad Header" is not a valid header name
`},
		{"events sinks", `
events:
  sink: kinesis #want: events.sink: unknown sink "kinesis" (none, redis, nats, kafka, file)
  audit: everything #want: events.audit: unknown audit "everything"
` + okRoute},
		{"kafka without brokers or spool", `
events:
  sink: kafka #want: events.spool_dir: events.sink kafka needs a spool_dir | events.kafka.brokers: the kafka sink needs at least one broker HOST:PORT
` + okRoute},
		{"kafka fields", `
events:
  sink: kafka
  spool_dir: /var/spool/fg
  kafka:
    brokers:
      - "10.0.0.1:9092"
      - "kafka://user:hunter2@10.0.0.2:9092" #want: events.kafka.brokers[1]: "kafka://***@10.0.0.2:9092" is not an address (HOST:PORT)
      - "10.0.0.3" #want: events.kafka.brokers[2]: "10.0.0.3" is not an address (HOST:PORT)
    topic: "fg events" #want: events.kafka.topic: "fg events" is not a Kafka topic name
    client_id: "" #want: events.kafka.client_id: empty: leave it out for floodgate
    acks: none #want: events.kafka.acks: "none" would count an event delivered before any broker stored it; all or leader
    compression: brotli #want: events.kafka.compression: "brotli": none, gzip, snappy, lz4 or zstd
    tls: #want: events.kafka.tls.key: empty, but cert is set: give the private key of the certificate
      ca: /nonexistent/ca.pem #want: events.kafka.tls.ca: "/nonexistent/ca.pem" cannot be read
      cert: /nonexistent/cert.pem #want: events.kafka.tls.cert: "/nonexistent/cert.pem" cannot be read
      server_name: "" #want: events.kafka.tls.server_name: empty: leave it out to verify the host of each broker
    sasl: #want: events.kafka.sasl.username: missing: the SASL user
      mechanism: gssapi #want: events.kafka.sasl.mechanism: "gssapi": plain, scram-sha-256 or scram-sha-512
      password_env: FG_TEST_NO_SUCH_VAR #want: events.kafka.sasl.password_env: environment variable FG_TEST_NO_SUCH_VAR is not set
` + okRoute},
		{"kafka acks and sasl missing keys", `
events:
  sink: kafka
  spool_dir: /var/spool/fg
  kafka:
    brokers: ["10.0.0.1:9092"]
    topic: ".." #want: events.kafka.topic: ".." is not a Kafka topic name
    acks: "1" #want: events.kafka.acks: "1": all or leader
    tls: {ca: ""} #want: events.kafka.tls.ca: empty: leave it out to verify the brokers by the system's roots
    sasl: {password_env: "not a name"} #want: events.kafka.sasl.mechanism: missing: plain, scram-sha-256 or scram-sha-512 | events.kafka.sasl.username: missing: the SASL user | events.kafka.sasl.password_env: not an environment variable name
` + okRoute},
		{"kafka and a body longer than a record", `
events:
  sink: kafka
  spool_dir: /var/spool/fg
  max_body: 1048576 #want: events.max_body: 1048576 is more than the kafka sink can carry: at most 524288 (a record is at most 1 MB)
  kafka: {brokers: ["10.0.0.1:9092"]}
` + okRoute},
		{"audit and nats without spool", `
events:
  sink: nats #want: events.spool_dir: events.sink nats needs a spool_dir
` + okRoute},
		{"audit without a sink", `
events:
  audit: rejected #want: events.audit: audit rejected needs an events sink
` + okRoute},
		{"file sink without a path", `
events:
  sink: file
  file: {path: ""} #want: events.file.path: the file sink needs a path
` + okRoute},
		{"limit forms", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: both
        key: [ip]
        rate: 10/s
        limit: 10 #want: routes[0].limits[0].limit: give rate, or limit with window, not both
        window: 1s
      - name: nolimit
        key: [ip]
        window: 1s #want: routes[0].limits[1].window: window needs a limit
      - name: nowindow
        key: [ip]
        limit: 3 #want: routes[0].limits[2].limit: limit needs a window
      - name: none #want: routes[0].limits[3]: a limit needs a rate
        key: [ip]
      - name: conc-rate
        key: [ip]
        algorithm: concurrency
        rate: 10/s #want: routes[0].limits[4].rate: concurrency takes limit: N (requests in flight) alone, not a rate
      - name: conc-window
        key: [ip]
        algorithm: concurrency
        limit: 10
        window: 1s #want: routes[0].limits[5].window: concurrency takes limit: N (requests in flight) alone, not a window
      - name: conc-none #want: routes[0].limits[6]: concurrency needs limit: N
        key: [ip]
        algorithm: concurrency
      - name: conc-cost
        key: [ip]
        algorithm: concurrency
        limit: 5
        cost: 2 #want: routes[0].limits[7].cost: concurrency has no cost
`},
		{"algorithm fields", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: a
        key: [ip]
        algorithm: leaky_bucket #want: routes[0].limits[0].algorithm: unknown algorithm "leaky_bucket"
        rate: 1/s
      - name: b
        key: [ip]
        algorithm: sliding_window
        rate: 1/s
        align: first #want: routes[0].limits[1].align: align applies to fixed_window only
        burst: 5 #want: routes[0].limits[1].burst: burst applies to token_bucket only
        queue: 1s #want: routes[0].limits[1].queue: queue applies to token_bucket only
      - name: c
        key: [ip]
        rate: 1/d
        align: first
        tz: Asia/Shanghai #want: routes[0].limits[2].tz: tz applies to fixed_window with align epoch only
      - name: d
        key: [ip]
        rate: 1/d
        tz: Mars/Olympus_Mons #want: routes[0].limits[3].tz: unknown time zone "Mars/Olympus_Mons"
      - name: e
        key: [ip]
        rate: 1/d
        align: last #want: routes[0].limits[4].align: unknown align "last"
      - name: f
        key: [ip]
        rate: 1/d
        tz: Local #want: routes[0].limits[5].tz: tz "Local": name a zone
      - name: g
        key: [ip]
        rate: 5/s
        cost: 0 #want: routes[0].limits[6].cost: 0 must be positive
      - name: h
        key: [ip]
        algorithm: token_bucket
        rate: 5/s
        burst: 0 #want: routes[0].limits[7].burst: 0 must be positive
        queue: -1s #want: routes[0].limits[7].queue: -1s is negative
      - name: i
        key: [ip]
        rate: 5/s
        on_missing: skip #want: routes[0].limits[8].on_missing: unknown on_missing "skip"
        on_error: retry #want: routes[0].limits[8].on_error: unknown on_error "retry"
        reject: {status: 302, code: moved} #want: routes[0].limits[8].reject.status: 302 is outside 400..599
`},
		{"rule problems at the limit's line", `
global_limits:
  - name: big #want: global_limits[0]: sliding_window count 200000 is above 100000
    key: [global]
    algorithm: sliding_window
    rate: 200000/min
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: tb #want: routes[0].limits[0]: burst 2 is smaller than the cost 5
        key: [ip]
        algorithm: token_bucket
        rate: 10/s
        burst: 2
        cost: 5
      - name: fw #want: routes[0].limits[1]: cost 5 is larger than the count 3
        key: [ip]
        rate: 3/s
        cost: 5
      - name: ov
        key: [ip]
        algorithm: token_bucket
        rate: 10/s
        cost: 4
        overrides:
          - values: [1.2.3.4] #want: routes[0].limits[2].overrides[0]: burst 3 is smaller than the cost 4
            rate: 3/s
`},
		{"overrides", `
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: pair
        key: [header:X-User-Id, path]
        rate: 1/s
        overrides:
          - values: [[u1, /r], u2, [u3, /r, extra]] #want: routes[0].limits[0].overrides[0].values[1]: 1 values for a key of 2 parts | routes[0].limits[0].overrides[0].values[2]: 3 values for a key of 2 parts
            rate: 2/s
          - values: [[u1, /r]]
            header: {name: X-Tier, value: vip} #want: routes[0].limits[0].overrides[1].header: an override matches by values or by header, not both
            rate: 2/s
          - rate: 2/s #want: routes[0].limits[0].overrides[2]: an override needs values, header or claim
          - header: {name: "X Tier", value: ""} #want: routes[0].limits[0].overrides[3].header.name: "X Tier" is not a valid header name | routes[0].limits[0].overrides[3].header.value: empty
            rate: 2/s
          - values: [[u1, /r]] #want: routes[0].limits[0].overrides[4]: a limit needs a rate
          - values: [[u1, /r]]
            rate: 2/s
            burst: 4 #want: routes[0].limits[0].overrides[5].burst: burst applies to token_bucket only
          - values: [] #want: routes[0].limits[0].overrides[6].values: empty
            rate: 2/s
          - values: [{a: b}] #want: routes[0].limits[0].overrides[7].values[0]: want a key value or a list of them, got a mapping
            rate: 2/s
`},
		{"messages conflict", `
global_limits:
  - name: g
    key: [global]
    rate: 10/s
    reject: {code: system_busy, message: "Too busy, try again later"}
routes:
  - id: r
    match: {path: /r}
    upstream: {targets: ["http://x"]}
    limits:
      - name: l
        key: [ip]
        rate: 1/s
        reject: {code: system_busy, message: "Busy"} #want: routes[0].limits[0].reject.message: code system_busy has two messages: "Busy" here and "Too busy, try again later" at line 6
    fallback:
      code: system_busy
      message: "Too busy, try again later"
  - id: s
    match: {path: /s}
    upstream: {targets: ["http://x"]}
    fallback: {message: "Later"}
responses:
  system_busy: "Too busy, try again later"
  rate_limited: "Slow down"
  service_unavailable: "Down" #want: responses.service_unavailable: code service_unavailable has two messages: "Down" here and "Later" at line 22
  Bad-Code: "x" #want: responses.Bad-Code: "Bad-Code": a code is made of
  empty: "" #want: responses.empty: empty message
  other: x
  other: y #want: responses.other: key "other" repeated (first at line 29)
`},
		{"env secrets", `
admin:
  token_env: FG_TEST_UNSET_TOKEN #want: admin.token_env: environment variable FG_TEST_UNSET_TOKEN is not set
store:
  type: redis
  redis:
    addrs: ["127.0.0.1:6379"]
    password_env: FG_TEST_EMPTY_PASSWORD #want: store.redis.password_env: environment variable FG_TEST_EMPTY_PASSWORD is empty
` + okRoute},
		{"env and value both", `
admin:
  token: abc
  token_env: FG_TEST_TOKEN #want: admin.token_env: give token or token_env, not both
store:
  redis:
    password: pw
    password_env: "1BAD" #want: store.redis.password_env: give password or password_env, not both
` + okRoute},
		{"env name", `
store:
  redis:
    password_env: "NOT-A-NAME" #want: store.redis.password_env: not an environment variable name (letters, digits and _, not starting with a digit)
` + okRoute},
		{"null list entries", `
routes:
  - id: r
    match: {path: /r, methods: [GET, ~]} #want: routes[0].match.methods[1]: empty list entry
    upstream: {targets: ["http://x"]}
    limits:
      - #want: routes[0].limits[0]: empty list entry
`},
		{"aliases that refer to themselves", `
routes: &r
  - id: a
    match: {path: /a}
    upstream: {targets: ["http://x"]}
    limits: *r #want: routes[0].limits: alias *r refers to itself
`},
		{"merge keys that refer to themselves", `
routes:
  - &a
    id: a
    match: {path: /a}
    upstream: {targets: ["http://x"]}
    breaker:
      <<: *a #want: routes[0].breaker: alias *a refers to itself
`},
	}
	t.Setenv("FG_TEST_EMPTY_PASSWORD", "")
	t.Setenv("FG_TEST_TOKEN", "t")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.src) })
	}
}

// A secret written where it does not belong (a password in an address, a
// token where its variable's name goes) is never repeated by the message
// that refuses it: check prints it, the reload's ERROR line logs it and
// the unauthenticated /readyz quotes it.
func TestErrorsHideSecrets(t *testing.T) {
	const secret = "LEAKPW3"
	for _, tt := range []struct{ name, src, want string }{
		{"store address as a URL", `
store:
  type: redis
  redis: {addrs: ["redis://u:LEAKPW3@127.0.0.1:16399"]}
`, `store.redis.addrs[0]: "redis://***@127.0.0.1:16399" is not an address (HOST:PORT)`},
		{"store address with a lone password", `
store:
  type: redis
  redis: {addrs: ["LEAKPW3@127.0.0.1:16399"]}
`, `store.redis.addrs[0]: "***@127.0.0.1:16399" is not an address (HOST:PORT)`},
		{"store address with user and password", `
store:
  type: redis
  redis: {addrs: ["u:LEAKPW3@127.0.0.1:16399"]}
`, `store.redis.addrs[0]: "***@127.0.0.1:16399" is not an address`},
		{"sentinel addresses", `
store:
  type: redis
  redis: {mode: sentinel, master_name: m, addrs: ["10.0.0.1:26379", "rediss://:LEAKPW3@10.0.0.2:26379"]}
`, `store.redis.addrs[1]: "rediss://***@10.0.0.2:26379" is not an address`},
		{"events address", `
events:
  sink: redis
  spool_dir: /tmp
  redis: {addrs: ["redis://default:LEAKPW3@10.0.0.1:6379"]}
`, `events.redis.addrs[0]: "redis://***@10.0.0.1:6379" is not an address`},
		{"listen address", `
server: {listen: "http://u:LEAKPW3@0.0.0.0:8080"}
`, `server.listen: "http://***@0.0.0.0:8080" is not an address (HOST:PORT or :PORT)`},
		{"token pasted as its variable", `
admin: {token_env: "Sup3r-LEAKPW3-Token-Value"}
`, `admin.token_env: not an environment variable name (letters, digits and _, not starting with a digit)`},
		{"password pasted as its variable", `
store:
  redis: {password_env: "LEAKPW3!"}
`, `store.redis.password_env: not an environment variable name`},
		{"a list written as a URL", `
store:
  redis: {addrs: "redis://u:LEAKPW3@127.0.0.1:16399"}
`, `store.redis.addrs: want a list`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.src+okRoute))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("errors:\n%v\nwant one containing %s", err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the errors repeat the secret:\n%v", err)
			}
		})
	}
}

// A route that an earlier one hides is accepted, with a warning at its
// line: first match wins, as in other gateways.
func TestUnreachableRoutesWarn(t *testing.T) {
	c, err := Parse("test.yaml", []byte(`
routes:
  - id: all-api
    match: {path: /api/**}
    upstream: {targets: ["http://x"]}
  - id: orders
    match: {path: /api/orders, methods: [POST]}
    upstream: {targets: ["http://x"]}
  - id: get-only
    match: {path: /b, methods: [GET]}
    upstream: {targets: ["http://x"]}
  - id: post-b # not covered: the earlier route takes GET only
    match: {path: /b, methods: [POST]}
    upstream: {targets: ["http://x"]}
  - id: other-host # not covered: the earlier route takes any host, but this one is a different path
    match: {path: /apix, host: a.example}
    upstream: {targets: ["http://x"]}
  - id: post-b-again
    match: {path: /b, methods: [post]}
    upstream: {targets: ["http://x"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Error())
	}
	want := []string{
		`test.yaml:7: routes[1].match: unreachable: route "all-api" (line 3) takes every request this route matches (the first match wins)`,
		`test.yaml:19: routes[5].match: unreachable: route "post-b" (line 12) takes every request this route matches (the first match wins)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(mustParse(t, okRoute).Warnings) != 0 {
		t.Error("a config without problems has warnings")
	}
}

// sync: lease on the memory store is accepted with a warning: there is
// nothing to lease from, and the limit is exact as it is.
func TestLeaseOnMemoryWarns(t *testing.T) {
	c := mustParse(t, `
global_limits: [{name: g, key: [global], rate: 10/s, sync: lease}]
`+okRoute)
	var got []string
	for _, w := range c.Warnings {
		got = append(got, w.Error())
	}
	want := []string{`test.yaml:2: global_limits[0].sync: lease has nothing to lease from with the memory store, which decides in this process: the limit is exact`}
	if !slices.Equal(got, want) {
		t.Errorf("warnings %q, want %q", got, want)
	}
	if !c.GlobalLimits[0].Rule.Sliced {
		t.Error("the rule is not sliced")
	}
}

// An admin listener beyond loopback without a token is refused at the line
// of admin.listen, unless allow_open accepts it; loopback needs nothing.
func TestAdminOpen(t *testing.T) {
	const fix = "set admin.token or admin.token_env, or write admin.allow_open: true to accept an open admin API"
	refused := []struct {
		name, src string
	}{
		{"every interface, no host", `
admin:
  listen: ":9090" #want: admin.listen: ":9090" is not loopback (an empty host means every interface) and admin.token is not set, so anyone who reaches it may reload the config, reset limits and force breakers; ` + fix + `
`},
		{"every IPv4 interface", `
admin: {listen: "0.0.0.0:9090"} #want: admin.listen: "0.0.0.0:9090" is not loopback (0.0.0.0 means every interface) and admin.token is not set
`},
		{"every IPv6 interface", `
admin: {listen: "[::]:9090"} #want: admin.listen: "[::]:9090" is not loopback (:: means every interface) and admin.token is not set
`},
		{"every interface through an IPv4-mapped address", `
admin: {listen: "[::ffff:0.0.0.0]:9090"} #want: admin.listen: "[::ffff:0.0.0.0]:9090" is not loopback (::ffff:0.0.0.0 means every interface)
`},
		{"a private address", `
admin:
  listen: "10.0.0.5:9090" #want: admin.listen: "10.0.0.5:9090" is not loopback and admin.token is not set, so anyone who reaches it may reload the config, reset limits and force breakers; ` + fix + `
`},
		{"a public IPv6 address", `
admin: {listen: "[2001:db8::1]:9090"} #want: admin.listen: "[2001:db8::1]:9090" is not loopback and admin.token is not set

`},
		{"a link-local address with a zone", `
admin: {listen: "[fe80::1%eth0]:9090"} #want: admin.listen: "[fe80::1%eth0]:9090" is not loopback and admin.token
`},
		{"a host name", `
admin: {listen: "admin.internal:9090"} #want: admin.listen: "admin.internal:9090" is not loopback (a host name other than localhost may resolve to any address)
`},
		{"a host name that starts like loopback", `
admin: {listen: "127.0.0.1.evil.com:9090"} #want: admin.listen: "127.0.0.1.evil.com:9090" is not loopback (a host name other than localhost may resolve to any address)
`},
		{"a subdomain of localhost", `
admin: {listen: "evil.localhost:9090"} #want: admin.listen: "evil.localhost:9090" is not loopback (a host name
`},
		{"a short form of 127.0.0.1, which is a name to the resolver", `
admin: {listen: "127.1:9090"} #want: admin.listen: "127.1:9090" is not loopback (a host name
`},
		{"an empty token is no token", `
admin:
  listen: "0.0.0.0:9090" #want: admin.listen: "0.0.0.0:9090" is not loopback
  token: ""
`},
		{"allow_open false is the default", `
admin:
  listen: ":9090" #want: admin.listen: ":9090" is not loopback
  allow_open: false
`},
		// A token_env that fails is its own error, and an address that
		// does not parse is, not also an open listener.
		{"a token_env that fails", `
admin:
  listen: ":9090"
  token_env: FG_TEST_UNSET_TOKEN #want: admin.token_env: environment variable FG_TEST_UNSET_TOKEN is not set
`},
		{"not an address", `
admin: {listen: "9090"} #want: admin.listen: "9090" is not an address (HOST:PORT or :PORT)
`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) { checkErrors(t, tt.src+okRoute) })
	}

	t.Setenv("FG_TEST_TOKEN", "t")
	accepted := []struct {
		name, admin string
	}{
		{"the default", ""},
		{"127.0.0.1", `admin: {listen: "127.0.0.1:9090"}`},
		{"anywhere in 127.0.0.0/8", `admin: {listen: "127.10.20.30:9090"}`},
		{"::1", `admin: {listen: "[::1]:9090"}`},
		{"::1 with a zone", `admin: {listen: "[::1%lo]:9090"}`},
		{"IPv4-mapped loopback", `admin: {listen: "[::ffff:127.0.0.1]:9090"}`},
		{"localhost", `admin: {listen: "localhost:9090"}`},
		{"LOCALHOST", `admin: {listen: "LOCALHOST:9090"}`},
		{"no admin listener", `admin: {listen: ""}`},
		{"a token", `admin: {listen: ":9090", token: s3cret}`},
		{"a token from the environment", `admin: {listen: "0.0.0.0:9090", token_env: FG_TEST_TOKEN}`},
		{"allow_open", `admin: {listen: "[::]:9090", allow_open: true}`},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.admin+"\n"+okRoute)
			if len(c.Warnings) != 0 {
				t.Errorf("warnings: %v", c.Warnings)
			}
		})
	}
}

// A flag's value is held to the rules of the key it replaces, and its
// problems name the flag, at no line.
func TestAdminListenFlag(t *testing.T) {
	const open = `"0.0.0.0:9090" is not loopback (0.0.0.0 means every interface) and admin.token is not set, ` +
		`so anyone who reaches it may reload the config, reset limits and force breakers; ` +
		`set admin.token or admin.token_env, or write admin.allow_open: true to accept an open admin API`
	tests := []struct {
		name, src, flag string
		want            []string // the errors; none: the config is accepted with flag as admin.listen
	}{
		{"open beyond loopback", okRoute, "0.0.0.0:9090", []string{"test.yaml: --admin: " + open}},
		{"open in place of a loopback file value", "admin: {listen: \"127.0.0.1:9090\"}\n" + okRoute, "0.0.0.0:9090",
			[]string{"test.yaml: --admin: " + open}},
		{"loopback in place of an open file value", "admin: {listen: \":9090\"}\n" + okRoute, "127.0.0.1:9191", nil},
		{"with a token in the file", "admin: {token: s3cret}\n" + okRoute, "0.0.0.0:9090", nil},
		{"with allow_open in the file", "admin: {allow_open: true}\n" + okRoute, "[::]:9090", nil},
		{"no admin listener", "admin: {listen: \":9090\"}\n" + okRoute, "", nil},
		{"not an address", okRoute, "9090", []string{`test.yaml: --admin: "9090" is not an address (HOST:PORT or :PORT)`}},
		{"overlapping the gateway", "server: {listen: \":8080\"}\nadmin: {token: s3cret}\n" + okRoute, "0.0.0.0:8080",
			[]string{`test.yaml: --admin: "0.0.0.0:8080" overlaps server.listen ":8080" (line 1)`}},
		{"overlapped by rls", "rls: {listen: \":9090\"}\n" + okRoute, "127.0.0.1:9090",
			[]string{`test.yaml:1: rls.listen: ":9090" overlaps admin.listen "127.0.0.1:9090" (--admin)`}},
		{"with the file's own problems", "admin: {listen: [x]}\nserver: {listen: \"8080\"}\n" + okRoute, "0.0.0.0:9090",
			[]string{"test.yaml: --admin: " + open,
				`test.yaml:1: admin.listen: want a string, got a list`,
				`test.yaml:2: server.listen: "8080" is not an address (HOST:PORT or :PORT)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.TrimPrefix(tt.src, "\n")
			c, err := ParseWithFlags("test.yaml", []byte(src), Flags{AdminListen: &Flag{Name: "--admin", Value: tt.flag}})
			var got []string
			var errs Errors
			if errors.As(err, &errs) {
				for _, e := range errs {
					got = append(got, e.Error())
				}
			} else if err != nil {
				t.Fatalf("ParseWithFlags returned %T: %v", err, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if err == nil && c.Admin.Listen != tt.flag {
				t.Errorf("admin.listen %q, want the flag's %q", c.Admin.Listen, tt.flag)
			}
		})
	}
	// Without flags, the file's value stands.
	c, err := ParseWithFlags("test.yaml", []byte("admin: {listen: \"127.0.0.1:9191\"}\n"+okRoute), Flags{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Listen != "127.0.0.1:9191" {
		t.Errorf("no flags: admin.listen %q, want the file's 127.0.0.1:9191", c.Admin.Listen)
	}
}
